//! Lock contention on one database file is reported as a transient error, and
//! enqueue outside a transaction is refused.

use std::time::Duration;

use outbox_core::{ErrorKind, Retry};
use outbox_store_sqlite::{SqliteConfig, SqliteStore, connect, enqueue};
use outbox_testkit::fixtures::payout;

#[tokio::test]
async fn busy_writer_gets_a_transient_error() {
    let dir = tempfile::TempDir::new().unwrap();
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    drop(SqliteStore::open(config.clone()).await.unwrap());

    let holder = connect(&config).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    enqueue(&holder, &payout("1", 1)).unwrap();

    let mut impatient = SqliteConfig::new(config.path.clone());
    impatient.busy_timeout = Duration::from_millis(20);
    let mut conn = connect(&impatient).unwrap();
    let tx = conn.transaction().unwrap(); // deferred: takes the write lock at the first write
    let err = enqueue(&tx, &payout("1", 2)).expect_err("a second writer got the lock");
    assert_eq!(err.kind(), &ErrorKind::Storage, "{err}");
    assert_eq!(err.retry(), Retry::Transient { after: None }, "{err}");
    drop(tx);

    holder.execute_batch("COMMIT").unwrap();
    let tx = conn.transaction().unwrap();
    let second = enqueue(&tx, &payout("1", 2)).expect("retry after the lock is free");
    tx.commit().unwrap();
    assert_eq!(second.sequence, 2);
}

#[tokio::test]
async fn enqueue_outside_a_transaction_is_refused() {
    let dir = tempfile::TempDir::new().unwrap();
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    drop(SqliteStore::open(config.clone()).await.unwrap());
    let conn = connect(&config).unwrap();
    let err = enqueue(&conn, &payout("1", 1)).expect_err("autocommit enqueue accepted");
    assert_eq!(err.field(), Some("transaction"), "{err}");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM outbox_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
}
