//! Consumer side of Hop 2: the `Inbox` storage trait and the engine that dedupes,
//! orders and holds messages inside the consumer's own transaction.

mod engine;
#[cfg(test)]
mod properties;

use chrono::{DateTime, Utc};

pub use engine::{Accepted, GapAlarm, Handler, InboxEngine};

use crate::domain::Account;
use crate::error::Result;
use crate::exception::NewException;

/// What a Hop 2 message reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// A committed ledger transaction (a posting).
    Committed,
    /// A reversal of an earlier posting.
    Reverted,
    /// The ledger refused the instruction: the sequence is consumed with no impact.
    Rejected,
}

impl MessageKind {
    /// The stable name used on the wire (the `outbox-event-type` header) and in the
    /// inbox tables: `committed`, `reverted` or `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "committed",
            Self::Reverted => "reverted",
            Self::Rejected => "rejected",
        }
    }

    /// The kind named `text` by [`as_str`](Self::as_str); `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Committed, Self::Reverted, Self::Rejected]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// One message as the inbox sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    /// The outbox event id (transactions without outbox metadata are not fanned out).
    pub instruction_id: String,
    /// The account whose sequence orders the message (`outbox_account`).
    pub account: Account,
    /// The per-account sequence (`outbox_sequence`): gapless from 1, so a number that
    /// skips one means a message is still on its way.
    pub sequence: u64,
    /// Whether the ledger committed, reverted or refused the instruction; a
    /// `Rejected` message consumes its sequence with no impact.
    pub kind: MessageKind,
    /// The message body as the transport carried it, byte for byte (the ledger
    /// transaction JSON, or the rejection notice's metadata), for the handler to parse.
    pub payload: Vec<u8>,
}

/// The result of trying to put a message in the gap queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldResult {
    /// The message is now in the gap queue at its (account, sequence) slot.
    Held,
    /// The slot is taken by `instruction_id`, held as `kind` (the same message again,
    /// the same instruction with another outcome, or a conflicting instruction).
    Occupied {
        /// The instruction already held at that slot.
        instruction_id: String,
        /// The kind it was held as.
        kind: MessageKind,
    },
}

/// What [`Inbox::claim_next`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The instruction was already processed, as `recorded`.
    Duplicate {
        /// The kind its processed marker recorded; another kind than the message's is
        /// a conflicting outcome.
        recorded: MessageKind,
    },
    /// The message does not come next: stale (`sequence <= last_applied`) or after a gap.
    NotNext {
        /// The account's high-water mark (0 when nothing was applied).
        last_applied: u64,
    },
    /// Marked applied; `next_held` is the held message right after it, taken out of
    /// the gap queue (it comes next now).
    Claimed {
        /// The held message at `sequence + 1`, removed from the gap queue; `None`
        /// when none is held there.
        next_held: Option<InboxMessage>,
    },
}

/// A message waiting in a consumer's gap queue, as an audit of its instruction reads
/// it. The entry leaves the queue when the message is released, so only holds still in
/// place are seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldMessage {
    /// The consumer holding it.
    pub consumer: String,
    /// The account whose gap it waits behind.
    pub account: Account,
    /// Its per-account sequence.
    pub sequence: u64,
    /// What it reports: committed, reverted or rejected.
    pub kind: MessageKind,
    /// When it was put in the gap queue.
    pub held_at: DateTime<Utc>,
}

/// The oldest held message of one account: the gap sits right before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldGap {
    /// The account with held messages.
    pub account: Account,
    /// Its high-water mark (0 when nothing was applied): `last_applied + 1` is missing.
    pub last_applied: u64,
    /// The sequence of its lowest held message.
    pub lowest_held: u64,
    /// When that message was held: the gap's age is measured from it.
    pub held_at: DateTime<Utc>,
}

/// Inbox storage bound to the consumer's open transaction.
///
/// Implementations wrap the caller's transaction (`&rusqlite::Connection`,
/// `&mut sqlx::PgConnection`), so every call here commits or rolls back with the
/// consumer's impact.
///
/// # Contract
/// - All reads see the caller's own uncommitted writes.
/// - `processed_kind` says which outcome the processed marker of an instruction
///   recorded (`None`: not processed).
/// - `mark_applied` writes the processed marker (keyed on `(consumer, instruction_id)`)
///   and sets the account's high-water mark to `message.sequence`.
/// - `take_held` removes and returns the held message at exactly that sequence.
/// - `record_exception` keeps the first of equal [identity](NewException::identity)
///   (source, kind, account, sequence, event id, asset) among the open exceptions
///   and returns whether this one was new.
/// - Nothing is durable on its own: every write commits or rolls back with the
///   caller's transaction, so a handler failure or a crash before commit leaves no
///   marker, no hold and no exception behind.
/// - Several transactions of one consumer may run at once (workers sharing the
///   consumer). The storage decides one account's messages one transaction at a
///   time, and makes a redelivery racing its original wait for it: SQLite's single
///   writer does both; `PgInbox` locks the account's high-water-mark row in
///   `last_applied` and takes an advisory lock on (consumer, instruction id) in
///   `processed_kind`. So two messages are never both applied at one sequence, and a
///   redelivery is seen as a duplicate once its original committed.
/// - Processed markers are append-only: the database refuses UPDATE and DELETE of them
///   (old ones leave only by whole expired days under a retention permit,
///   docs/ARCHITECTURE.md, "Retention"); the gap queue is mutable.
///
/// The futures are not required to be `Send`: SQLite connections are not `Sync`.
#[allow(async_fn_in_trait)]
pub trait Inbox {
    /// The kind the instruction was processed as, `None` when it was not.
    async fn processed_kind(
        &mut self,
        consumer: &str,
        instruction_id: &str,
    ) -> Result<Option<MessageKind>>;
    /// The highest applied sequence of `account`, 0 when none.
    async fn last_applied(&mut self, consumer: &str, account: &Account) -> Result<u64>;
    /// Writes `message`'s processed marker (instruction id, kind, account, sequence)
    /// and sets its account's high-water mark to `message.sequence`.
    async fn mark_applied(&mut self, consumer: &str, message: &InboxMessage) -> Result<()>;
    /// Puts `message` in the gap queue at its (account, sequence) slot, payload
    /// included, unless that slot is taken; then it says who holds it and changes
    /// nothing.
    async fn hold(&mut self, consumer: &str, message: &InboxMessage) -> Result<HoldResult>;
    /// Removes and returns the held message of `account` at exactly `sequence`;
    /// `None` when none is held there.
    async fn take_held(
        &mut self,
        consumer: &str,
        account: &Account,
        sequence: u64,
    ) -> Result<Option<InboxMessage>>;
    /// Records `exception` in the caller's transaction unless an
    /// open one with the same [identity](NewException::identity) exists; returns
    /// whether it was new.
    async fn record_exception(&mut self, exception: &NewException) -> Result<bool>;
    /// For each account with held messages: its high-water mark and lowest held message.
    async fn held_gaps(&mut self, consumer: &str) -> Result<Vec<HeldGap>>;

    /// The engine's common path in one step: if `message` is new and comes next for
    /// its account, mark it applied and take the held message right after it.
    ///
    /// The default composes the methods above; a store whose every call is a round
    /// trip (Postgres) does it in one. Must behave exactly like the default.
    async fn claim_next(&mut self, consumer: &str, message: &InboxMessage) -> Result<Claim> {
        if let Some(recorded) = self
            .processed_kind(consumer, &message.instruction_id)
            .await?
        {
            return Ok(Claim::Duplicate { recorded });
        }
        let last_applied = self.last_applied(consumer, &message.account).await?;
        if message.sequence != last_applied + 1 {
            return Ok(Claim::NotNext { last_applied });
        }
        self.mark_applied(consumer, message).await?;
        let next_held = self
            .take_held(consumer, &message.account, message.sequence + 1)
            .await?;
        Ok(Claim::Claimed { next_held })
    }
}
