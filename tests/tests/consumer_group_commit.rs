//! The SQLite reference consumer commits deliveries that wait together in one
//! transaction, a savepoint each: a delivery that fails leaves nothing behind and
//! does not fail the others (docs/ARCHITECTURE.md#group-commit-on-sqlite).

use std::time::Duration;

use outbox_bins::consumer::TreasuryConsumer;
use outbox_core::{Account, FanoutMessage, MessageKind, MessageSink, Retry};
use outbox_store_sqlite::SqliteConfig;
use outbox_testkit::fixtures::ledger_transaction_payload;
use outbox_testkit::write_lock::behind_the_write_lock;

const CONSUMER: &str = "treasury";

/// Merchant `account`'s payout at `sequence`, a ledger transaction of one posting.
fn payout(account: usize, sequence: u64) -> FanoutMessage {
    let instruction_id = format!("0190f2a0-7b1c-7cc2-8a4e-{account:06}{sequence:06}");
    FanoutMessage {
        payload: ledger_transaction_payload(
            account,
            sequence,
            100 + account as u64,
            &instruction_id,
        ),
        instruction_id,
        account: Account::parse(&format!("merchants:{account}")).expect("account"),
        sequence,
        kind: MessageKind::Committed,
        ledger: "payouts".to_owned(),
        ledger_tx_id: Some(100 + account as u64),
        traceparent: None,
        tracestate: None,
    }
}

/// `(account, sequence)` of every applied instruction.
fn applied(consumer: &TreasuryConsumer) -> Vec<(String, u64)> {
    let mut applied: Vec<(String, u64)> = consumer
        .applied()
        .expect("applied")
        .into_iter()
        .map(|(account, sequence, _, _)| (account, sequence))
        .collect();
    applied.sort();
    applied
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_waiting_together_commit_together_and_a_failing_one_leaves_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = SqliteConfig::new(dir.path().join("consumer.db"));
    let consumer = TreasuryConsumer::open(config.clone(), CONSUMER, Duration::from_secs(3600))
        .await
        .expect("open the consumer");
    let mut not_a_transaction = payout(3, 1);
    not_a_transaction.payload = b"<html>not a ledger transaction".to_vec();
    let deliveries = [
        ("amqp/1", vec![payout(1, 1)]),
        // A good message, then one that can never be applied: the whole delivery fails.
        ("amqp/2", vec![payout(2, 1), not_a_transaction]),
        ("amqp/3", vec![payout(4, 1), payout(4, 2)]),
    ];
    // Another writer holds the lock, so the three deliveries queue up behind it.
    let outcomes = behind_the_write_lock(&config.path, || {
        deliveries
            .into_iter()
            .map(|(delivery, messages)| {
                let consumer = consumer.clone();
                tokio::spawn(async move { consumer.accept(delivery, messages).await })
            })
            .collect()
    })
    .await;
    assert!(outcomes[0].is_ok(), "{:?}", outcomes[0]);
    assert!(outcomes[2].is_ok(), "{:?}", outcomes[2]);
    let err = outcomes[1]
        .as_ref()
        .expect_err("the unappliable delivery is refused");
    assert_eq!(err.retry(), Retry::Permanent, "{err}");
    assert_eq!(err.field(), Some("payload"), "{err}");
    assert_eq!(err.context("delivery"), Some("amqp/2"), "{err}");

    let merchant = |n: usize| format!("merchants:{n}");
    assert_eq!(
        applied(&consumer),
        [(merchant(1), 1), (merchant(4), 1), (merchant(4), 2)],
        "the refused delivery's good message was rolled back with it"
    );
    let balances = consumer.balances().expect("balances");
    assert!(
        balances
            .keys()
            .all(|(account, _)| !account.starts_with("merchants:2:")),
        "nothing of the refused delivery reached the treasury: {balances:?}"
    );
    assert_eq!(
        balances.len(),
        4,
        "two rows each for merchants 1 and 4: {balances:?}"
    );

    // Offered again without the bad message (as an operator would), it applies from
    // scratch: nothing of the first attempt is seen as a duplicate.
    consumer
        .accept("amqp/2", vec![payout(2, 1)])
        .await
        .expect("the retried delivery");
    assert_eq!(applied(&consumer)[1], (merchant(2), 1));
    assert_eq!(
        consumer
            .stats()
            .applied
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    assert_eq!(
        consumer
            .stats()
            .duplicates
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}
