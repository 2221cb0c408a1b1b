//! The same idempotency key with a different body: that account stops loudly, the
//! others continue, and the stopped event is neither skipped nor re-serialised.

mod common;

use std::time::Duration;

use common::*;
use outbox_core::{DeliveryOutcome, ExceptionKind, Ledger, PostOutcome, Store};
use outbox_testkit::auditor::DiscrepancyKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_payload_under_the_same_key_stops_only_its_account() {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let stored = outbox.enqueue(&[
        fund("a", 100),
        payout("a", 50),
        payout("a", 10),
        fund("b", 100),
        payout("b", 30),
    ]);
    // Someone already used event a#2's key for another body (51, not 50).
    let reader = client(&ledger, Duration::from_secs(10));
    let (_, body) = stored[1].payload.split().unwrap();
    let tampered = String::from_utf8(body.to_vec())
        .unwrap()
        .replace("\"amount\":50", "\"amount\":51");
    assert_ne!(tampered.as_bytes(), body);
    let first = reader
        .post(
            stored[1].event_id,
            tampered
                .replace("merchants:a:available", "world")
                .as_bytes(),
        )
        .await
        .unwrap();
    assert!(matches!(first, PostOutcome::Accepted { .. }), "{first:?}");

    let summary = drain(
        &outbox,
        client(&ledger, Duration::from_secs(10)),
        quick_config(),
    )
    .await;
    assert_eq!(
        summary
            .stopped
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["merchants:a"]
    );
    assert_eq!(summary.accepted, 3, "{summary:?}"); // a#1, b#1, b#2

    let records = outbox.store.deliveries(stored[1].event_id).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, DeliveryOutcome::Failed);
    let exceptions = outbox.store.exceptions().await.unwrap();
    assert_eq!(exceptions.len(), 1);
    assert_eq!(
        (
            exceptions[0].kind,
            exceptions[0].account.as_str(),
            exceptions[0].sequence
        ),
        (ExceptionKind::IdempotencyMismatch, "merchants:a", 2)
    );
    // a#3 was never sent: the account stays stopped behind its head, nothing skipped.
    assert!(
        outbox
            .store
            .deliveries(stored[2].event_id)
            .await
            .unwrap()
            .is_empty()
    );
    // The auditor names the stopped account's two events undelivered (a#2's record is
    // a failure, not an outcome), and the transaction made under a#2's key out of
    // order (it came before a#1's); nothing else: the other three are posted once,
    // and that transaction is the ledger's fourth, so a#3 has none.
    let report = audit_ledger(&outbox.store, &ledger).await;
    assert_eq!(
        findings(&report),
        vec![
            finding(DiscrepancyKind::Undelivered, &stored[1]),
            finding(DiscrepancyKind::Undelivered, &stored[2]),
            finding(DiscrepancyKind::OutOfOrder, &stored[1]),
        ],
        "{report}"
    );
    assert_eq!(
        (report.posted, report.ledger_transactions),
        (3, 4),
        "{report}"
    );
    // The cursor waits before the stopped event, so a fixed ledger can still get it.
    let cursor = outbox.store.load_cursor("relay").await.unwrap();
    assert!(cursor.is_some_and(|c| c < stored[1].position), "{cursor:?}");
}
