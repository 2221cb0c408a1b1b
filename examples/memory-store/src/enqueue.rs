//! `MemoryTransaction`: the caller's transaction that enqueue writes in.
//!
//! A store crate offers enqueue on its own transaction type (docs/ADAPTERS.md,
//! "Store and relay"). Here the transaction holds the store's writer lock and buffers
//! its events: they are invisible to every reader until [`MemoryTransaction::commit`]
//! appends them, and a rollback (or a drop) discards them, sequences included.

use std::sync::Arc;

use chrono::Utc;
use outbox_core::{Account, Error, EventId, NewEvent, OutboxEvent, Result};
use tokio::sync::OwnedMutexGuard;

use crate::MemoryStore;
use crate::database::{Database, Tables, lock};
use crate::position::row_position;

/// An open write transaction on a [`MemoryStore`]. Only one is open at a time per
/// store: [`MemoryStore::begin`] waits for the previous one to end.
#[derive(Debug)]
pub struct MemoryTransaction {
    db: Arc<Database>,
    /// Held until commit, rollback or drop.
    _writer: OwnedMutexGuard<()>,
    /// Enqueued here, not yet committed, in enqueue order.
    pending: Vec<OutboxEvent>,
}

impl MemoryStore {
    /// Opens a write transaction, waiting while another one is open.
    pub async fn begin(&self) -> MemoryTransaction {
        let writer = Arc::clone(&self.db.writer).lock_owned().await;
        MemoryTransaction {
            db: Arc::clone(&self.db),
            _writer: writer,
            pending: Vec::new(),
        }
    }
}

impl MemoryTransaction {
    /// Enqueues `event` in this transaction: the account's next sequence (gapless
    /// from 1, counting this transaction's own events), the payload encoded once, as
    /// the relay will send it, and the position the event will have once committed.
    ///
    /// # Errors
    /// `InvalidInput` naming the field for an invalid event, `event_id` for an id
    /// already enqueued (here or committed), `revert` for a revert whose target is not
    /// in the outbox or belongs to another account. Nothing is written and the
    /// transaction stays usable.
    pub fn enqueue(&mut self, event: &NewEvent) -> Result<OutboxEvent> {
        event.validate()?;
        let tables = lock(&self.db.tables)?;
        if let Some(id) = event.event_id
            && self.account_of(&tables, id).is_some()
        {
            return Err(Error::invalid(
                "event_id",
                format!("{id} is already enqueued"),
            ));
        }
        if let Some(target) = event.revert_target() {
            event.check_revert_target(self.account_of(&tables, target).map(Account::as_str))?;
        }
        let sequence = self.last_sequence(&tables, &event.account) + 1;
        let (event_id, payload) = event.encode(sequence)?;
        // Rows are only appended by commits, and this transaction holds the writer
        // lock: its events get the rows right after the committed ones.
        let row = (tables.events.len() + self.pending.len() + 1) as u64;
        drop(tables);
        let stored = OutboxEvent {
            position: row_position(row),
            event_id,
            account: event.account.clone(),
            sequence,
            payload,
            created_at: Utc::now(),
        };
        self.pending.push(stored.clone());
        Ok(stored)
    }

    /// Makes this transaction's events visible, in enqueue order, and wakes the relays.
    ///
    /// # Errors
    /// `Internal` only when an earlier panic left the state unreadable.
    pub fn commit(self) -> Result<()> {
        let mut tables = lock(&self.db.tables)?;
        for event in self.pending {
            tables
                .account_of
                .insert(event.event_id, event.account.clone());
            tables
                .last_sequence
                .insert(event.account.clone(), event.sequence);
            tables.events.push(event);
        }
        drop(tables);
        self.db.wakeup.notify();
        Ok(())
    }

    /// Discards this transaction's events; their sequences are given again. Dropping
    /// the transaction does the same.
    pub fn rollback(self) {}

    fn account_of<'a>(&'a self, tables: &'a Tables, id: EventId) -> Option<&'a Account> {
        tables.account_of.get(&id).or_else(|| {
            self.pending
                .iter()
                .find(|e| e.event_id == id)
                .map(|e| &e.account)
        })
    }

    fn last_sequence(&self, tables: &Tables, account: &Account) -> u64 {
        self.pending
            .iter()
            .rev()
            .find(|e| &e.account == account)
            .map(|e| e.sequence)
            .or_else(|| tables.last_sequence.get(account).copied())
            .unwrap_or(0)
    }
}
