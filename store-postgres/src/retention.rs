//! Retention on PostgreSQL: the outbox leaves by whole daily partitions, every other
//! record table by whole expired UTC days through a retention permit, family by
//! family, each day in its own transaction (README: "Partitions and retention").

mod consumer;
mod fanout;
mod outbox;
mod policy;

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{
    Error, ErrorKind, Keep, KeptBecause, PeriodOutcome, RetentionFamily, RetentionPolicy,
    RetentionReport, StoredRetentionPolicy,
};
use sqlx::{PgPool, Postgres, Transaction};

pub use outbox::{PartitionReport, drop_expired};
pub use policy::{load_retention_policy, save_retention_policy};

use crate::PgStore;
use crate::error::PgResultExt;

/// How one retention pass runs.
#[derive(Debug, Clone, Copy)]
pub struct RetentionOptions<'a> {
    /// Who runs it; recorded on every permit (`granted_by`), beside the database role.
    pub granted_by: &'a str,
    /// `outbox retention --older-than`: drop the outbox's daily partitions older than
    /// this instead of the stored `keep`. Never shorter than the stored ledger
    /// retention. Without a stored policy only the outbox partitions are considered
    /// (the other tables need the policy); `None`: the stored policy for everything.
    pub outbox_older_than: Option<Duration>,
}

/// Applies this database's stored retention policy to every record table it holds.
/// A UTC day leaves only when it ended at least `keep` ago (by the database's clock)
/// and every record in it is terminal:
///
/// - outbox (`outbox_events` + `outbox_deliveries`): the day's partitions are
///   detached and dropped once every event has a terminal delivery record
///   ([`drop_expired`]); no row is deleted;
/// - fan-out messages (+ webhook ids): at least one destination has a cursor, every
///   destination's cursor has passed the day's last message, and no message of the
///   day is dead lettered at a destination that has not re-published it;
/// - dead letters + replay requests of one destination and account: together, once
///   the account is replayed, the destination's cursor passed its last letter, and
///   the group's newest record is past retention;
/// - inbox markers: the consumer holds nothing of the day's accounts in its gap
///   queue (`inbox_accounts` high-water marks always stay);
/// - exceptions (with their resolutions): every exception of the day is resolved,
///   and no account they name still has an outbox event without a terminal
///   delivery, or a held message, from before the day ended.
///
/// Every day except the outbox's is one transaction: a transaction-scoped advisory
/// lock (one retention pass per schema at a time), the permit
/// (`outbox_retention_permits`, naming the policy and the row count), then bulk
/// DELETEs that the append-only triggers let through for that day only. Expired days
/// that stay are reported with their reason; days not yet expired are not listed. A
/// policy that keeps forever drops nothing.
///
/// # Errors
/// `NotFound` with field `policy` when no policy is stored and no override is given;
/// `InvalidInput { field: "older_than" }` for an override shorter than the ledger's
/// retention; storage errors (the days already dropped stay dropped).
pub async fn apply_retention(
    pool: &PgPool,
    options: &RetentionOptions<'_>,
) -> outbox_core::Result<RetentionReport> {
    let stored = load_retention_policy(pool).await?;
    if stored.is_none() && options.outbox_older_than.is_none() {
        return Err(no_policy());
    }
    if let (Some(age), Some(stored)) = (options.outbox_older_than, &stored) {
        let ledger = stored.policy.ledger_keeps();
        let age = Keep::from_seconds("older_than", age.as_secs())?;
        if age < ledger {
            return Err(Error::invalid(
                "older_than",
                format!(
                    "dropping outbox partitions older than {age} is shorter than the ledger's retention \
                     ({ledger}, policy {} set by {}): keep at least {ledger}",
                    stored.id, stored.set_by
                ),
            ));
        }
    }
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(pool)
        .await
        .storage()?;
    let mut report = RetentionReport::default();
    let outbox_cutoff = match options.outbox_older_than {
        Some(age) => {
            let age = chrono::Duration::from_std(age)
                .map_err(|_| Error::invalid("older_than", "too long"))?;
            Some(now - age)
        }
        None => stored.as_ref().and_then(|s| s.policy.cutoff(now)),
    };
    if let Some(cutoff) = outbox_cutoff {
        outbox::report(pool, cutoff, &mut report).await?;
    }
    let Some(stored) = stored else {
        return Ok(report);
    };
    let Some(cutoff) = stored.policy.cutoff(now) else {
        return Ok(report);
    };
    let mut pass = Pass {
        policy_id: stored.id as i64,
        granted_by: options.granted_by,
        horizon: last_midnight(cutoff),
        report: &mut report,
    };
    fanout::run_messages(pool, &mut pass).await?;
    fanout::run_dead_letters(pool, &mut pass).await?;
    consumer::run_markers(pool, &mut pass).await?;
    consumer::run_exceptions(pool, &mut pass).await?;
    Ok(report)
}

fn no_policy() -> Error {
    Error::new(
        ErrorKind::NotFound,
        "no retention policy is stored in this database: run `outbox retention set --database … \
         --keep … --ledger-keeps …` first (keep at least what the ledger keeps)",
    )
    .with("field", "policy")
}

/// The last UTC midnight at or before `at`: a day that starts before it has ended by
/// `at`.
fn last_midnight(at: DateTime<Utc>) -> DateTime<Utc> {
    at.date_naive()
        .and_hms_opt(0, 0, 0)
        .map_or(at, |midnight| midnight.and_utc())
}

/// One retention run: the policy it applies and what it decided so far.
pub(crate) struct Pass<'a> {
    policy_id: i64,
    granted_by: &'a str,
    /// Rows stamped before this instant are in days past retention.
    pub(crate) horizon: DateTime<Utc>,
    report: &'a mut RetentionReport,
}

/// A permit-managed day's bounds.
pub(crate) fn day_end(start: DateTime<Utc>) -> DateTime<Utc> {
    start + chrono::Duration::hours(24)
}

impl Pass<'_> {
    pub(crate) fn kept(
        &mut self,
        family: RetentionFamily,
        start: DateTime<Utc>,
        group: Option<String>,
        reason: KeptBecause,
    ) {
        let reason = reason.to_string();
        tracing::info!(family = family.as_str(), day = %start.date_naive(), %reason, "retention: day kept");
        self.report.push(
            family,
            start.date_naive(),
            group,
            PeriodOutcome::Kept { reason },
        );
    }

    pub(crate) fn dropped(
        &mut self,
        family: RetentionFamily,
        start: DateTime<Utc>,
        group: Option<String>,
        rows: i64,
    ) {
        tracing::info!(family = family.as_str(), day = %start.date_naive(), rows, "retention: day dropped");
        self.report.push(
            family,
            start.date_naive(),
            group,
            PeriodOutcome::Dropped {
                rows: rows.max(0) as u64,
            },
        );
    }

    /// Opens one day's transaction, serialised with other retention passes of the
    /// schema, so two passes never both count and permit the same rows.
    pub(crate) async fn begin(
        pool: &PgPool,
    ) -> outbox_core::Result<Transaction<'static, Postgres>> {
        let mut tx = pool.begin().await.storage()?;
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtextextended(n.nspname || '.outbox_retention', 0))
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = 'outbox_retention_permits'::regclass",
        )
        .execute(&mut *tx)
        .await
        .storage()?;
        Ok(tx)
    }

    /// Writes the permit for the day (and group) in `tx`: the database checks it
    /// against the current policy and its own clock.
    pub(crate) async fn grant(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        family: RetentionFamily,
        start: DateTime<Utc>,
        group: Option<(&str, &str)>,
        rows: i64,
    ) -> outbox_core::Result<()> {
        sqlx::query(
            "INSERT INTO outbox_retention_permits (family, period_start, period_end, destination,
                 account, policy_id, rows, granted_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(family.as_str())
        .bind(start)
        .bind(day_end(start))
        .bind(group.map(|g| g.0))
        .bind(group.map(|g| g.1))
        .bind(self.policy_id)
        .bind(rows)
        .bind(self.granted_by)
        .execute(&mut **tx)
        .await
        .storage()
        .map(drop)
    }
}

/// The retention API on the store's pool.
impl PgStore {
    /// Records `policy` as this database's retention policy; see
    /// [`save_retention_policy`].
    ///
    /// # Errors
    /// As [`save_retention_policy`].
    pub async fn save_retention_policy(
        &self,
        policy: &RetentionPolicy,
        set_by: &str,
    ) -> outbox_core::Result<StoredRetentionPolicy> {
        save_retention_policy(self.pool(), policy, set_by).await
    }

    /// The retention policy in force in this database, if any; see
    /// [`load_retention_policy`].
    ///
    /// # Errors
    /// As [`load_retention_policy`].
    pub async fn load_retention_policy(
        &self,
    ) -> outbox_core::Result<Option<StoredRetentionPolicy>> {
        load_retention_policy(self.pool()).await
    }

    /// Applies the stored policy to every record table of the schema; see
    /// [`apply_retention`].
    ///
    /// # Errors
    /// As [`apply_retention`].
    pub async fn apply_retention(
        &self,
        options: &RetentionOptions<'_>,
    ) -> outbox_core::Result<RetentionReport> {
        apply_retention(self.pool(), options).await
    }
}
