//! In-memory fakes for unit tests of core logic (the real stores and ledger are
//! exercised in their own crates and in the `tests` crate).

mod memory_inbox;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;

use crate::domain::{
    Account, EventId, Metadata, NewEvent, OutboxEvent, Position, PositionDecoder, PositionEncoder,
};
use crate::error::{Error, ErrorKind, Result};
use crate::exception::{Exception, NewException};
use crate::ledger::{
    Balances, BulkItem, Ledger, LedgerCapabilities, LedgerTransaction, PostOutcome,
};
use crate::store::{DeliveryOutcome, DeliveryRecord, Lag, Store, StoreCapabilities};

pub(crate) use memory_inbox::MemoryInbox;

/// The configuration of the engines' property tests: `default_cases` cases, unless
/// `PROPTEST_CASES` asks for another number (a longer run by hand).
pub(crate) fn proptest_config(default_cases: u32) -> proptest::test_runner::Config {
    let mut config = proptest::test_runner::Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = default_cases;
    }
    config
}

/// The memory store's positions: the row number, defined here as any store defines
/// its own.
pub(crate) fn row_position(row: i64) -> Position {
    PositionEncoder::new().i64(row).finish(|bytes, f| {
        match PositionDecoder::from_bytes(bytes).i64() {
            Some(row) => write!(f, "row {row}"),
            None => write!(f, "{bytes:?}"),
        }
    })
}

#[derive(Default)]
pub(crate) struct MemoryState {
    pub events: Vec<OutboxEvent>,
    pub cursors: HashMap<String, Position>,
    pub deliveries: Vec<DeliveryRecord>,
    pub exceptions: Vec<NewException>,
    /// Calls of `deliveries` (one event) and of `delivery_states` (a batch).
    pub single_lookups: usize,
    pub batch_lookups: usize,
}

#[derive(Clone, Default)]
pub(crate) struct MemoryStore(pub Arc<Mutex<MemoryState>>);

impl MemoryStore {
    pub fn add(&self, new: &NewEvent) -> OutboxEvent {
        let mut s = self.0.lock().unwrap();
        let sequence = s.events.iter().filter(|e| e.account == new.account).count() as u64 + 1;
        let (event_id, payload) = new.encode(sequence).unwrap();
        let event = OutboxEvent {
            position: row_position(s.events.len() as i64 + 1),
            event_id,
            account: new.account.clone(),
            sequence,
            payload,
            created_at: Utc::now(),
        };
        s.events.push(event.clone());
        event
    }

    pub fn outcomes(&self, id: EventId) -> Vec<DeliveryOutcome> {
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
        let mut s = self.0.lock().unwrap();
        let saved = s.cursors.entry(relay.to_owned()).or_insert(position);
        *saved = (*saved).max(position);
        Ok(())
    }
    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> Result<()> {
        self.0.lock().unwrap().deliveries.extend_from_slice(records);
        Ok(())
    }
    async fn deliveries(&self, event_id: EventId) -> Result<Vec<DeliveryRecord>> {
        let mut s = self.0.lock().unwrap();
        s.single_lookups += 1;
        Ok(s.deliveries
            .iter()
            .filter(|d| d.event_id == event_id)
            .cloned()
            .collect())
    }
    async fn delivery_states(
        &self,
        event_ids: &[EventId],
    ) -> Result<HashMap<EventId, crate::store::DeliveryState>> {
        let mut s = self.0.lock().unwrap();
        s.batch_lookups += 1;
        let records = s
            .deliveries
            .iter()
            .filter(|d| event_ids.contains(&d.event_id))
            .cloned()
            .collect();
        Ok(crate::store::fold_delivery_states(records))
    }
    async fn has_deliveries(&self) -> Result<bool> {
        Ok(!self.0.lock().unwrap().deliveries.is_empty())
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
pub(crate) struct FakeLedgerState {
    pub by_key: HashMap<EventId, (u64, Vec<u8>)>,
    pub script: HashMap<EventId, VecDeque<Result<PostOutcome>>>,
    pub calls: Vec<(&'static str, EventId)>,
    pub notices: Vec<(String, Metadata)>,
    pub reverts: Vec<(EventId, u64, Metadata)>,
    pub next_id: u64,
    /// The next notices are written, then answered with a transient error (the
    /// answer lost after the write).
    pub notice_answers_lost: u32,
    /// A store to look at when a notice arrives: was the refusal already recorded?
    pub observed: Option<MemoryStore>,
    pub notice_after_record: Vec<bool>,
    /// Whether `post_run` is offered (off by default, so the other tests see one
    /// call per head).
    pub ordered_runs: bool,
    /// The length of every `post_run` call, in call order.
    pub runs: Vec<usize>,
    /// The next runs commit, then answer with a transient error (the answer lost).
    pub run_answers_lost: u32,
}

#[derive(Clone, Default)]
pub(crate) struct FakeLedger(pub Arc<Mutex<FakeLedgerState>>);

impl FakeLedger {
    pub fn script(&self, id: EventId, answers: Vec<Result<PostOutcome>>) {
        self.0.lock().unwrap().script.insert(id, answers.into());
    }
    pub fn calls(&self) -> Vec<(&'static str, EventId)> {
        self.0.lock().unwrap().calls.clone()
    }
    pub fn answer(&self, kind: &'static str, key: EventId, body: &[u8]) -> Result<PostOutcome> {
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
        let capabilities = LedgerCapabilities::new(100);
        if self.0.lock().unwrap().ordered_runs {
            capabilities.with_ordered_runs()
        } else {
            capabilities
        }
    }
    async fn post(&self, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        self.answer("post", key, body)
    }
    /// All or nothing: the first element that is not accepted or replayed rolls back
    /// the keys the run stored; an error scripted for an element fails the whole call.
    async fn post_run(&self, items: &[BulkItem<'_>]) -> Result<crate::RunOutcome> {
        self.0.lock().unwrap().runs.push(items.len());
        let mut ids = Vec::with_capacity(items.len());
        let mut stored = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let fresh = !self.0.lock().unwrap().by_key.contains_key(&item.key);
            let answer = self.answer("run", item.key, item.body);
            if fresh && matches!(answer, Ok(PostOutcome::Accepted { .. })) {
                stored.push(item.key);
            }
            let failed = match answer {
                Ok(
                    PostOutcome::Accepted { transaction_id }
                    | PostOutcome::Replayed { transaction_id },
                ) => {
                    ids.push(transaction_id);
                    continue;
                }
                Ok(PostOutcome::Rejected { code, message }) => Ok(format!("{code}: {message}")),
                Err(e) if e.is_transient() => Err(e),
                Err(e) => Ok(e.to_string()),
            };
            let mut s = self.0.lock().unwrap();
            for key in &stored {
                s.by_key.remove(key);
            }
            return failed.map(|reason| crate::RunOutcome::RolledBack { index, reason });
        }
        let mut s = self.0.lock().unwrap();
        if s.run_answers_lost > 0 {
            s.run_answers_lost -= 1;
            return Err(Error::new(ErrorKind::Transport, "timed out").transient(None));
        }
        Ok(crate::RunOutcome::Committed(ids))
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
            timestamp: None,
            inserted_at: None,
        }))
    }
    async fn save_account_metadata(
        &self,
        key: &str,
        _account: &Account,
        metadata: &Metadata,
    ) -> Result<()> {
        let mut s = self.0.lock().unwrap();
        if let Some(store) = &s.observed {
            let recorded = metadata
                .get(crate::domain::OUTBOX_EVENT_ID_KEY)
                .and_then(|id| EventId::parse(id).ok())
                .is_some_and(|id| store.outcomes(id).contains(&DeliveryOutcome::Rejected));
            s.notice_after_record.push(recorded);
        }
        s.notices.push((key.to_owned(), metadata.clone()));
        if s.notice_answers_lost > 0 {
            s.notice_answers_lost -= 1;
            return Err(Error::new(ErrorKind::Transport, "timed out").transient(None));
        }
        Ok(())
    }
    async fn rejection_notice(
        &self,
        _account: &Account,
        event_id: EventId,
    ) -> Result<Option<String>> {
        let s = self.0.lock().unwrap();
        let key = crate::dispatch::notice::rejection_marker_key(event_id);
        Ok(s.notices
            .iter()
            .rev()
            .find_map(|(_, m)| m.get(&key).cloned()))
    }
    async fn aggregate_balances(&self, _address: &str) -> Result<Balances> {
        Ok(BTreeMap::new())
    }
}
