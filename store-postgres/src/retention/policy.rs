//! The database's retention policy (`outbox_retention_policies`, migration 7):
//! insert-only, the latest row is in force.

use chrono::{DateTime, Utc};
use outbox_core::{Error, ErrorKind, Keep, RetentionPolicy, StoredRetentionPolicy};
use sqlx::{Executor, PgPool, Postgres};

use crate::error::PgResultExt;

/// Records `policy` as this database's retention policy, set by `set_by` (an
/// operator's name; the database role is kept beside it), and returns it as stored.
/// Earlier policies stay, as history; the new one is in force from now on.
/// `RetentionPolicy` cannot be built with a `keep` shorter than the ledger's, and the
/// table refuses such a row too (CHECK).
///
/// # Errors
/// `InvalidInput { field: "set_by" }` when `set_by` is blank; storage errors.
pub async fn save_retention_policy(
    pool: &PgPool,
    policy: &RetentionPolicy,
    set_by: &str,
) -> outbox_core::Result<StoredRetentionPolicy> {
    if set_by.trim().is_empty() {
        return Err(Error::invalid(
            "set_by",
            "say who sets the retention policy (a name for the record)",
        ));
    }
    let seconds = |keep: Keep| keep.seconds().map(|s| s as i64);
    let (id, set_at): (i64, DateTime<Utc>) = sqlx::query_as(
        "INSERT INTO outbox_retention_policies (keep_seconds, ledger_keeps_seconds, set_by)
         VALUES ($1, $2, $3) RETURNING id, set_at",
    )
    .bind(seconds(policy.keep()))
    .bind(seconds(policy.ledger_keeps()))
    .bind(set_by)
    .fetch_one(pool)
    .await
    .storage()?;
    Ok(StoredRetentionPolicy {
        id: id as u64,
        policy: *policy,
        set_by: set_by.to_owned(),
        set_at,
    })
}

/// `id, keep_seconds, ledger_keeps_seconds, set_by, set_at` as stored.
type PolicyRow = (i64, Option<i64>, Option<i64>, String, DateTime<Utc>);

/// The retention policy in force in this database (its latest row), or `None` when
/// none was ever set. This is what `outbox retention` applies and what a check of
/// the audit controls compares with the ledger's retention: `policy.keep()` is at
/// least `policy.ledger_keeps()` by construction.
///
/// Takes any executor on a connection that finds the outbox tables (the store's pool,
/// or `&mut *tx`); it only reads.
///
/// # Errors
/// Storage errors; `Internal` for a stored row no policy could produce.
pub async fn load_retention_policy<'e, E>(
    executor: E,
) -> outbox_core::Result<Option<StoredRetentionPolicy>>
where
    E: Executor<'e, Database = Postgres>,
{
    let row: Option<PolicyRow> = sqlx::query_as(
        "SELECT id, keep_seconds, ledger_keeps_seconds, set_by, set_at
         FROM outbox_retention_policies ORDER BY id DESC LIMIT 1",
    )
    .fetch_optional(executor)
    .await
    .storage()?;
    let Some((id, keep, ledger_keeps, set_by, set_at)) = row else {
        return Ok(None);
    };
    let corrupt = |e: Error| {
        Error::new(
            ErrorKind::Internal,
            format!("outbox_retention_policies row {id}: {}", e.message()),
        )
    };
    let read = |field: &str, seconds: Option<i64>| match seconds {
        None => Ok(Keep::Forever),
        Some(s) => Keep::from_seconds(field, s.max(0) as u64).map_err(corrupt),
    };
    let policy = RetentionPolicy::new(read("keep", keep)?, read("ledger_keeps", ledger_keeps)?)
        .map_err(corrupt)?;
    Ok(Some(StoredRetentionPolicy {
        id: id as u64,
        policy,
        set_by,
        set_at,
    }))
}
