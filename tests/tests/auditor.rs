//! The auditor (`outbox_testkit::auditor`) on real parts: a SQLite outbox, the dev
//! ledger over HTTP and the treasury consumer's SQLite inbox. A clean run audits clean
//! with the right figures; then each kind of break is staged for real (a payout
//! posted twice, a transaction the outbox never sent, two payouts of an account
//! posted out of order, an event never relayed, an instruction the consumer applied
//! from nowhere, a balance that drifted) and each is named with its account,
//! sequence and event id.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use outbox_core::OUTBOX_EVENT_ID_KEY;
use outbox_store_sqlite::{SqliteConfig, SqliteStore};
use outbox_testkit::auditor::{AuditReport, ConsumerView, DiscrepancyKind, audit};

struct Run {
    outbox: Outbox,
    ledger: outbox_ledger_dev::RunningDevLedger,
    treasury: SqliteStore,
    _receiver: outbox_transport_http::RunningReceiver,
}

impl Run {
    /// Three merchants funded, paid out, one payout refused (insufficient funds); the
    /// ledger's webhooks reach the treasury consumer.
    async fn delivered() -> Self {
        let outbox = Outbox::new().await;
        let (_consumer, receiver) = consumer(outbox.dir()).await;
        let ledger = dev_ledger(Some(&receiver)).await;
        outbox.enqueue(&[
            fund("c0", 100_000),
            payout("c0", 30_000),
            fund("c1", 50_000),
            payout("c1", 900_000_000),
            payout("c1", 20_000),
            fund("c2", 7_000),
        ]);
        let summary = drain(
            &outbox,
            client(&ledger, Duration::from_secs(10)),
            quick_config(),
        )
        .await;
        assert_eq!((summary.accepted, summary.rejected), (5, 1), "{summary:?}");
        let treasury = SqliteStore::open(SqliteConfig::new(outbox.dir().join("treasury.db")))
            .await
            .unwrap();
        let run = Self {
            outbox,
            ledger,
            treasury,
            _receiver: receiver,
        };
        eventually(
            Duration::from_secs(30),
            "the consumer applied all six",
            || run.treasury_count("SELECT COUNT(*) FROM inbox_messages") == 6,
        )
        .await;
        run
    }

    fn treasury_count(&self, sql: &str) -> i64 {
        let conn = rusqlite::Connection::open(self.outbox.dir().join("treasury.db")).unwrap();
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn balances(&self) -> BTreeMap<String, i128> {
        treasury_balances(&self.outbox.dir().join("treasury.db"))
    }

    async fn audit(&self) -> AuditReport {
        let ledger = client(&self.ledger, Duration::from_secs(10));
        let consumer = ConsumerView {
            name: "treasury".to_owned(),
            inbox: &self.treasury,
            balances: Some(self.balances()),
        };
        audit(&self.outbox.store, &ledger, &[consumer])
            .await
            .unwrap()
    }

    /// A transaction posted straight to the ledger with `metadata`.
    async fn post_directly(&self, metadata: serde_json::Value) {
        let answer = reqwest::Client::new()
            .post(format!("{}/v2/{LEDGER}/transactions", self.ledger.url()))
            .json(&serde_json::json!({
                "postings": [{"source": "world", "destination": "merchants:c2:available", "amount": 1, "asset": "USD/2"}],
                "metadata": metadata,
            }))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{:?}", answer.text().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_run_audits_clean_with_its_figures() {
    let run = Run::delivered().await;
    let report = run.audit().await;
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.refused, report.applied),
        (6, 5, 1, 6),
        "{report}"
    );
    assert_eq!(report.ledger_transactions, 5, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_staged_break_is_named_with_account_sequence_and_event_id() {
    let run = Run::delivered().await;
    let first = {
        let conn = rusqlite::Connection::open(run.outbox.dir().join("outbox.db")).unwrap();
        conn.query_row(
            "SELECT event_id FROM outbox_events WHERE account = 'merchants:c0' AND sequence = 1",
            [],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
    };
    // A second transaction carrying an event id the relay posted, and one carrying an
    // id the outbox never had.
    run.post_directly(serde_json::json!({OUTBOX_EVENT_ID_KEY: first, "outbox_account": "merchants:c0", "outbox_sequence": "1"}))
        .await;
    let stranger = outbox_core::EventId::new().to_string();
    run.post_directly(serde_json::json!({OUTBOX_EVENT_ID_KEY: stranger, "outbox_account": "merchants:c9", "outbox_sequence": "1"}))
        .await;
    // An event enqueued and never relayed.
    let undelivered = run.outbox.enqueue(&[payout("c2", 1_000)]);
    // The consumer applied an instruction nobody sent, and c0's balance drifted.
    {
        let conn = rusqlite::Connection::open(run.outbox.dir().join("treasury.db")).unwrap();
        let unknown: i64 = conn
            .execute(
                "INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
                 SELECT consumer, ?1, account, 99, kind, applied_at FROM inbox_messages LIMIT 1",
                [outbox_core::EventId::new().to_string()],
            )
            .unwrap() as i64;
        assert_eq!(unknown, 1);
        conn.execute(
            "UPDATE treasury_balances SET balance = balance + 1 WHERE account = 'merchants:c0:available'",
            [],
        )
        .unwrap();
    }

    let report = run.audit().await;
    let kinds: Vec<DiscrepancyKind> = report.discrepancies.iter().map(|d| d.kind).collect();
    let text = report.to_string();
    for kind in [
        DiscrepancyKind::DoubledOnLedger,
        DiscrepancyKind::Orphan,
        DiscrepancyKind::Undelivered,
        DiscrepancyKind::UnknownApplied,
        DiscrepancyKind::BalanceDiffers,
    ] {
        assert!(kinds.contains(&kind), "{kind:?} not found:\n{text}");
    }
    assert!(
        text.contains(&format!(
            "DoubledOnLedger account=merchants:c0 sequence=1 event_id={first}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Orphan account=merchants:c9 sequence=1 event_id={stranger}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Undelivered account=merchants:c2 sequence=2 event_id={}",
            undelivered[0].event_id
        )),
        "{text}"
    );
    assert!(
        text.contains("BalanceDiffers consumer=treasury account=merchants:c0"),
        "{text}"
    );
    assert!(!report.is_clean());
}

/// An account whose second payout reached the ledger before its first (here: its
/// stored bytes posted by hand under its idempotency key before the relay ran, as a
/// relay that reordered would) is reported out of order, naming the sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_order_against_sequence_order_is_named() {
    let run = Run::delivered().await;
    let stored = run.outbox.enqueue(&[fund("c7", 5_000), fund("c7", 1_000)]);
    let second = &stored[1];
    // The body the relay sends: the stored payload's post, byte for byte.
    let (_, body) = second.payload.split().unwrap();
    let payload = body.to_vec();
    let early = reqwest::Client::new()
        .post(format!("{}/v2/{LEDGER}/transactions", run.ledger.url()))
        .header("content-type", "application/json")
        .header("idempotency-key", second.event_id.to_string())
        .body(payload)
        .send()
        .await
        .unwrap();
    assert!(early.status().is_success(), "{:?}", early.text().await);
    let mut config = quick_config();
    config.bulk = false;
    let summary = drain(
        &run.outbox,
        client(&run.ledger, Duration::from_secs(10)),
        config,
    )
    .await;
    assert_eq!((summary.accepted, summary.replayed), (1, 1), "{summary:?}");

    let report = run.audit().await;
    let text = report.to_string();
    assert!(
        text.contains(&format!(
            "OutOfOrder account=merchants:c7 sequence=2 event_id={}",
            second.event_id
        )),
        "{text}"
    );
    assert_eq!(report.discrepancies.len(), 1, "{text}");
}
