//! A payout refused for insufficient funds: recorded, visible on Hop 2 as a rejection
//! notice, and neither its merchant nor the consumer stalls.

mod common;

use std::time::Duration;

use common::*;
use outbox_bins::consumer::ConsumerStats;
use outbox_core::{DeliveryOutcome, ExceptionKind, Ledger, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_funds_is_recorded_and_nothing_stalls() {
    let outbox = Outbox::new().await;
    let (consumer, receiver) = consumer(outbox.dir()).await;
    let ledger = dev_ledger(Some(&receiver)).await;
    let stored = outbox.enqueue(&[
        fund("7", 10_000),
        payout("7", 1_000_000),
        payout("7", 2_500),
        fund("8", 500),
        payout("8", 200),
    ]);
    let summary = drain(
        &outbox,
        client(&ledger, Duration::from_secs(10)),
        quick_config(),
    )
    .await;
    assert_eq!((summary.accepted, summary.rejected), (4, 1), "{summary:?}");

    let refused = outbox.store.deliveries(stored[1].event_id).await.unwrap();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].outcome, DeliveryOutcome::Rejected);
    assert_eq!(refused[0].error_code.as_deref(), Some("INSUFFICIENT_FUND"));
    let exceptions = outbox.store.exceptions().await.unwrap();
    assert_eq!(exceptions.len(), 1);
    assert_eq!(
        (
            exceptions[0].kind,
            exceptions[0].account.as_str(),
            exceptions[0].sequence
        ),
        (ExceptionKind::Rejected, "merchants:7", 2)
    );
    assert_eq!(
        outbox.store.deliveries(stored[2].event_id).await.unwrap()[0].outcome,
        DeliveryOutcome::Accepted
    );

    // The consumer consumed sequence 2 through the rejection notice and applied 3.
    eventually(
        Duration::from_secs(30),
        "the consumer to apply all five",
        || ConsumerStats::get(&consumer.stats().applied) == 5,
    )
    .await;
    let applied: Vec<(String, u64, String)> = consumer
        .applied()
        .unwrap()
        .into_iter()
        .filter(|(account, ..)| account == "merchants:7")
        .map(|(account, seq, _, kind)| (account, seq, kind))
        .collect();
    assert_eq!(
        applied,
        vec![
            ("merchants:7".to_owned(), 1, "committed".to_owned()),
            ("merchants:7".to_owned(), 2, "rejected".to_owned()),
            ("merchants:7".to_owned(), 3, "committed".to_owned()),
        ]
    );
    let balances = consumer.balances().unwrap();
    let usd = |a: &str| balances.get(&(a.to_owned(), "USD/2".to_owned())).copied();
    assert_eq!(usd("merchants:7:available"), Some(7_500));
    assert_eq!(usd("merchants:7:payouts:pending"), Some(2_500));
    let reader = client(&ledger, Duration::from_secs(10));
    let on_ledger = reader.aggregate_balances("merchants:7:...").await.unwrap();
    assert_eq!(on_ledger.values().copied().sum::<i128>(), 10_000);
    receiver.shutdown().await;
}
