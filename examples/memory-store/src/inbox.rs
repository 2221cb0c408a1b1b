//! `MemoryConsumer` and `MemoryInbox`: a consumer's database in memory and the
//! transaction the inbox engine runs in (`outbox_core::Inbox`).
//!
//! The consumer's own data (`A`, what its handler writes: a treasury, a ledger
//! mirror) lives in the same database as the inbox tables, so the impact and the
//! processed marker commit together (docs/ARCHITECTURE.md, "Invariant 3").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use outbox_core::{
    Account, Error, ErrorKind, Exception, HeldGap, HeldMessage, HoldResult, Inbox, InboxMessage,
    MessageKind, NewException, Result,
};
use tokio::sync::OwnedMutexGuard;

use crate::database::lock;
use crate::exceptions::ExceptionQueue;

/// A processed marker as [`MemoryConsumer::processed`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessedMarker {
    /// The instruction (outbox event) id the marker keys on.
    pub instruction_id: String,
    /// The account whose sequence it consumed.
    pub account: Account,
    /// That sequence.
    pub sequence: u64,
    /// The outcome it was processed as.
    pub kind: MessageKind,
    /// When its transaction wrote it.
    pub applied_at: DateTime<Utc>,
}

/// One consumer database in memory, holding the inbox of any number of consumers
/// (every key starts with the consumer's name) and their data `A`.
///
/// Clones share the database.
#[derive(Debug)]
pub struct MemoryConsumer<A> {
    db: Arc<ConsumerDb<A>>,
}

impl<A> Clone for MemoryConsumer<A> {
    fn clone(&self) -> Self {
        Self {
            db: Arc::clone(&self.db),
        }
    }
}

#[derive(Debug)]
struct ConsumerDb<A> {
    committed: Mutex<ConsumerTables<A>>,
    /// Held by an open [`MemoryInbox`]: one transaction at a time, so one account's
    /// messages are decided one after the other and a redelivery racing its original
    /// waits for it (the `Inbox` contract's concurrency rule).
    writer: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug, Clone)]
struct ConsumerTables<A> {
    /// Append-only: (consumer, instruction id) → marker.
    processed: HashMap<(String, String), ProcessedMarker>,
    /// (consumer, account) → high-water mark.
    last_applied: HashMap<(String, Account), u64>,
    /// The gap queue: (consumer, account, sequence) → the message and when it was held.
    held: BTreeMap<(String, Account, u64), (InboxMessage, DateTime<Utc>)>,
    exceptions: ExceptionQueue,
    data: A,
}

impl<A: Clone + Send + 'static> MemoryConsumer<A> {
    /// A new consumer database whose own data starts as `data`.
    pub fn new(data: A) -> Self {
        let tables = ConsumerTables {
            processed: HashMap::new(),
            last_applied: HashMap::new(),
            held: BTreeMap::new(),
            exceptions: ExceptionQueue::default(),
            data,
        };
        Self {
            db: Arc::new(ConsumerDb {
                committed: Mutex::new(tables),
                writer: Arc::default(),
            }),
        }
    }

    /// Opens a transaction, waiting while another one is open.
    pub async fn begin(&self) -> MemoryInbox<A> {
        let writer = Arc::clone(&self.db.writer).lock_owned().await;
        // Taken under the writer lock: no commit can replace the tables meanwhile.
        let working = lock(&self.db.committed).map(|tables| tables.clone());
        MemoryInbox {
            db: Arc::clone(&self.db),
            _writer: writer,
            working,
        }
    }

    /// Reads the committed data `A`.
    ///
    /// # Errors
    /// `Internal` only when an earlier panic left the state unreadable.
    pub fn read<R>(&self, read: impl FnOnce(&A) -> R) -> Result<R> {
        Ok(read(&lock(&self.db.committed)?.data))
    }

    /// The committed processed markers of `consumer`, by account then sequence.
    pub fn processed(&self, consumer: &str) -> Result<Vec<ProcessedMarker>> {
        let tables = lock(&self.db.committed)?;
        let mut markers: Vec<ProcessedMarker> = tables
            .processed
            .iter()
            .filter(|((c, _), _)| c == consumer)
            .map(|(_, marker)| marker.clone())
            .collect();
        markers.sort_by(|a, b| (&a.account, a.sequence).cmp(&(&b.account, b.sequence)));
        Ok(markers)
    }

    /// The committed gap queue of `consumer`, by account then sequence.
    pub fn held(&self, consumer: &str) -> Result<Vec<HeldMessage>> {
        let tables = lock(&self.db.committed)?;
        Ok(tables
            .held
            .iter()
            .filter(|((c, _, _), _)| c == consumer)
            .map(|((c, account, sequence), (message, held_at))| HeldMessage {
                consumer: c.clone(),
                account: account.clone(),
                sequence: *sequence,
                kind: message.kind,
                held_at: *held_at,
            })
            .collect())
    }

    /// Every committed exception of this database, oldest first.
    pub fn exceptions(&self) -> Result<Vec<Exception>> {
        Ok(lock(&self.db.committed)?.exceptions.all())
    }
}

/// An open transaction on a [`MemoryConsumer`]: the inbox the engine writes through,
/// and the consumer's data for its handler ([`data_mut`](Self::data_mut)).
///
/// It works on a copy of the database taken at `begin`, under the writer lock: its
/// reads see its own writes, [`commit`](Self::commit) installs the copy, and a
/// rollback or a drop discards it. (A copy of everything per transaction is what
/// keeps this model short; a real backend would use its own transactions.)
#[derive(Debug)]
pub struct MemoryInbox<A> {
    db: Arc<ConsumerDb<A>>,
    _writer: OwnedMutexGuard<()>,
    /// `Err` when the committed state was unreadable at `begin`: every call fails.
    working: Result<ConsumerTables<A>>,
}

impl<A> MemoryInbox<A> {
    /// The consumer's data in this transaction, for the handler to write its impact.
    ///
    /// # Errors
    /// `Internal` only when the state was unreadable at `begin`.
    pub fn data_mut(&mut self) -> Result<&mut A> {
        Ok(&mut self.tables()?.data)
    }

    /// Makes everything this transaction wrote visible at once.
    ///
    /// # Errors
    /// `Internal` only when an earlier panic left the state unreadable.
    pub fn commit(self) -> Result<()> {
        let working = self.working?;
        *lock(&self.db.committed)? = working;
        Ok(())
    }

    /// Discards everything this transaction wrote. Dropping it does the same.
    pub fn rollback(self) {}

    fn tables(&mut self) -> Result<&mut ConsumerTables<A>> {
        self.working.as_mut().map_err(|e| e.clone())
    }
}

impl<A> Inbox for MemoryInbox<A> {
    async fn processed_kind(
        &mut self,
        consumer: &str,
        instruction_id: &str,
    ) -> Result<Option<MessageKind>> {
        let key = (consumer.to_owned(), instruction_id.to_owned());
        Ok(self.tables()?.processed.get(&key).map(|marker| marker.kind))
    }

    async fn last_applied(&mut self, consumer: &str, account: &Account) -> Result<u64> {
        let key = (consumer.to_owned(), account.clone());
        Ok(self.tables()?.last_applied.get(&key).copied().unwrap_or(0))
    }

    async fn mark_applied(&mut self, consumer: &str, message: &InboxMessage) -> Result<()> {
        let tables = self.tables()?;
        let key = (consumer.to_owned(), message.instruction_id.clone());
        if tables.processed.contains_key(&key) {
            // The primary key of a SQL inbox refuses this insert the same way.
            return Err(Error::new(
                ErrorKind::Immutable,
                format!(
                    "consumer {consumer}: instruction {} already has a processed marker, which is never replaced",
                    message.instruction_id
                ),
            ));
        }
        tables.processed.insert(
            key,
            ProcessedMarker {
                instruction_id: message.instruction_id.clone(),
                account: message.account.clone(),
                sequence: message.sequence,
                kind: message.kind,
                applied_at: Utc::now(),
            },
        );
        tables.last_applied.insert(
            (consumer.to_owned(), message.account.clone()),
            message.sequence,
        );
        Ok(())
    }

    async fn hold(&mut self, consumer: &str, message: &InboxMessage) -> Result<HoldResult> {
        let slot = (
            consumer.to_owned(),
            message.account.clone(),
            message.sequence,
        );
        let held = &mut self.tables()?.held;
        if let Some((holder, _)) = held.get(&slot) {
            return Ok(HoldResult::Occupied {
                instruction_id: holder.instruction_id.clone(),
                kind: holder.kind,
            });
        }
        held.insert(slot, (message.clone(), Utc::now()));
        Ok(HoldResult::Held)
    }

    async fn take_held(
        &mut self,
        consumer: &str,
        account: &Account,
        sequence: u64,
    ) -> Result<Option<InboxMessage>> {
        let slot = (consumer.to_owned(), account.clone(), sequence);
        Ok(self
            .tables()?
            .held
            .remove(&slot)
            .map(|(message, _)| message))
    }

    async fn record_exception(&mut self, exception: &NewException) -> Result<bool> {
        Ok(self.tables()?.exceptions.raise(exception))
    }

    async fn held_gaps(&mut self, consumer: &str) -> Result<Vec<HeldGap>> {
        let tables = self.tables()?;
        let mut gaps: BTreeMap<&Account, HeldGap> = BTreeMap::new();
        // Keys ascend: the first held message seen of an account is its lowest.
        for ((c, account, sequence), (_, held_at)) in &tables.held {
            if c != consumer || gaps.contains_key(account) {
                continue;
            }
            let last_applied = tables
                .last_applied
                .get(&(consumer.to_owned(), account.clone()))
                .copied()
                .unwrap_or(0);
            gaps.insert(
                account,
                HeldGap {
                    account: account.clone(),
                    last_applied,
                    lowest_held: *sequence,
                    held_at: *held_at,
                },
            );
        }
        Ok(gaps.into_values().collect())
    }
}
