//! The database's retention policy (`outbox_retention_policies`, migration 0004):
//! insert-only, the latest row is in force.

use outbox_core::{Error, ErrorKind, Keep, RetentionPolicy, StoredRetentionPolicy};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::SqliteResultExt;
use crate::time;

/// Records `policy` as this database's retention policy, set by `set_by` (an
/// operator's name), and returns it as stored. Earlier policies stay, as history; the
/// new one is in force from now on. `RetentionPolicy` cannot be built with a `keep`
/// shorter than the ledger's, and the table refuses such a row too (CHECK).
///
/// # Errors
/// `InvalidInput { field: "set_by" }` when `set_by` is empty; storage errors (BUSY is
/// transient).
pub fn save_retention_policy(
    conn: &Connection,
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
    let set_at = time::now_micros();
    let id: i64 = conn
        .prepare_cached(
            "INSERT INTO outbox_retention_policies (keep_seconds, ledger_keeps_seconds, set_by, set_at)
             VALUES (?1, ?2, ?3, ?4) RETURNING id",
        )
        .storage()?
        .query_row(
            params![
                seconds(policy.keep()),
                seconds(policy.ledger_keeps()),
                set_by,
                set_at
            ],
            |row| row.get(0),
        )
        .storage()?;
    Ok(StoredRetentionPolicy {
        id: id as u64,
        policy: *policy,
        set_by: set_by.to_owned(),
        set_at: time::from_micros(set_at),
    })
}

/// `id, keep_seconds, ledger_keeps_seconds, set_by, set_at` as stored.
type PolicyRow = (i64, Option<i64>, Option<i64>, String, i64);

/// The retention policy in force in this database (its latest row), or `None` when
/// none was ever set. This is what `outbox retention` applies and what a check of
/// the audit controls compares with the ledger's retention: `policy.keep()` is at
/// least `policy.ledger_keeps()` by construction.
///
/// Works on any connection to the file, inside a transaction or not; it only reads.
///
/// # Errors
/// Storage errors; `Internal` for a stored row no policy could produce.
pub fn load_retention_policy(
    conn: &Connection,
) -> outbox_core::Result<Option<StoredRetentionPolicy>> {
    let row: Option<PolicyRow> = conn
        .prepare_cached(
            "SELECT id, keep_seconds, ledger_keeps_seconds, set_by, set_at
             FROM outbox_retention_policies ORDER BY id DESC LIMIT 1",
        )
        .storage()?
        .query_row([], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .optional()
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
        set_at: time::from_micros(set_at),
    }))
}
