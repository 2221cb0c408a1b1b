//! Unit tests of the dispatcher's logic with in-memory fakes (the real store and the
//! real HTTP ledger are exercised in the `tests` crate).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::*;
use crate::domain::Account;
use crate::domain::{
    Amount, Asset, EventId, LedgerCommand, NewEvent, PostBody, PostCommand, Posting, RevertCommand,
};
use crate::exception::Exception;
use crate::ledger::{Balances, BulkItem, LedgerCapabilities, LedgerTransaction};
use crate::relay::PollingRelay;
use crate::store::{Lag, StoreCapabilities};

#[derive(Default)]
struct MemoryState {
    events: Vec<OutboxEvent>,
    cursors: HashMap<String, Position>,
    deliveries: Vec<DeliveryRecord>,
    exceptions: Vec<NewException>,
}

#[derive(Clone, Default)]
struct MemoryStore(Arc<Mutex<MemoryState>>);

impl MemoryStore {
    fn add(&self, new: &NewEvent) -> OutboxEvent {
        let mut s = self.0.lock().unwrap();
        let sequence = s.events.iter().filter(|e| e.account == new.account).count() as u64 + 1;
        let (event_id, payload) = new.encode(sequence).unwrap();
        let event = OutboxEvent {
            position: Position::Row(s.events.len() as i64 + 1),
            event_id,
            account: new.account.clone(),
            sequence,
            payload,
            created_at: Utc::now(),
        };
        s.events.push(event.clone());
        event
    }

    fn outcomes(&self, id: EventId) -> Vec<DeliveryOutcome> {
        let s = self.0.lock().unwrap();
        s.deliveries
            .iter()
            .filter(|d| d.event_id == id)
            .map(|d| d.outcome)
            .collect()
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::default()
    }
    async fn read_committed(
        &self,
        after: Option<Position>,
        limit: usize,
    ) -> Result<Vec<OutboxEvent>> {
        let s = self.0.lock().unwrap();
        Ok(s.events
            .iter()
            .filter(|e| after.is_none_or(|a| e.position > a))
            .take(limit)
            .cloned()
            .collect())
    }
    async fn load_cursor(&self, relay: &str) -> Result<Option<Position>> {
        Ok(self.0.lock().unwrap().cursors.get(relay).copied())
    }
    async fn save_cursor(&self, relay: &str, position: Position) -> Result<()> {
        self.0
            .lock()
            .unwrap()
            .cursors
            .insert(relay.to_owned(), position);
        Ok(())
    }
    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> Result<()> {
        self.0.lock().unwrap().deliveries.extend_from_slice(records);
        Ok(())
    }
    async fn deliveries(&self, event_id: EventId) -> Result<Vec<DeliveryRecord>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .deliveries
            .iter()
            .filter(|d| d.event_id == event_id)
            .cloned()
            .collect())
    }
    async fn raise_exception(&self, exception: &NewException) -> Result<bool> {
        self.0.lock().unwrap().exceptions.push(exception.clone());
        Ok(true)
    }
    async fn exceptions(&self) -> Result<Vec<Exception>> {
        Ok(Vec::new())
    }
    async fn lag(&self, _relay: &str) -> Result<Lag> {
        Ok(Lag::default())
    }
}

/// A ledger that keeps keys like Formance and answers from a script first.
#[derive(Default)]
struct FakeLedgerState {
    by_key: HashMap<EventId, (u64, Vec<u8>)>,
    script: HashMap<EventId, VecDeque<Result<PostOutcome>>>,
    calls: Vec<(&'static str, EventId)>,
    notices: Vec<(String, Metadata)>,
    reverts: Vec<(EventId, u64, Metadata)>,
    next_id: u64,
}

#[derive(Clone, Default)]
struct FakeLedger(Arc<Mutex<FakeLedgerState>>);

impl FakeLedger {
    fn script(&self, id: EventId, answers: Vec<Result<PostOutcome>>) {
        self.0.lock().unwrap().script.insert(id, answers.into());
    }
    fn calls(&self) -> Vec<(&'static str, EventId)> {
        self.0.lock().unwrap().calls.clone()
    }
    fn answer(&self, kind: &'static str, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        let mut s = self.0.lock().unwrap();
        s.calls.push((kind, key));
        if let Some(answer) = s.script.get_mut(&key).and_then(VecDeque::pop_front) {
            return answer;
        }
        if let Some((id, stored)) = s.by_key.get(&key) {
            return if stored == body {
                Ok(PostOutcome::Replayed {
                    transaction_id: *id,
                })
            } else {
                Err(Error::new(
                    ErrorKind::IdempotencyMismatch,
                    "invalid idempotency hash",
                ))
            };
        }
        s.next_id += 1;
        let id = s.next_id;
        s.by_key.insert(key, (id, body.to_vec()));
        Ok(PostOutcome::Accepted { transaction_id: id })
    }
}

#[async_trait]
impl Ledger for FakeLedger {
    fn capabilities(&self) -> LedgerCapabilities {
        LedgerCapabilities::new(100)
    }
    async fn post(&self, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        self.answer("post", key, body)
    }
    async fn post_bulk(&self, items: &[BulkItem<'_>]) -> Result<Vec<Result<PostOutcome>>> {
        Ok(items
            .iter()
            .map(|i| self.answer("bulk", i.key, i.body))
            .collect())
    }
    async fn revert(
        &self,
        key: EventId,
        transaction_id: u64,
        metadata: &Metadata,
    ) -> Result<PostOutcome> {
        self.0
            .lock()
            .unwrap()
            .reverts
            .push((key, transaction_id, metadata.clone()));
        self.answer("revert", key, format!("revert {transaction_id}").as_bytes())
    }
    async fn transaction_by_event_id(
        &self,
        event_id: EventId,
    ) -> Result<Option<LedgerTransaction>> {
        let s = self.0.lock().unwrap();
        Ok(s.by_key.get(&event_id).map(|(id, _)| LedgerTransaction {
            id: *id,
            postings: Vec::new(),
            reference: None,
            metadata: Metadata::new(),
            reverted: false,
        }))
    }
    async fn save_account_metadata(
        &self,
        key: &str,
        _account: &Account,
        metadata: &Metadata,
    ) -> Result<()> {
        self.0
            .lock()
            .unwrap()
            .notices
            .push((key.to_owned(), metadata.clone()));
        Ok(())
    }
    async fn aggregate_balances(&self, _address: &str) -> Result<Balances> {
        Ok(BTreeMap::new())
    }
}

fn payout(merchant: &str, amount: u64) -> NewEvent {
    NewEvent::new(
        Account::parse(&format!("merchants:{merchant}")).unwrap(),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: Account::parse("world").unwrap(),
                destination: Account::parse(&format!("merchants:{merchant}:available")).unwrap(),
                amount: Amount::new(amount),
                asset: Asset::parse("USD/2").unwrap(),
            }]),
            reference: None,
            metadata: Metadata::new(),
        }),
    )
}

fn config() -> DispatchConfig {
    DispatchConfig {
        backoff: Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(20),
        },
        poll_interval: Duration::from_millis(10),
        max_attempts: Some(50),
        ..DispatchConfig::default()
    }
}

async fn drain(store: &MemoryStore, ledger: &FakeLedger, config: DispatchConfig) -> Summary {
    let relay = PollingRelay::open(store.clone(), "relay", None)
        .await
        .unwrap();
    let dispatcher = Dispatcher::open(
        Arc::new(store.clone()),
        Box::new(relay),
        Arc::new(ledger.clone()),
        config,
    )
    .await
    .unwrap();
    let (_tx, rx) = watch::channel(false);
    tokio::time::timeout(Duration::from_secs(20), dispatcher.run(RunMode::Drain, rx))
        .await
        .expect("drain finished")
        .unwrap()
}

fn transient() -> Result<PostOutcome> {
    Err(Error::new(ErrorKind::Ledger, "503").transient(None))
}

#[tokio::test]
async fn transient_failure_parks_only_its_account_and_keeps_order() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let a: Vec<_> = (0..3).map(|i| store.add(&payout("a", 10 + i))).collect();
    let b: Vec<_> = (0..3).map(|i| store.add(&payout("b", 20 + i))).collect();
    ledger.script(a[0].event_id, vec![transient(), transient(), transient()]);
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.accepted, summary.retried), (6, 3));
    let calls = ledger.calls();
    let pos = |id: EventId| calls.iter().rposition(|(_, c)| *c == id).unwrap();
    // Per account: each event is sent only after the previous one finished.
    assert!(pos(a[0].event_id) < calls.iter().position(|(_, c)| *c == a[1].event_id).unwrap());
    assert!(pos(a[1].event_id) < pos(a[2].event_id));
    // B was not held back by A's failures.
    assert!(pos(b[2].event_id) < pos(a[1].event_id), "{calls:?}");
    assert_eq!(
        store
            .outcomes(a[0].event_id)
            .iter()
            .filter(|o| **o == DeliveryOutcome::Failed)
            .count(),
        3
    );
    assert_eq!(
        store.load_cursor("relay").await.unwrap(),
        Some(b[2].position)
    );
}

#[tokio::test]
async fn rejection_is_recorded_notified_and_the_account_continues() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let first = store.add(&payout("a", 1));
    let second = store.add(&payout("a", 2));
    ledger.script(
        first.event_id,
        vec![Ok(PostOutcome::Rejected {
            code: "INSUFFICIENT_FUND".into(),
            message: "no".into(),
        })],
    );
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.rejected, summary.accepted), (1, 1));
    assert_eq!(
        store.outcomes(first.event_id),
        vec![DeliveryOutcome::Rejected]
    );
    assert_eq!(
        store.outcomes(second.event_id),
        vec![DeliveryOutcome::Accepted]
    );
    let notices = ledger.0.lock().unwrap().notices.clone();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].0, format!("{}:rejected", first.event_id));
    assert_eq!(notices[0].1[OUTBOX_SEQUENCE_KEY], "1");
    assert_eq!(notices[0].1[OUTBOX_REJECTED_CODE_KEY], "INSUFFICIENT_FUND");
    let exceptions = store.0.lock().unwrap().exceptions.clone();
    assert_eq!(
        (exceptions[0].kind, exceptions[0].sequence),
        (ExceptionKind::Rejected, 1)
    );
}

#[tokio::test]
async fn mismatch_stops_the_account_and_the_cursor_waits_for_it() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let a1 = store.add(&payout("a", 1));
    let a2 = store.add(&payout("a", 2));
    let b1 = store.add(&payout("b", 1));
    ledger.script(
        a1.event_id,
        vec![Err(Error::new(
            ErrorKind::IdempotencyMismatch,
            "invalid idempotency hash",
        ))],
    );
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.stopped, vec![a1.account.clone()]);
    assert_eq!(summary.accepted, 1);
    assert!(
        !ledger.calls().iter().any(|(_, id)| *id == a2.event_id),
        "a stopped account kept sending"
    );
    assert_eq!(store.outcomes(b1.event_id), vec![DeliveryOutcome::Accepted]);
    // The cursor never passes the stopped event, so a restart retries it.
    assert_eq!(store.load_cursor("relay").await.unwrap(), None);
    let exceptions = store.0.lock().unwrap().exceptions.clone();
    assert_eq!(exceptions[0].kind, ExceptionKind::IdempotencyMismatch);
}

#[tokio::test]
async fn after_a_crash_the_uncertain_window_is_resent_alone_and_seen_as_replay() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let events: Vec<_> = (0..4)
        .map(|i| store.add(&payout(&i.to_string(), 100)))
        .collect();
    // A previous run read all four, the ledger accepted the first two, then it died
    // before recording anything or moving the cursor.
    store
        .save_cursor("relay@attempted", events[3].position)
        .await
        .unwrap();
    for e in &events[..2] {
        let (_, body) = e.payload.split().unwrap();
        ledger.answer("post", e.event_id, body).unwrap();
    }
    let before = ledger.calls().len();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.replayed, summary.accepted), (2, 2));
    let calls = &ledger.calls()[before..];
    assert!(
        calls.iter().all(|(kind, _)| *kind == "post"),
        "uncertain events went in a bulk: {calls:?}"
    );
    assert_eq!(
        store.outcomes(events[0].event_id),
        vec![DeliveryOutcome::Replayed]
    );
    assert_eq!(
        store.outcomes(events[3].event_id),
        vec![DeliveryOutcome::Accepted]
    );
    // A second restart finds every event terminal and sends nothing.
    store.save_cursor("relay", Position::Row(0)).await.unwrap();
    let calls_before = ledger.calls().len();
    let again = drain(&store, &ledger, config()).await;
    assert_eq!(
        (again.already_done, ledger.calls().len()),
        (4, calls_before)
    );
}

#[tokio::test]
async fn steady_state_uses_bulk_and_reversal_reverts_its_target() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let payouts: Vec<_> = (0..5)
        .map(|i| store.add(&payout(&i.to_string(), 100)))
        .collect();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.accepted, 5);
    assert!(ledger.calls().iter().all(|(kind, _)| *kind == "bulk"));
    let reversal = store.add(&NewEvent::new(
        payouts[0].account.clone(),
        LedgerCommand::Revert(RevertCommand {
            event_id: payouts[0].event_id,
            metadata: Metadata::from([("event_type".to_owned(), "payout.reversed".to_owned())]),
        }),
    ));
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.accepted, 1);
    let reverts = ledger.0.lock().unwrap().reverts.clone();
    assert_eq!(reverts.len(), 1);
    assert_eq!((reverts[0].0, reverts[0].1), (reversal.event_id, 1));
    assert_eq!(
        reverts[0].2[OUTBOX_EVENT_ID_KEY],
        reversal.event_id.to_string()
    );
    assert_eq!(reverts[0].2["event_type"], "payout.reversed");
}

#[tokio::test]
async fn shutdown_stops_a_daemon_cleanly() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let e = store.add(&payout("a", 1));
    let relay = PollingRelay::open(store.clone(), "relay", None)
        .await
        .unwrap();
    let dispatcher = Dispatcher::open(
        Arc::new(store.clone()),
        Box::new(relay),
        Arc::new(ledger.clone()),
        config(),
    )
    .await
    .unwrap();
    let (tx, rx) = watch::channel(false);
    let run = tokio::spawn(dispatcher.run(RunMode::Daemon, rx));
    tokio::time::timeout(Duration::from_secs(10), async {
        while store.outcomes(e.event_id).is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("event delivered");
    tx.send(true).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("stopped")
        .unwrap()
        .unwrap();
    assert_eq!(summary.accepted, 1);
    assert_eq!(store.load_cursor("relay").await.unwrap(), Some(e.position));
}
