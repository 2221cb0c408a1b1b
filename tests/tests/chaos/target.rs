//! The outbox a scenario runs on (SQLite or a PostgreSQL schema of its own): the
//! campaign's workload, written in batches, and the figures read back from it.

use outbox_core::NewEvent;

use crate::common::backend::Backend;
use crate::common::{fund, payout};

/// Events per enqueue transaction in the crash scenarios: many commits (each a
/// separate transaction for the relay to see) without a commit, and its fsync, per
/// event.
pub const BATCH: usize = 25;

/// `count` events over `accounts` merchants, drawn from `rng`: mostly settlement
/// credits, some payouts, a few of which overdraw and are refused by the ledger.
/// Merchant `c0` is a hot account with one event in ten, so its consecutive events
/// queue up and go as ordered runs (refused ones inside runs included).
pub fn workload(rng: &mut fastrand::Rng, count: usize, accounts: usize) -> Vec<NewEvent> {
    (0..count)
        .map(|_| {
            let merchant = if rng.u8(..10) == 0 {
                "c0".to_owned()
            } else {
                format!("c{}", rng.usize(..accounts))
            };
            if rng.u8(..10) < 7 {
                fund(&merchant, rng.u64(1_000..5_000))
            } else {
                payout(&merchant, rng.u64(100..8_000))
            }
        })
        .collect()
}

/// Enqueues `events`, `batch` per committed transaction, while the relay may run.
pub async fn enqueue_batched(backend: &Backend, events: Vec<NewEvent>, batch: usize) {
    match backend {
        Backend::Sqlite(outbox) => {
            let config = outbox.store.config().clone();
            tokio::task::spawn_blocking(move || {
                let mut conn = outbox_store_sqlite::connect(&config).unwrap();
                for batch in events.chunks(batch) {
                    // Immediate: a deferred transaction that reads before it writes
                    // fails with BUSY when the relay holds the write lock.
                    let tx = conn
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .unwrap();
                    for event in batch {
                        outbox_store_sqlite::enqueue(&tx, event).unwrap();
                    }
                    tx.commit().unwrap();
                }
            })
            .await
            .unwrap();
        }
        Backend::Postgres(outbox) => {
            for batch in events.chunks(batch) {
                let mut tx = outbox.store.pool().begin().await.unwrap();
                for event in batch {
                    outbox_store_postgres::enqueue(&mut tx, event)
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
            }
        }
    }
}

/// Events with a terminal delivery record (accepted, replayed or rejected).
pub async fn terminal(backend: &Backend) -> usize {
    const SQL: &str =
        "SELECT count(DISTINCT event_id) FROM outbox_deliveries WHERE outcome <> 'failed'";
    match backend {
        Backend::Sqlite(outbox) => {
            let conn = rusqlite::Connection::open(&outbox.path).unwrap();
            conn.busy_timeout(std::time::Duration::from_secs(10))
                .unwrap();
            let count: i64 = conn.query_row(SQL, [], |r| r.get(0)).unwrap();
            count as usize
        }
        Backend::Postgres(outbox) => {
            let count: i64 = sqlx::query_scalar(SQL)
                .fetch_one(outbox.store.pool())
                .await
                .unwrap();
            count as usize
        }
    }
}
