//! The relay's read costs a batch, not the backlog: a payout batch committed in one
//! transaction is read 500 rows at a time, and each read must look at about that many
//! rows, not sort every row after the cursor (the crate README, "How the relay reads
//! in commit order").
//!
//! What a read looked at is counted by the server (`idx_tup_fetch` + `seq_tup_read` of
//! the outbox partitions in `pg_stat_user_tables`), never timed. The store has one
//! connection, so the test's statements and the store's read run on one backend, and
//! that backend's counters are flushed once it has been idle a second (PostgreSQL's
//! minimum flush interval; an idle backend flushes within ten seconds in any case).

mod common;

use common::{counted_since, flush, fresh_config, open_store_with, rows_looked_at};
use outbox_core::Store;
use outbox_store_postgres::enqueue;
use outbox_testkit::fixtures::payout;

/// Events of the backlog, committed in one transaction as a payout batch would be.
const BACKLOG: usize = 3_000;
/// Rows each measured read asks for.
const LIMIT: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_committed_in_one_transaction_is_read_a_batch_at_a_time() {
    let mut config = fresh_config();
    config.max_connections = 1;
    let Some(db) = open_store_with(config).await else {
        return;
    };
    let mut tx = db.pool().begin().await.unwrap();
    for n in 0..BACKLOG {
        enqueue(&mut tx, &payout(&format!("{}", n % 100), 1_000 + n as u64))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // What autovacuum does soon after a large load.
    sqlx::query("ANALYZE outbox_events")
        .execute(db.pool())
        .await
        .unwrap();

    let first = db.store.read_committed(None, LIMIT).await.unwrap();
    assert_eq!(first.len(), LIMIT);
    let mut after = first.last().map(|e| e.position);
    let mut seen = first.len();
    for round in 0..3 {
        flush(db.pool()).await;
        let before = rows_looked_at(db.pool()).await;
        let batch = db.store.read_committed(after, LIMIT).await.unwrap();
        assert_eq!(batch.len(), LIMIT, "round {round}");
        // Commit order within the one transaction is position order, with no repeats.
        assert!(
            batch.first().map(|e| e.position) > after,
            "round {round}: the batch starts at or before the cursor"
        );
        assert!(batch.windows(2).all(|w| w[0].position < w[1].position));
        seen += batch.len();
        after = batch.last().map(|e| e.position);
        let looked_at = counted_since(db.pool(), before, LIMIT as i64).await;
        let remaining = BACKLOG - seen + LIMIT;
        assert!(
            looked_at <= 2 * LIMIT as i64,
            "round {round}: reading {LIMIT} rows looked at {looked_at} (the backlog after the cursor held {remaining})"
        );
    }
}
