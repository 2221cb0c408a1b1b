//! What the suites leave to this store's own API: a dropped transaction rolls back,
//! one writer at a time, a processed marker is never replaced.

use std::time::Duration;

use outbox_core::{ErrorKind, Inbox, MessageKind, Store};
use outbox_example_memory_store::{MemoryConsumer, MemoryStore};
use outbox_testkit::fixtures::{message, payout};

#[tokio::test]
async fn a_dropped_transaction_leaves_no_row_and_no_gap() {
    let store = MemoryStore::new();
    let mut tx = store.begin().await;
    assert_eq!(tx.enqueue(&payout("1", 100)).unwrap().sequence, 1);
    drop(tx);
    assert!(store.read_committed(None, 10).await.unwrap().is_empty());
    let mut tx = store.begin().await;
    let kept = tx.enqueue(&payout("1", 200)).unwrap();
    tx.commit().unwrap();
    assert_eq!(kept.sequence, 1, "the dropped enqueue left a gap");
    assert_eq!(store.read_committed(None, 10).await.unwrap(), vec![kept]);
}

#[tokio::test]
async fn a_second_writer_waits_for_the_open_transaction() {
    let store = MemoryStore::new();
    let mut first = store.begin().await;
    first.enqueue(&payout("2", 1)).unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(100), store.begin()).await;
    assert!(waiting.is_err(), "two write transactions were open at once");
    first.commit().unwrap();
    let mut second = tokio::time::timeout(Duration::from_secs(10), store.begin())
        .await
        .expect("the writer lock was not released by commit");
    assert_eq!(second.enqueue(&payout("2", 2)).unwrap().sequence, 2);
}

#[tokio::test]
async fn a_dropped_inbox_transaction_writes_nothing_and_a_marker_is_never_replaced() {
    let consumer = MemoryConsumer::new(0_i64);
    let applied = message("i-1", "merchants:1", 1, MessageKind::Committed, 5);

    let mut inbox = consumer.begin().await;
    inbox.mark_applied("c", &applied).await.unwrap();
    *inbox.data_mut().unwrap() += 5;
    assert_eq!(
        inbox.processed_kind("c", "i-1").await.unwrap(),
        Some(MessageKind::Committed),
        "a transaction reads its own writes"
    );
    drop(inbox);
    assert!(consumer.processed("c").unwrap().is_empty());
    assert_eq!(consumer.read(|sum| *sum).unwrap(), 0);

    let mut inbox = consumer.begin().await;
    inbox.mark_applied("c", &applied).await.unwrap();
    inbox.commit().unwrap();
    let mut inbox = consumer.begin().await;
    let again = message("i-1", "merchants:1", 1, MessageKind::Rejected, 5);
    let err = inbox.mark_applied("c", &again).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Immutable, "{err}");
    inbox.commit().unwrap();
    let markers = consumer.processed("c").unwrap();
    assert_eq!(markers.len(), 1);
    assert_eq!(markers[0].kind, MessageKind::Committed);
}
