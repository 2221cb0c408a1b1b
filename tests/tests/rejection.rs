//! A payout refused for insufficient funds: recorded, visible on Hop 2 as a rejection
//! notice, and neither its merchant nor the consumer stalls.

mod common;

use std::time::Duration;

use common::*;
use outbox_bins::consumer::ConsumerStats;
use outbox_core::{DeliveryOutcome, ExceptionKind, Ledger, Store};
use outbox_ledger_dev::FaultPlan;

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
    // Each event posted once in order or refused, each applied once at its sequence,
    // nothing held, and every treasury balance the ledger's.
    let report =
        audit_with_treasury(&outbox.store, &ledger, &outbox.dir().join("treasury.db")).await;
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.refused, report.applied),
        (5, 4, 1, 5),
        "{report}"
    );
    receiver.shutdown().await;
}

/// The ledger keeps no idempotency key for a refusal, so re-posting a refused payout
/// evaluates it again. Here only the rejection notice's answer is lost (the dev
/// ledger commits the notice and holds its answer past the client's timeout) and the
/// merchant is funded before the relay retries: the retry must be the notice, never
/// the payout that Hop 2 has already reported as refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_notice_answer_never_commits_the_refused_payout() {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let stored = outbox.enqueue(&[fund("21", 100), payout("21", 1_000), payout("21", 50)]);
    ledger
        .faults()
        .set_plan(FaultPlan {
            hold_matching: Some("outbox_rejected_code".into()),
            hold_matching_count: Some(1),
            hold_ms: 1_500,
            ..FaultPlan::default()
        })
        .unwrap();
    let reader = client(&ledger, Duration::from_secs(10));
    let merchant = account("merchants:21");
    // Funds the merchant as soon as the (held) notice is committed, before the
    // relay's client gives up waiting for its answer and retries.
    let funder = {
        let reader = client(&ledger, Duration::from_secs(10));
        let merchant = merchant.clone();
        tokio::spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let noticed = reader
                    .account(&merchant)
                    .await
                    .unwrap()
                    .is_some_and(|a| a.metadata.contains_key("outbox_rejected_code"));
                if noticed {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "no rejection notice");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let body = br#"{"postings":[{"source":"world","destination":"merchants:21:available","amount":10000,"asset":"USD/2"}]}"#;
            reader
                .post(outbox_core::EventId::new(), body)
                .await
                .unwrap();
        })
    };
    let summary = drain(
        &outbox,
        client(&ledger, Duration::from_millis(500)),
        quick_config(),
    )
    .await;
    funder.await.unwrap();
    assert_eq!((summary.accepted, summary.rejected), (2, 1), "{summary:?}");
    // The refused payout has no ledger transaction (else `RefusedButPosted`); the
    // others are posted once, beside the test's own funding.
    assert_audited(&outbox.store, &ledger, 3, 1, 1).await;
    let records: Vec<_> = outbox
        .store
        .deliveries(stored[1].event_id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(records, vec![DeliveryOutcome::Rejected]);
    let balances = reader
        .aggregate_balances("merchants:21:available")
        .await
        .unwrap();
    let usd = outbox_core::Asset::parse("USD/2").unwrap();
    assert_eq!(balances.get(&usd).copied(), Some(100 + 10_000 - 50));
    ledger.shutdown().await;
}
