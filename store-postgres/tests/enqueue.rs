//! enqueue inside the caller's transaction: with the business row, refusing what it
//! must without breaking the transaction, and classifying contention as transient.

mod common;

use std::time::Duration;

use outbox_core::{ErrorKind, Retry};
use outbox_store_postgres::{enqueue, map_error};
use outbox_testkit::fixtures::payout;
use sqlx::PgPool;

use common::{backend_pid, open_store, row_of, wait_until_blocked};

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn the_intent_and_its_event_commit_or_roll_back_together() {
    let Some(db) = open_store().await else { return };
    let pool = db.store.pool();
    sqlx::query("CREATE TABLE payouts (id text PRIMARY KEY, amount bigint NOT NULL)")
        .execute(pool)
        .await
        .unwrap();

    // Rolled back: neither the intent nor the event, and no sequence number used.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO payouts (id, amount) VALUES ('p-1', 48500000)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let dropped = enqueue(&mut tx, &payout("4471", 48_500_000)).await.unwrap();
    assert_eq!(dropped.sequence, 1);
    tx.rollback().await.unwrap();
    assert_eq!(count(pool, "SELECT count(*) FROM payouts").await, 0);
    assert_eq!(count(pool, "SELECT count(*) FROM outbox_events").await, 0);

    // Committed: both, and the number 1 is reused because nothing took it.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO payouts (id, amount) VALUES ('p-1', 48500000)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let kept = enqueue(&mut tx, &payout("4471", 48_500_000)).await.unwrap();
    let next = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!((kept.sequence, next.sequence), (1, 2));
    assert!(row_of(&kept) < row_of(&next));
    assert_eq!(count(pool, "SELECT count(*) FROM payouts").await, 1);
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT payload FROM outbox_events WHERE sequence = 1")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(stored, kept.payload.as_bytes());
}

#[tokio::test]
async fn outside_a_transaction_nothing_is_written() {
    let Some(db) = open_store().await else { return };
    let mut conn = db.pool().acquire().await.unwrap();
    let err = enqueue(&mut conn, &payout("4471", 1))
        .await
        .expect_err("an autocommit enqueue was accepted");
    assert_eq!(err.field(), Some("transaction"), "{err}");
    assert_eq!(
        count(db.pool(), "SELECT count(*) FROM outbox_events").await,
        0
    );
    assert_eq!(
        count(db.pool(), "SELECT count(*) FROM outbox_sequences").await,
        0
    );
}

#[tokio::test]
async fn a_committed_event_id_is_refused_and_the_transaction_goes_on() {
    let Some(db) = open_store().await else { return };
    let mut tx = db.pool().begin().await.unwrap();
    let first = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = db.pool().begin().await.unwrap();
    let err = enqueue(&mut tx, &payout("4471", 2).with_event_id(first.event_id))
        .await
        .expect_err("a committed id was enqueued again");
    assert_eq!(err.field(), Some("event_id"), "{err}");
    let next = enqueue(&mut tx, &payout("4471", 2)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(next.sequence, 2, "the refused event consumed a number");
}

/// The same id from two open transactions: the second waits for the first and is
/// refused once it commits (its transaction is aborted then, as documented).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_id_is_refused_after_the_first_commits() {
    let Some(db) = open_store().await else { return };
    let id = outbox_core::EventId::new();
    let mut first = db.pool().begin().await.unwrap();
    enqueue(&mut first, &payout("1", 1).with_event_id(id))
        .await
        .unwrap();

    let mut second = db.pool().begin().await.unwrap();
    let second_pid = backend_pid(&mut second).await;
    let racer = tokio::spawn(async move {
        let result = enqueue(&mut second, &payout("2", 1).with_event_id(id)).await;
        drop(second);
        result
    });
    wait_until_blocked(db.pool(), second_pid).await;
    first.commit().await.unwrap();
    let err = racer.await.unwrap().expect_err("the duplicate was stored");
    assert_eq!(err.field(), Some("event_id"), "{err}");
    assert_eq!(
        count(db.pool(), "SELECT count(*) FROM outbox_events").await,
        1
    );
}

/// The same id from two open transactions, where the second goes on: refused once the
/// first commits, its transaction stays usable and the refused event gave its number
/// back; when the first rolls back instead, the second's event is the one stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_leaves_the_waiting_transaction_usable() {
    let Some(db) = open_store().await else { return };
    for first_commits in [true, false] {
        let id = outbox_core::EventId::new();
        let account = if first_commits {
            "commits"
        } else {
            "rolls-back"
        };
        let mut first = db.pool().begin().await.unwrap();
        enqueue(&mut first, &payout(account, 1).with_event_id(id))
            .await
            .unwrap();

        let mut second = db.pool().begin().await.unwrap();
        let second_pid = backend_pid(&mut second).await;
        let racer = tokio::spawn(async move {
            let raced = enqueue(&mut second, &payout("racer", 1).with_event_id(id)).await;
            let next = enqueue(&mut second, &payout("racer", 2)).await;
            second.commit().await.unwrap();
            (raced, next)
        });
        wait_until_blocked(db.pool(), second_pid).await;
        if first_commits {
            first.commit().await.unwrap();
        } else {
            first.rollback().await.unwrap();
        }
        let (raced, next) = racer.await.unwrap();
        let next = next.expect("the waiting transaction was no longer usable");
        if first_commits {
            let err = raced.expect_err("the duplicate was stored");
            assert_eq!(err.field(), Some("event_id"), "{err}");
            assert_eq!(next.sequence, 1, "the refused event kept its number");
            let mut tx = db.pool().begin().await.unwrap();
            let again = enqueue(&mut tx, &payout("racer", 3)).await.unwrap();
            tx.rollback().await.unwrap();
            assert_eq!(again.sequence, 2, "the counter lost the committed event");
        } else {
            let stored = raced.expect("the id was free once the first rolled back");
            assert_eq!((stored.event_id, stored.sequence), (id, 2));
            assert_eq!(next.sequence, 3);
        }
        let stored: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE event_id = $1")
                .bind(id.as_uuid())
                .fetch_one(db.pool())
                .await
                .unwrap();
        assert_eq!(stored, 1);
    }
}

#[tokio::test]
async fn a_lock_timeout_on_the_counter_is_transient() {
    let Some(db) = open_store().await else { return };
    let mut holder = db.pool().begin().await.unwrap();
    enqueue(&mut holder, &payout("4471", 1)).await.unwrap();

    let mut impatient = db.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '100ms'")
        .execute(&mut *impatient)
        .await
        .unwrap();
    let err = enqueue(&mut impatient, &payout("4471", 2))
        .await
        .expect_err("took a locked counter");
    assert_eq!(err.kind(), &ErrorKind::Storage, "{err}");
    assert_eq!(err.retry(), Retry::Transient { after: None }, "{err}");
    assert_eq!(err.context("sqlstate"), Some("55P03"));
    impatient.rollback().await.unwrap();

    holder.commit().await.unwrap();
    let mut retry = db.pool().begin().await.unwrap();
    let second = enqueue(&mut retry, &payout("4471", 2)).await.unwrap();
    retry.commit().await.unwrap();
    assert_eq!(second.sequence, 2);
}

/// Two transactions enqueueing for two accounts in opposite orders deadlock; the
/// victim's error is transient, so its caller runs the transaction again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_is_transient() {
    let Some(db) = open_store().await else { return };
    let mut one = db.pool().begin().await.unwrap();
    let mut two = db.pool().begin().await.unwrap();
    enqueue(&mut one, &payout("A", 1)).await.unwrap();
    enqueue(&mut two, &payout("B", 1)).await.unwrap();
    let one_pid = backend_pid(&mut one).await;
    let first = tokio::spawn(async move {
        let result = enqueue(&mut one, &payout("B", 2)).await;
        (one, result)
    });
    wait_until_blocked(db.pool(), one_pid).await;
    let second = tokio::time::timeout(Duration::from_secs(30), enqueue(&mut two, &payout("A", 2)))
        .await
        .expect("no deadlock detection");
    let (one, first) = first.await.unwrap();
    let errors: Vec<_> = [first, second]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].context("sqlstate"),
        Some("40P01"),
        "{}",
        errors[0]
    );
    assert!(errors[0].is_transient(), "{}", errors[0]);
    drop((one, two));
}

#[tokio::test]
async fn map_error_classifies_the_callers_own_statements() {
    let Some(db) = open_store().await else { return };
    let err = sqlx::query("SELECT * FROM no_such_table")
        .execute(db.pool())
        .await
        .map_err(map_error)
        .expect_err("no such table");
    assert_eq!(err.kind(), &ErrorKind::Storage);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("sqlstate"), Some("42P01"));
}
