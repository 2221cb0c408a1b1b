//! A relay process killed with SIGKILL after the ledger accepted a post and before the
//! relay recorded it: the restarted relay re-sends, the ledger answers with the
//! original transaction (Idempotency-Hit), and nothing is posted twice.

mod common;

use std::time::Duration;

use common::*;
use outbox_core::{DeliveryOutcome, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_accept_and_cursor_is_replayed_as_a_hit() {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let events: Vec<_> = (0..30u64)
        .map(|i| fund(&format!("m{}", i % 3), 1_000 + i))
        .collect();
    let stored = outbox.enqueue(&events);
    let target = &stored[13];
    ledger
        .faults()
        .hold_after_commit_matching(&target.event_id.to_string(), Duration::from_secs(60));

    let mut first = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .spawn()
        .unwrap();
    let committed = wait_for_ledger_commit(&ledger, target.event_id, &mut first).await;
    first.kill().await.unwrap(); // SIGKILL: no chance to record or move the cursor
    let status = first.wait().await.unwrap();
    assert!(!status.success(), "the relay was not killed: {status}");
    ledger.faults().clear();

    assert!(
        outbox
            .store
            .deliveries(target.event_id)
            .await
            .unwrap()
            .is_empty(),
        "the relay recorded the outcome before dying"
    );
    let cursor = outbox.store.load_cursor("relay").await.unwrap();
    assert!(
        cursor.is_none_or(|c| c < target.position),
        "the cursor moved past the target: {cursor:?}"
    );

    let second = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .output()
        .await
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(!stdout.contains("replayed 0,"), "{stdout}");

    let records = outbox.store.deliveries(target.event_id).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].outcome, DeliveryOutcome::Replayed);
    assert_eq!(
        records[0].ledger_tx_id,
        Some(committed.id),
        "the replay named another transaction"
    );
    assert!(ledger.stats().idempotency_hits >= 1);
    // The restarted relay recorded each event once.
    for event in &stored {
        let records = outbox.store.deliveries(event.event_id).await.unwrap();
        assert_eq!(
            records.iter().filter(|r| r.outcome.is_terminal()).count(),
            1,
            "{records:?}"
        );
    }
    assert_eq!(
        outbox.store.load_cursor("relay").await.unwrap(),
        Some(stored[29].position)
    );
    // Exactly one ledger transaction per event, per account in sequence order, as the
    // auditor rebuilds it from the outbox.
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
}
