//! Retention on SQLite: records leave by whole expired UTC days, family by family,
//! each day in its own transaction and only through a retention permit
//! (README: "Retention").
//!
//! Why permits and not one database file per day: an ATTACHed file does not commit
//! atomically with the main one in WAL mode, so an outbox row kept in a day file
//! could commit without the caller's payout intent. The rows stay in the caller's
//! file; the DELETE triggers refuse every row no permit covers, and the database
//! grants a permit only for a day past the current policy's retention.

mod fanout;
mod inbox;
mod outbox;
mod policy;

use chrono::NaiveDate;
use outbox_core::{
    Error, ErrorKind, KeptBecause, PeriodOutcome, RetentionFamily, RetentionPolicy,
    RetentionReport, StoredRetentionPolicy,
};
use rusqlite::{Connection, Transaction, params};

pub use policy::{load_retention_policy, save_retention_policy};

use crate::SqliteStore;
use crate::error::SqliteResultExt;
use crate::time;

/// One UTC day in unix microseconds, the unit of every timestamp in this schema.
pub(crate) const DAY: i64 = 86_400_000_000;

/// Applies this database's stored retention policy to every record table it holds:
/// the outbox and its delivery records, the fan-out log (messages, webhook ids, dead
/// letters and replay requests), the inbox's processed markers and the exception
/// queue. A UTC day leaves only when it ended at least `keep` ago (by the database's
/// clock) and every record in it is terminal:
///
/// - outbox: every event has a terminal delivery record (accepted, replayed or
///   rejected), and the day does not hold the outbox's newest event (positions are
///   numbered after it);
/// - fan-out messages: at least one destination has a cursor, every destination's
///   cursor has passed the day's last message, and no message of the day is dead
///   lettered at a destination that has not re-published it (parked or replaying);
/// - dead letters: one destination's and account's letters and replay requests leave
///   together, once the account is replayed, the destination's cursor passed its
///   last letter, and the group's newest record is past retention;
/// - inbox markers: the consumer holds nothing of the day's accounts in its gap
///   queue (the per-account high-water marks always stay);
/// - exceptions (with their resolutions): every exception of the day is resolved,
///   and no account they name still has an outbox event without a terminal
///   delivery, or a held message, from before the day ended.
///
/// Each day is one `IMMEDIATE` transaction: the permit (`outbox_retention_permits`,
/// naming the policy, the row count and `granted_by`), then the bulk DELETEs. The
/// write lock is held for one day's rows at a time; run it off-peak on a large file.
/// Expired days that stay are reported with their reason; days not yet expired are
/// not listed. A policy that keeps forever drops nothing.
///
/// # Errors
/// `NotFound` with field `policy` when no policy is stored; storage errors (BUSY is
/// transient, and the days already dropped stay dropped).
pub fn apply_retention(
    conn: &mut Connection,
    granted_by: &str,
) -> outbox_core::Result<RetentionReport> {
    let stored = load_retention_policy(conn)?.ok_or_else(no_policy)?;
    let mut report = RetentionReport::default();
    let Some(keep) = stored.policy.keep().seconds() else {
        return Ok(report);
    };
    // Whole seconds, like the permit trigger's clock, so both agree on the cutoff.
    let now: i64 = conn
        .query_row("SELECT CAST(strftime('%s', 'now') AS INTEGER)", [], |row| {
            row.get(0)
        })
        .storage()?;
    let limit = (now - keep as i64) * 1_000_000;
    let mut pass = Pass {
        policy_id: stored.id as i64,
        granted_by,
        // A day [start, start + DAY) is past retention when start + DAY <= limit: it
        // holds rows stamped before the last midnight at or before the limit.
        horizon: limit - limit.rem_euclid(DAY),
        report: &mut report,
    };
    outbox::run(conn, &mut pass)?;
    fanout::run_messages(conn, &mut pass)?;
    fanout::run_dead_letters(conn, &mut pass)?;
    inbox::run_markers(conn, &mut pass)?;
    inbox::run_exceptions(conn, &mut pass)?;
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

/// One retention run: the policy it applies and what it decided so far.
pub(crate) struct Pass<'a> {
    policy_id: i64,
    granted_by: &'a str,
    /// Rows stamped before this instant are in days past retention.
    pub(crate) horizon: i64,
    report: &'a mut RetentionReport,
}

impl Pass<'_> {
    pub(crate) fn kept(
        &mut self,
        family: RetentionFamily,
        day_start: i64,
        group: Option<String>,
        reason: KeptBecause,
    ) {
        let reason = reason.to_string();
        tracing::info!(family = family.as_str(), day = %day(day_start), %reason, "retention: day kept");
        self.report.push(
            family,
            day(day_start),
            group,
            PeriodOutcome::Kept { reason },
        );
    }

    /// Writes the permit for the day (and group) in `tx`: the database checks it
    /// against the current policy and its own clock.
    pub(crate) fn grant(
        &self,
        tx: &Transaction<'_>,
        family: RetentionFamily,
        day_start: i64,
        group: Option<(&str, &str)>,
        rows: i64,
    ) -> outbox_core::Result<()> {
        tx.prepare_cached(
            "INSERT INTO outbox_retention_permits (family, period_start, period_end, destination,
                 account, policy_id, rows, granted_by, granted_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .storage()?
        .execute(params![
            family.as_str(),
            day_start,
            day_start + DAY,
            group.map(|g| g.0),
            group.map(|g| g.1),
            self.policy_id,
            rows,
            self.granted_by,
            time::now_micros()
        ])
        .storage()
        .map(drop)
    }

    pub(crate) fn dropped(
        &mut self,
        family: RetentionFamily,
        day_start: i64,
        group: Option<String>,
        rows: i64,
    ) {
        tracing::info!(family = family.as_str(), day = %day(day_start), rows, "retention: day dropped");
        self.report.push(
            family,
            day(day_start),
            group,
            PeriodOutcome::Dropped { rows: rows as u64 },
        );
    }
}

fn day(day_start: i64) -> NaiveDate {
    time::from_micros(day_start).date_naive()
}

/// The `[start, start + DAY)` days of rows stamped before `horizon`, from `sql`
/// selecting one day start per row group (`?1` = DAY, `?2` = horizon), oldest first.
pub(crate) fn days(conn: &Connection, sql: &str, horizon: i64) -> outbox_core::Result<Vec<i64>> {
    let mut stmt = conn.prepare(sql).storage()?;
    let rows = stmt
        .query_map(params![DAY, horizon], |row| row.get(0))
        .storage()?;
    rows.collect::<rusqlite::Result<Vec<i64>>>().storage()
}

/// The retention API on the store's file, each call on a connection of its own, off
/// the async runtime.
impl SqliteStore {
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
        let (policy, set_by) = (*policy, set_by.to_owned());
        self.blocking(move |conn| save_retention_policy(conn, &policy, &set_by))
            .await
    }

    /// The retention policy in force in this database, if any; see
    /// [`load_retention_policy`].
    ///
    /// # Errors
    /// As [`load_retention_policy`].
    pub async fn load_retention_policy(
        &self,
    ) -> outbox_core::Result<Option<StoredRetentionPolicy>> {
        self.blocking(|conn| load_retention_policy(conn)).await
    }

    /// Applies the stored policy to every record table of the file; see
    /// [`apply_retention`].
    ///
    /// # Errors
    /// As [`apply_retention`].
    pub async fn apply_retention(&self, granted_by: &str) -> outbox_core::Result<RetentionReport> {
        let granted_by = granted_by.to_owned();
        self.blocking(move |conn| apply_retention(conn, &granted_by))
            .await
    }

    async fn blocking<T, F>(&self, f: F) -> outbox_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> outbox_core::Result<T> + Send + 'static,
    {
        let config = self.config().clone();
        tokio::task::spawn_blocking(move || f(&mut crate::connect(&config)?))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("sqlite retention task failed: {e}"),
                )
            })?
    }
}
