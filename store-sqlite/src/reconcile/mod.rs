//! The reconciliation checks' reads and records on SQLite (`outbox_core::reconcile`),
//! implemented on [`SqliteStore`](crate::SqliteStore) so a command can run a check on
//! the store it opened:
//!
//! - [`sequences`]: `InboxSequences` over a consumer database's inbox tables;
//! - [`completeness`]: `CompletenessStore`, the outbox read in commit order with its
//!   delivery states, plus the check's own checkpoint and transactions seen
//!   (`reconcile_checkpoints`, `reconcile_seen`, migration 0006);
//! - [`posted`]: `PostedHistory`, what the relay last posted on an account.

mod completeness;
mod posted;
pub(crate) mod sequences;

/// Texts as one JSON array, for `IN (SELECT value FROM json_each(?))`: one statement
/// for a whole batch, whatever its size.
fn texts_json<S: AsRef<str>>(texts: &[S]) -> String {
    let texts: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
    // A list of strings always serialises.
    serde_json::to_string(&texts).unwrap_or_else(|_| "[]".to_owned())
}

/// A stored integer that must not be negative, as `u64`; `column` names it otherwise.
fn unsigned(column: &'static str, value: i64) -> rusqlite::Result<u64> {
    u64::try_from(value).map_err(|_| {
        crate::store::internal(column)(outbox_core::Error::invalid(
            column,
            format!("negative value {value}"),
        ))
    })
}

/// A limit as SQLite's integer (a `usize` beyond it means "no limit").
fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}
