//! The `Store` trait: the relay-side view of the outbox.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{EventId, OutboxEvent};
use crate::error::Result;
use crate::error::{Error, ErrorKind};
use crate::exception::{Exception, ExceptionQuery, NewException, Resolution};

/// The final or intermediate result of one attempt to post an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryOutcome {
    /// The ledger created the transaction.
    Accepted,
    /// The ledger replayed an earlier answer (`Idempotency-Hit: true`).
    Replayed,
    /// The ledger refused it permanently; the record carries the code.
    Rejected,
    /// The attempt failed (transiently, or the account stopped); not terminal by itself.
    Failed,
}

impl DeliveryOutcome {
    /// The stable name stored in the `outbox_deliveries.outcome` column: `accepted`,
    /// `replayed`, `rejected` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Replayed => "replayed",
            Self::Rejected => "rejected",
            Self::Failed => "failed",
        }
    }

    /// The outcome stored as `text` (see [`as_str`](Self::as_str)); `None` for any
    /// other text.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Accepted, Self::Replayed, Self::Rejected, Self::Failed]
            .into_iter()
            .find(|o| o.as_str() == text)
    }

    /// Accepted, replayed and rejected end an event's delivery; failed does not.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Failed)
    }
}

/// One append-only row of `outbox_deliveries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The event this attempt posted.
    pub event_id: EventId,
    /// 1 for the first attempt of this event, counting across relay restarts.
    pub attempt: u32,
    /// What the attempt ended with; only `Failed` is not terminal.
    pub outcome: DeliveryOutcome,
    /// The ledger transaction id for `Accepted` and `Replayed` (for a revert, the
    /// reversing transaction's); `None` otherwise.
    pub ledger_tx_id: Option<u64>,
    /// For `Rejected`, the ledger's code (`INSUFFICIENT_FUND`); for `Failed`, the
    /// other side's code or the error kind (`TRANSPORT`, `IDEMPOTENCY_MISMATCH`);
    /// `None` for `Accepted` and `Replayed`.
    pub error_code: Option<String>,
    /// For people: the ledger's message (`Rejected`), the error (`Failed`), or how a
    /// refusal was found after a restart; `None` for `Accepted` and `Replayed`.
    pub detail: Option<String>,
    /// When the relay finished the attempt (its clock, not the ledger's).
    pub at: DateTime<Utc>,
}

/// What the delivery records of one event say, as the relay needs it after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeliveryState {
    /// Records of this event, all outcomes counted.
    pub attempts: u32,
    /// The first terminal record (accepted, replayed or rejected), if any.
    pub terminal: Option<DeliveryRecord>,
}

impl DeliveryState {
    /// Folds an event's records, oldest first.
    pub fn from_records(records: &[DeliveryRecord]) -> Self {
        Self {
            attempts: u32::try_from(records.len()).unwrap_or(u32::MAX),
            terminal: records.iter().find(|r| r.outcome.is_terminal()).cloned(),
        }
    }
}

/// Groups records (in store order, oldest first) into one state per event.
pub fn fold_delivery_states(records: Vec<DeliveryRecord>) -> HashMap<EventId, DeliveryState> {
    let mut states: HashMap<EventId, DeliveryState> = HashMap::new();
    for record in records {
        let state = states.entry(record.event_id).or_default();
        state.attempts = state.attempts.saturating_add(1);
        if state.terminal.is_none() && record.outcome.is_terminal() {
            state.terminal = Some(record);
        }
    }
    states
}

/// The name of the dispatcher's "@attempted" horizon for the relay cursor `cursor`:
/// the highest position it read for sending. Events after the cursor and up to it may
/// have reached the ledger before a crash (the uncertain window). Saved and loaded
/// through [`Store::save_cursor`] like any cursor, so the same rule holds.
pub fn attempted_cursor(cursor: &str) -> String {
    format!("{cursor}@attempted")
}

/// How far a relay is behind the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// Committed events after the relay's saved cursor.
    pub pending: u64,
    /// Age of the oldest of them.
    pub oldest_pending_age: Option<Duration>,
}

/// What a store implementation supports, so suites skip what it does not claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StoreCapabilities {
    /// Two write transactions can be open on the outbox at once (Postgres; not SQLite).
    pub concurrent_writers: bool,
    /// The store offers a change-data-capture relay.
    pub cdc: bool,
}

impl StoreCapabilities {
    /// Capabilities with both flags given, as a store crate declares them.
    pub const fn new(concurrent_writers: bool, cdc: bool) -> Self {
        Self {
            concurrent_writers,
            cdc,
        }
    }
}

/// The relay-side view of the outbox.
///
/// # Contract
/// - Event rows are immutable: nothing here updates or deletes them, and the database
///   itself refuses UPDATE and DELETE of `outbox_events` and `outbox_deliveries`, and
///   of the exceptions and their resolutions (old records leave only by whole expired
///   days under a retention permit, docs/ARCHITECTURE.md, "Retention").
/// - [`Store::read_committed`] returns only committed events, in commit order, and never
///   skips an event that commits after an event with a higher position.
/// - Per account, reads follow the sequence: an account's events come in sequence order,
///   gapless from 1, never `n + 1` before `n`. The store's enqueue allocates the
///   sequence in the caller's transaction under a lock held until commit (the account's
///   counter row on PostgreSQL, the write lock on SQLite), so for one account commit
///   order is sequence order (docs/ARCHITECTURE.md, "Invariant 1"). The dispatcher
///   queues each account's events in the order read and posts them in it: a store that
///   read an account out of sequence would reach the ledger out of sequence.
/// - Positions are the store's own ([`crate::Position`]): it encodes them so that their
///   order is its commit order, and accepts back every position it handed out (read,
///   enqueued or loaded). A position another store made is refused with an error.
/// - Cursors follow [the cursor rule](#cursors) below.
/// - Delivery and exception writes are durable when the call returns.
/// - Errors from lock contention or I/O are [`crate::Retry::Transient`].
/// - Every method is cancel-safe: dropping its future either completes or has no effect.
///
/// # Cursors
/// A cursor is a named, durable position: how far a reader of the outbox got. The
/// store owns every relay-side cursor, whoever moves it: a relay's progress
/// ([`crate::Relay::acknowledge`] saves it here), the dispatcher's "@attempted"
/// horizon ([`attempted_cursor`]), a fleet's partition cursors, and the records a
/// store keeps for relays of its own (the Postgres CDC relay writes its cursor through
/// the same code as its `save_cursor`). One rule holds for every one of them:
/// - **Monotonic**: a save replaces the saved position only with a later one. A save
///   at or before it succeeds and changes nothing, so a retried save, a slower writer
///   or a stale instance never moves a cursor back.
/// - **Durable on return**: once `save_cursor` returns `Ok`, every later
///   `load_cursor`, in this process or after a crash, returns that position (byte for
///   byte) or a later one.
/// - **Fenced where the fleet fences**: a store view that runs one fleet partition
///   (see [`crate::fleet`]) writes only while its instance still owns that partition,
///   and otherwise fails without moving the cursor; outside a fleet there is no fence
///   (one relay per name is the single-instance lock's job).
/// - Names are opaque text and independent: a save under one name never moves another.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// What this store supports; the conformance suites skip the cases it does not claim.
    fn capabilities(&self) -> StoreCapabilities;

    /// Up to `limit` committed events after `after` (from the start when `None`), in commit order.
    async fn read_committed(
        &self,
        after: Option<crate::Position>,
        limit: usize,
    ) -> Result<Vec<OutboxEvent>>;

    /// The saved position of cursor `relay`, `None` before its first save.
    async fn load_cursor(&self, relay: &str) -> Result<Option<crate::Position>>;

    /// Saves `position` as cursor `relay` by [the cursor rule](#cursors): only forward,
    /// durable on return, fenced on a fleet partition's view. A relay calls it only
    /// once the outcomes up to `position` are recorded.
    ///
    /// # Errors
    /// `Internal` for a position this store did not make; on a fenced view, `Storage`
    /// naming the relay when the partition is no longer owned; transient storage errors.
    async fn save_cursor(&self, relay: &str, position: crate::Position) -> Result<()>;

    /// Appends delivery records, all or none.
    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> Result<()>;

    /// Every delivery record of one event, oldest first.
    async fn deliveries(&self, event_id: EventId) -> Result<Vec<DeliveryRecord>>;

    /// The delivery state of each of `event_ids` that has records (events without
    /// any are absent). The relay asks this for a whole batch after a restart, so a
    /// store should answer it in one query; the default asks event by event.
    async fn delivery_states(
        &self,
        event_ids: &[EventId],
    ) -> Result<HashMap<EventId, DeliveryState>> {
        let mut states = HashMap::new();
        for &id in event_ids {
            let records = self.deliveries(id).await?;
            if !records.is_empty() {
                states.insert(id, DeliveryState::from_records(&records));
            }
        }
        Ok(states)
    }

    /// Whether any delivery record exists at all. A relay that starts without a
    /// cursor on an outbox that already has records would re-send every event (and
    /// re-evaluate refused ones): the dispatcher refuses that start.
    async fn has_deliveries(&self) -> Result<bool>;

    /// Records an exception unless an open one with the same
    /// [identity](NewException::identity) exists; returns whether it was new. Two
    /// callers raising the same finding at once record it once.
    async fn raise_exception(&self, exception: &NewException) -> Result<bool>;

    /// All exceptions, oldest first, each with its resolution if it has one.
    async fn exceptions(&self) -> Result<Vec<Exception>>;

    /// The exceptions `query` selects, oldest first. The default filters
    /// [`Store::exceptions`]; a store with many should filter in its query.
    async fn exceptions_matching(&self, query: &ExceptionQuery) -> Result<Vec<Exception>> {
        let mut all = self.exceptions().await?;
        all.retain(|e| query.matches(e));
        Ok(all)
    }

    /// Appends the resolution of exception `id` (append-only: the exception row is not
    /// changed) and returns it as stored.
    ///
    /// # Errors
    /// `InvalidInput` naming `id` when there is no such exception or it is already
    /// resolved (a resolution is never replaced), or naming `note` when it is empty;
    /// `Unsupported` from a store without a resolution table (the default).
    async fn resolve_exception(
        &self,
        id: i64,
        resolved_by: &str,
        note: &str,
    ) -> Result<Resolution> {
        let _ = (id, resolved_by, note);
        Err(Error::new(
            ErrorKind::Unsupported,
            "this store keeps no exception resolutions",
        ))
    }

    /// Pending events and the oldest pending age for `relay`.
    async fn lag(&self, relay: &str) -> Result<Lag>;
}
