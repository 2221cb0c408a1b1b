//! The transport conformance suite: what every Hop 2 transport (HTTP, Kafka, RabbitMQ)
//! must do with the real service behind it. See [`crate::transport_suite!`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    Account, FanoutConfig, FanoutLoop, FanoutMessage, FanoutStore, MessageKind, MessageSink,
    Publisher, RunMode, Subscriber,
};
use tokio::sync::{RwLock, watch};

use crate::transport_harness::{Destination, ProbeConsumer, TransportHarness};

/// Cases that stop the broker take this for writing; the others for reading, so a
/// restart never hits a neighbouring case of the same test binary.
static BROKER: RwLock<()> = RwLock::const_new(());

/// How long a case waits for its messages before failing.
const DEADLINE: Duration = Duration::from_secs(90);

async fn destination(h: &impl TransportHarness, restartable: bool) -> Option<Box<dyn Destination>> {
    match h.destination(restartable).await {
        Ok(d) => Some(d),
        Err(why) if std::env::var("OUTBOX_TEST_REQUIRE").is_ok_and(|v| v == "1") => {
            panic!("OUTBOX_TEST_REQUIRE=1 and {why}")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A Hop 2 message with a posting the reference consumer can apply.
pub fn message(account: &str, sequence: u64, kind: MessageKind) -> FanoutMessage {
    let id = format!("{account}/{sequence}/{}", fastrand::u64(..));
    let tx_id = (kind != MessageKind::Rejected).then(|| fastrand::u64(1..1 << 40));
    let payload = match kind {
        MessageKind::Rejected => serde_json::json!({
            "outbox_event_id": id, "outbox_account": account,
            "outbox_sequence": sequence.to_string(), "outbox_rejected_code": "INSUFFICIENT_FUND",
        }),
        _ => serde_json::json!({
            "id": tx_id,
            "postings": [{"source": "world", "destination": account, "amount": 100 * sequence, "asset": "USD/2"}],
            "metadata": {"outbox_event_id": id, "outbox_account": account, "outbox_sequence": sequence.to_string()},
        }),
    };
    FanoutMessage {
        instruction_id: id,
        account: Account::parse(account).expect("valid account"),
        sequence,
        kind,
        ledger: "payouts".into(),
        ledger_tx_id: tx_id,
        traceparent: None,
        tracestate: None,
        payload: serde_json::to_vec(&payload).expect("json"),
    }
}

/// `accounts` × `per_account` committed messages, interleaved by sequence.
pub fn interleaved(accounts: usize, per_account: u64) -> Vec<FanoutMessage> {
    let mut messages = Vec::new();
    for sequence in 1..=per_account {
        for a in 0..accounts {
            messages.push(message(
                &format!("merchants:{a}"),
                sequence,
                MessageKind::Committed,
            ));
        }
    }
    messages
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<outbox_core::Result<()>>,
}

fn run_subscriber(subscriber: Arc<dyn Subscriber>, consumer: Arc<dyn ProbeConsumer>) -> Running {
    let (stop, shutdown) = watch::channel(false);
    let sink: Arc<dyn MessageSink> = consumer;
    let task = tokio::spawn(async move { subscriber.run(sink, shutdown).await });
    Running { stop, task }
}

impl Running {
    /// Waits until `done`, failing at once (with what `run` returned) if the
    /// subscriber ends first: a subscriber that gave up is a failure of its own, not
    /// a slow broker, and its error is the one thing worth reading.
    async fn wait_until(&mut self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !done() {
            if self.task.is_finished() {
                let ended = (&mut self.task).await;
                panic!("the subscriber ended before {what}: {ended:?}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {DEADLINE:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let result = tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the subscriber stops within 30 s of shutdown")
            .expect("the subscriber task does not panic");
        result.expect("the subscriber ends without error");
    }
}

/// Publishes one message per call, in order, asserting each is confirmed.
async fn publish_each(publisher: &dyn Publisher, messages: &[FanoutMessage]) {
    for m in messages {
        let results = publisher.publish(std::slice::from_ref(m)).await;
        assert_eq!(results.len(), 1, "one result per message");
        if let Err(e) = &results[0] {
            panic!(
                "{} did not confirm {}: {e}",
                publisher.name(),
                m.instruction_id
            );
        }
    }
}

fn applied_by_account(consumer: &dyn ProbeConsumer) -> BTreeMap<String, Vec<u64>> {
    let mut by_account: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (account, sequence, _) in consumer.applied() {
        by_account.entry(account).or_default().push(sequence);
    }
    by_account
}

fn assert_each_account_applied_in_order(
    consumer: &dyn ProbeConsumer,
    accounts: usize,
    per_account: u64,
) {
    let by_account = applied_by_account(consumer);
    assert_eq!(
        by_account.len(),
        accounts,
        "accounts applied: {by_account:?}"
    );
    for (account, sequences) in &by_account {
        assert_eq!(
            sequences,
            &(1..=per_account).collect::<Vec<_>>(),
            "{account} applied exactly once each, in order"
        );
        // Each message credits 100 × its sequence (see `message`).
        let expected: i64 = (1..=per_account as i64).map(|s| 100 * s).sum();
        assert_eq!(
            consumer.balance(account, "USD/2"),
            expected,
            "{account}'s treasury balance"
        );
    }
}

/// Every published message arrives with its payload and every header intact.
pub async fn delivered_with_payload_and_headers_intact(h: &impl TransportHarness) {
    let _shared = BROKER.read().await;
    let Some(dest) = destination(h, false).await else {
        return;
    };
    let mut traced = message("merchants:4471", 1, MessageKind::Committed);
    traced.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
    traced.tracestate = Some("vendor=opaque,x=1".into());
    let reversal = message("merchants:4471", 2, MessageKind::Reverted);
    let notice = message("merchants:9", 1, MessageKind::Rejected);
    assert_eq!(notice.ledger_tx_id, None);
    let mut large = message("merchants:7", 1, MessageKind::Committed);
    let mut tx: serde_json::Value = serde_json::from_slice(&large.payload).unwrap();
    tx["metadata"]["note"] = serde_json::Value::String("é€漢字 ".repeat(2000));
    large.payload = serde_json::to_vec(&tx).unwrap();
    let sent = vec![traced, reversal, notice, large];
    let consumer = h.consumer().await;
    let mut running = run_subscriber(dest.subscriber().await, consumer.clone());
    publish_each(dest.publisher().as_ref(), &sent).await;
    running
        .wait_until("4 messages applied", || consumer.applied().len() >= 4)
        .await;
    running.stop().await;
    let received = consumer.received();
    for m in &sent {
        let got = received
            .iter()
            .find(|r| r.instruction_id == m.instruction_id)
            .unwrap_or_else(|| panic!("{} was not delivered", m.instruction_id));
        assert_eq!(got, m, "delivered exactly as published");
    }
    dest.cleanup().await;
}

/// Several accounts interleaved, published by the fan-out loop: each account's
/// messages arrive and are applied in sequence order.
pub async fn per_account_order_holds_with_accounts_interleaved(h: &impl TransportHarness) {
    let _shared = BROKER.read().await;
    let Some(dest) = destination(h, false).await else {
        return;
    };
    let store = h.fanout_store().await;
    let messages = interleaved(4, 25);
    for (i, m) in messages.iter().enumerate() {
        store
            .append(&format!("delivery-{i}"), std::slice::from_ref(m))
            .await
            .expect("append");
    }
    let consumer = h.consumer().await;
    let mut running = run_subscriber(dest.subscriber().await, consumer.clone());
    let summary = drain(store.clone(), dest.publisher()).await;
    assert_eq!(summary.published, 100);
    running
        .wait_until("100 messages applied", || consumer.applied().len() >= 100)
        .await;
    running.stop().await;
    assert_each_account_applied_in_order(consumer.as_ref(), 4, 25);
    // Arrival order too, not only apply order: nothing had to wait in a gap queue.
    let mut arrived: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for m in consumer.received() {
        arrived
            .entry(m.account.as_str().to_owned())
            .or_default()
            .push(m.sequence);
    }
    for (account, sequences) in arrived {
        assert!(
            sequences.is_sorted(),
            "{account} arrived out of order: {sequences:?}"
        );
    }
    dest.cleanup().await;
}

async fn drain(
    store: Arc<dyn FanoutStore>,
    publisher: Arc<dyn Publisher>,
) -> outbox_core::FanoutSummary {
    let (_stop, shutdown) = watch::channel(false);
    let run = FanoutLoop::open(store, publisher, FanoutConfig::default())
        .await
        .expect("open the fan-out loop")
        .run(RunMode::Drain, shutdown);
    tokio::time::timeout(DEADLINE, run)
        .await
        .expect("the fan-out drain ends")
        .expect("the fan-out drain succeeds")
}

/// A message delivered twice (a re-send after a lost confirmation) is applied once.
pub async fn redelivered_duplicates_are_absorbed_by_the_inbox(h: &impl TransportHarness) {
    let _shared = BROKER.read().await;
    let Some(dest) = destination(h, false).await else {
        return;
    };
    let messages = interleaved(2, 5);
    let consumer = h.consumer().await;
    let mut running = run_subscriber(dest.subscriber().await, consumer.clone());
    publish_each(dest.publisher().as_ref(), &messages).await;
    publish_each(dest.publisher().as_ref(), &messages).await;
    running
        .wait_until("both copies received", || consumer.received().len() >= 20)
        .await;
    running.stop().await;
    assert_eq!(consumer.received().len(), 20, "each copy was handed over");
    assert_each_account_applied_in_order(consumer.as_ref(), 2, 5);
    dest.cleanup().await;
}

/// The broker stops while the fan-out loop is publishing and the subscriber consuming,
/// then starts again: every message is applied exactly once, in order.
pub async fn broker_restart_mid_stream_loses_nothing(h: &impl TransportHarness) {
    let _exclusive = BROKER.write().await;
    let Some(dest) = destination(h, true).await else {
        return;
    };
    let store = h.fanout_store().await;
    let consumer = h.consumer().await;
    let mut running = run_subscriber(dest.subscriber().await, consumer.clone());
    let (stop_loop, shutdown) = watch::channel(false);
    let config = FanoutConfig {
        poll_interval: Duration::from_millis(20),
        backoff: outbox_core::Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        },
        ..FanoutConfig::default()
    };
    let fanout = tokio::spawn(
        FanoutLoop::open(store.clone(), dest.publisher(), config)
            .await
            .expect("open the fan-out loop")
            .run(RunMode::Daemon, shutdown),
    );
    let messages = interleaved(5, 20);
    let (first, second) = messages.split_at(50);
    for (i, m) in first.iter().enumerate() {
        store
            .append(&format!("first-{i}"), std::slice::from_ref(m))
            .await
            .expect("append");
    }
    running
        .wait_until("the first half applied", || consumer.applied().len() >= 50)
        .await;

    dest.stop_broker().await;
    // Published while the broker is down: the loop must keep them until confirmed.
    for (i, m) in second.iter().enumerate() {
        store
            .append(&format!("second-{i}"), std::slice::from_ref(m))
            .await
            .expect("append");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    dest.start_broker().await;
    if !dest.consumers_survive_restart() {
        running.stop().await;
        running = run_subscriber(dest.subscriber().await, consumer.clone());
    }

    running
        .wait_until("all 100 applied after the restart", || {
            consumer.applied().len() >= 100
        })
        .await;
    let _ = stop_loop.send(true);
    let summary = tokio::time::timeout(Duration::from_secs(60), fanout)
        .await
        .expect("the fan-out loop stops")
        .expect("no panic")
        .expect("the fan-out loop ends without error");
    running.stop().await;
    assert!(summary.published >= 100, "{summary:?}");
    assert_each_account_applied_in_order(consumer.as_ref(), 5, 20);
    dest.cleanup().await;
}

/// Each fault the transport can inject is reported with the right kind and retry class.
pub async fn injected_faults_map_to_error_kind_and_retry_class(h: &impl TransportHarness) {
    let _shared = BROKER.read().await;
    let Some(dest) = destination(h, false).await else {
        return;
    };
    let faults = dest.faults().await;
    assert!(!faults.is_empty(), "a transport injects at least one fault");
    for fault in faults {
        let results = fault
            .publisher
            .publish(std::slice::from_ref(&fault.message))
            .await;
        let error = match results.into_iter().next() {
            Some(Err(e)) => e,
            other => panic!("{}: expected an error, got {other:?}", fault.name),
        };
        assert_eq!(error.kind(), &fault.kind, "{}: {error}", fault.name);
        assert_eq!(
            error.is_transient(),
            fault.transient,
            "{}: {error}",
            fault.name
        );
        if let Some(after) = fault.after {
            assert_eq!(
                error.retry(),
                outbox_core::Retry::Transient { after: Some(after) },
                "{}: {error}",
                fault.name
            );
        }
    }
    dest.cleanup().await;
}
