//! The outbox's shared state: its tables, the writer lock and the relays' wake-up.
//!
//! Every `MemoryStore` over one `Database` (a clone, or `MemoryStore::reopen`) sees
//! the same tables, as every connection to one database file does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use outbox_core::{
    Account, DeliveryRecord, Error, ErrorKind, EventId, OutboxEvent, Result, Wakeup,
};

use crate::exceptions::ExceptionQueue;

#[derive(Debug, Default)]
pub(crate) struct Database {
    /// What is committed. Held only for the length of one read or one commit, never
    /// across an await, so readers never wait for an open transaction.
    pub(crate) tables: Mutex<Tables>,
    /// Held by an open enqueue transaction from `begin` to commit or rollback: one
    /// writer at a time, like SQLite's write lock. It is what makes an account's next
    /// sequence safe to read at enqueue, and positions (taken at enqueue) commit order.
    pub(crate) writer: Arc<tokio::sync::Mutex<()>>,
    /// Notified on every commit; the store's relays wait on it.
    pub(crate) wakeup: Wakeup,
}

/// The committed records. Events, deliveries and exceptions are append-only: no code
/// of this crate changes or removes one, and no other code can reach them.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    /// The outbox, in commit order: the event at index `i` is row `i + 1`.
    pub(crate) events: Vec<OutboxEvent>,
    /// The account of every event, for the duplicate-id and revert-target checks.
    pub(crate) account_of: HashMap<EventId, Account>,
    /// Each account's last sequence (the counter row of the PostgreSQL store).
    pub(crate) last_sequence: HashMap<Account, u64>,
    /// Cursors by name, as rows (0 is never saved: rows start at 1).
    pub(crate) cursors: HashMap<String, u64>,
    /// Delivery records, oldest first.
    pub(crate) deliveries: Vec<DeliveryRecord>,
    pub(crate) exceptions: ExceptionQueue,
}

/// Locks `mutex`. A panic while it was held (a bug) may have left the state half
/// written: refuse to go on with an error rather than read it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    mutex.lock().map_err(|_| {
        Error::new(
            ErrorKind::Internal,
            "the in-memory state was poisoned by a panic while it was being written",
        )
    })
}
