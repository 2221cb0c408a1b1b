//! The reconciliation checks' reads and records on PostgreSQL
//! (`outbox_core::reconcile`), implemented on [`PgStore`](crate::PgStore) so a
//! command can run a check on the store it opened:
//!
//! - [`sequences`]: `InboxSequences` over a consumer database's inbox tables;
//! - [`completeness`]: `CompletenessStore`, the outbox read through
//!   `read_committed` (commit order, under the snapshot-xmin horizon) with its
//!   delivery states, plus the check's own checkpoint and transactions seen
//!   (`reconcile_checkpoints`, `reconcile_seen`, migration 9);
//! - [`posted`]: `PostedHistory`, what the relay last posted on an account.

mod completeness;
mod posted;
pub(crate) mod sequences;

/// A limit as a Postgres bigint (a `usize` beyond it means "no limit").
fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}
