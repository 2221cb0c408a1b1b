//! 500 events over 20 accounts through a ledger that fails 20% of writes with 5xx and
//! loses some answers after committing: every event lands exactly once, in order.

mod common;

use std::time::Duration;

use common::*;
use outbox_ledger_dev::FaultPlan;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_ledger_still_gets_every_event_exactly_once_in_sequence_order() {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let events: Vec<_> = (0..500u64)
        .map(|i| fund(&(i % 20).to_string(), 100 + i))
        .collect();
    let stored = outbox.enqueue(&events);
    ledger
        .faults()
        .set_plan(FaultPlan {
            error_ratio: 0.2,
            seed: 42,
            timeout_after_commit_ratio: 0.05,
            hold_ms: 1_000,
            ..FaultPlan::default()
        })
        .unwrap();
    let summary = drain(
        &outbox,
        client(&ledger, Duration::from_millis(300)),
        quick_config(),
    )
    .await;
    assert!(ledger.faults().injected() > 0, "no fault was injected");
    assert!(summary.retried > 0, "{summary:?}");
    assert_eq!(summary.terminal(), 500, "{summary:?}");
    assert!(summary.stopped.is_empty(), "{summary:?}");
    ledger.faults().clear();

    // Exactly once and in per-account order, as the auditor rebuilds it from the outbox.
    assert_eq!(ledger.stats().transactions, 500);
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
    let replays_and_accepts = summary.accepted + summary.replayed;
    assert_eq!(replays_and_accepts, 500);
}
