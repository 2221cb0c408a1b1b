//! 500 events over 20 accounts through a ledger that fails 20% of writes with 5xx and
//! loses some answers after committing: every event lands exactly once, in order.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use outbox_core::Ledger;
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

    // Exactly once: 500 ledger transactions, and each event finds its own.
    assert_eq!(ledger.stats().transactions, 500);
    let reader = client(&ledger, Duration::from_secs(10));
    let mut per_account: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for event in &stored {
        let tx = reader
            .transaction_by_event_id(event.event_id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("event {} never reached the ledger", event.event_id));
        per_account
            .entry(event.account.to_string())
            .or_default()
            .push((event.sequence, tx.id));
    }
    // Per account, ledger commit order (transaction ids) follows the outbox sequence.
    assert_eq!(per_account.len(), 20);
    for (account, mut pairs) in per_account {
        pairs.sort_unstable();
        assert!(
            pairs.windows(2).all(|w| w[0].1 < w[1].1),
            "{account} was posted out of order: {pairs:?}"
        );
    }
    let replays_and_accepts = summary.accepted + summary.replayed;
    assert_eq!(replays_and_accepts, 500);
}
