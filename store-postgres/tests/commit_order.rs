//! Pitfall P1 (docs/ARCHITECTURE.md), on a real server: a row whose transaction commits after a row
//! with a higher position must still be delivered, exactly once — and one account's
//! rows must come out in sequence order even when their transactions got their xids
//! in the other order.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use outbox_core::{EventId, OutboxEvent};
use outbox_store_postgres::enqueue;
use outbox_testkit::fixtures::payout;
use sqlx::PgPool;

use common::{backend_pid, collect, drain, open_store, row_of, txid_of, wait_until_blocked};

fn ids(events: &[OutboxEvent]) -> Vec<EventId> {
    events.iter().map(|e| e.event_id).collect()
}

/// The scenario through the store's relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_commit_is_delivered_exactly_once() {
    let Some(db) = open_store().await else { return };
    let mut relay = db.store.polling_relay("commit-order").await.unwrap();

    // 1. Transaction A enqueues: it takes the lower position and holds it uncommitted.
    let mut tx_a = db.pool().begin().await.unwrap();
    let a = enqueue(&mut tx_a, &payout("A", 1)).await.unwrap();

    // 2. Transaction B enqueues and commits: a higher position, committed first.
    let mut tx_b = db.pool().begin().await.unwrap();
    let b = enqueue(&mut tx_b, &payout("B", 1)).await.unwrap();
    tx_b.commit().await.unwrap();
    assert!(row_of(&a) < row_of(&b), "the scenario needs A below B");

    // 3. The relay runs: nothing of A, which is not committed. B is held back too,
    //    since A's xid precedes it: returning B would move the cursor past A.
    let early = drain(&mut relay).await;
    assert!(
        !ids(&early).contains(&a.event_id),
        "an uncommitted row was returned"
    );
    assert!(
        early.is_empty(),
        "B was returned while the older transaction A was open: {early:?}"
    );

    // 4. A commits.
    tx_a.commit().await.unwrap();

    // 5. The relay delivers A and B, A first (its xid is older), each exactly once.
    let late = collect(&mut relay, 2, Duration::from_secs(20)).await;
    assert_eq!(ids(&late), vec![a.event_id, b.event_id]);
    assert!(
        drain(&mut relay).await.is_empty(),
        "an event was delivered twice"
    );
    // The relay's cursor positions are exactly what enqueue reported.
    assert_eq!(late[0].position, a.position);
    assert_eq!(late[1].position, b.position);
}

/// A naive reader: `position > cursor`, in position order, no gate.
async fn naive_read(pool: &PgPool, after: i64) -> Vec<(i64, uuid::Uuid)> {
    sqlx::query_as(
        "SELECT position, event_id FROM outbox_events WHERE position > $1 ORDER BY position",
    )
    .bind(after)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The same scenario with the reader this crate does NOT use, to show the pitfall is
/// real: sequences (and identity columns) are allocated at insert, not at commit, so
/// a reader that trusts `position > cursor` jumps over A for good.
#[tokio::test]
async fn naive_position_cursor_loses_the_late_commit() {
    let Some(db) = open_store().await else { return };
    let mut tx_a = db.pool().begin().await.unwrap();
    let a = enqueue(&mut tx_a, &payout("A", 1)).await.unwrap();
    let mut tx_b = db.pool().begin().await.unwrap();
    let b = enqueue(&mut tx_b, &payout("B", 1)).await.unwrap();
    tx_b.commit().await.unwrap();

    // The naive reader sees B (A is invisible) and moves its cursor to B's position...
    let first = naive_read(db.pool(), 0).await;
    assert_eq!(first, vec![(row_of(&b), b.event_id.as_uuid())]);
    let cursor = first[0].0;

    // ...so when A commits with its lower position, the next read starts above it.
    tx_a.commit().await.unwrap();
    let second = naive_read(db.pool(), cursor).await;
    assert!(second.is_empty(), "{second:?}");

    // A is committed and in the table, and the naive reader will never return it.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE event_id = $1")
        .bind(a.event_id.as_uuid())
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(stored, 1);
    assert!(row_of(&a) <= cursor, "A is behind the naive cursor: lost");
}

/// A transaction that got its xid first (it wrote the payout intent before
/// enqueueing) can get the *later* sequence of an account when another transaction
/// reaches the counter first. Ordering by its own xid would put sequence 2 before 1;
/// enqueue raises the row's txid to the account's previous one instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_order_holds_when_the_later_sequence_has_the_older_xid() {
    let Some(db) = open_store().await else { return };
    sqlx::query("CREATE TABLE payout_intents (id text PRIMARY KEY)")
        .execute(db.pool())
        .await
        .unwrap();

    // The old transaction writes its intent: it now has an xid.
    let mut old = db.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO payout_intents VALUES ('old')")
        .execute(&mut *old)
        .await
        .unwrap();
    let old_xid: String = sqlx::query_scalar("SELECT pg_current_xact_id()::text")
        .fetch_one(&mut *old)
        .await
        .unwrap();
    let old_pid = backend_pid(&mut old).await;

    // A younger transaction takes the account's counter first: sequence 1.
    let mut young = db.pool().begin().await.unwrap();
    let first = enqueue(&mut young, &payout("4471", 1)).await.unwrap();
    assert_eq!(first.sequence, 1);

    // The old transaction enqueues for the same account and waits for the counter.
    let waiter = tokio::spawn(async move {
        let second = enqueue(&mut old, &payout("4471", 2)).await;
        (old, second)
    });
    wait_until_blocked(db.pool(), old_pid).await;
    young.commit().await.unwrap();
    let (old, second) = waiter.await.unwrap();
    let second = second.unwrap();
    old.commit().await.unwrap();

    assert_eq!(second.sequence, 2);
    let old_xid: u64 = old_xid.parse().unwrap();
    assert!(
        old_xid < txid_of(&first),
        "the scenario needs sequence 2's own xid to be older"
    );
    assert!(
        txid_of(&second) >= txid_of(&first),
        "sequence 2 was stored with a txid below sequence 1's"
    );

    let mut relay = db.store.polling_relay("account-order").await.unwrap();
    let seen = collect(&mut relay, 2, Duration::from_secs(20)).await;
    let sequences: Vec<u64> = seen.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        vec![1, 2],
        "relay order differs from sequence order"
    );
}

/// Many writers with intents written before enqueue (so xids are taken in one order
/// and counter locks in another): every account still comes out gapless and in
/// sequence order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interleaved_writers_keep_every_account_in_sequence_order() {
    let Some(db) = open_store().await else { return };
    sqlx::query("CREATE TABLE payout_intents (id text PRIMARY KEY)")
        .execute(db.pool())
        .await
        .unwrap();
    const WRITERS: usize = 6;
    const PER_WRITER: usize = 40;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let pool = db.pool().clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("INSERT INTO payout_intents VALUES ($1)")
                    .bind(format!("{writer}-{i}"))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                // A little work between intent and enqueue widens the window in which
                // another writer overtakes this one at the counter.
                tokio::task::yield_now().await;
                enqueue(&mut tx, &payout(&(i % 3).to_string(), 1))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut relay = db.store.polling_relay("interleaved").await.unwrap();
    let seen = collect(&mut relay, WRITERS * PER_WRITER, Duration::from_secs(30)).await;
    assert_eq!(seen.len(), WRITERS * PER_WRITER);
    let mut per_account: HashMap<String, Vec<u64>> = HashMap::new();
    for event in &seen {
        per_account
            .entry(event.account.to_string())
            .or_default()
            .push(event.sequence);
    }
    for (account, sequences) in per_account {
        let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
        assert_eq!(sequences, expected, "{account} out of order or with gaps");
    }
}

/// Rows are read in numeric txid order, not in the order of txid's text form
/// ('100' < '99'): a text sort would hand out txid 100 first, move the cursor past it,
/// and lose the row of txid 99 for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txids_are_ordered_as_numbers_not_text() {
    use outbox_core::Store;
    let Some(db) = open_store().await else { return };
    let insert = |txid: i64, position: i64| {
        let pool = db.pool().clone();
        async move {
            sqlx::query(
                "INSERT INTO outbox_events (position, event_id, account, sequence, payload, txid)
                 VALUES ($1, $2, 'merchants:t', $1, '{}'::bytea, $3::text::xid8)",
            )
            .bind(position)
            .bind(EventId::new().as_uuid())
            .bind(txid.to_string())
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    insert(100, 1).await;
    insert(99, 2).await;
    let first = db.store.read_committed(None, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(row_of(&first[0]), 2, "txid 99 must come before txid 100");
    let rest = db
        .store
        .read_committed(Some(first[0].position), 10)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(row_of).collect::<Vec<_>>(), vec![1]);
}
