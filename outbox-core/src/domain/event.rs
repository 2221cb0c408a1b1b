//! `NewEvent` (what a caller enqueues) and `OutboxEvent` (what the outbox stores).

use chrono::{DateTime, Utc};

use super::{Account, EventId, LedgerCommand, Payload, Position};
use crate::error::{Error, ErrorKind, Result};

/// An event to enqueue in the caller's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The aggregate whose per-account sequence orders this event (usually the merchant).
    pub account: Account,
    /// What the ledger is asked to do; encoded once, at enqueue, into the payload.
    pub command: LedgerCommand,
    /// Supplied when the caller already has an id (an API request id); otherwise a fresh v7.
    pub event_id: Option<EventId>,
}

impl NewEvent {
    /// An event of `account` asking for `command`, with a fresh event id at enqueue.
    pub fn new(account: Account, command: LedgerCommand) -> Self {
        Self {
            account,
            command,
            event_id: None,
        }
    }

    /// Uses `id` as the event id (idempotency key and instruction id) instead of a
    /// fresh one.
    #[must_use]
    pub fn with_event_id(mut self, id: EventId) -> Self {
        self.event_id = Some(id);
        self
    }

    /// The event a revert undoes; `None` for a post.
    pub fn revert_target(&self) -> Option<EventId> {
        match &self.command {
            LedgerCommand::Revert(revert) => Some(revert.event_id),
            LedgerCommand::Post(_) => None,
        }
    }

    /// Checks a revert against its target's account as the outbox stores it (`None`:
    /// the target is not in the outbox). A revert must follow its target in the same
    /// account's sequence: then the relay sends it only after the target's outcome is
    /// known, and never reverts a transaction that does not exist yet. Errors name the
    /// field `revert`.
    pub fn check_revert_target(&self, target_account: Option<&str>) -> Result<()> {
        let Some(target) = self.revert_target() else {
            return Ok(());
        };
        let owner = target_account
            .map(Account::parse)
            .transpose()
            .map_err(|e| Error::new(ErrorKind::Internal, format!("outbox_events.account: {e}")))?;
        match owner.as_ref() {
            None => Err(Error::invalid(
                "revert",
                format!(
                    "{target} is not in the outbox: a revert names an event enqueued before it"
                ),
            )),
            Some(owner) if *owner != self.account => Err(Error::invalid(
                "revert",
                format!(
                    "{target} belongs to account {owner}, not {}: enqueue the revert on its target's account so it follows the target in sequence order",
                    self.account
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Fixes the event id and encodes the payload for `sequence`; errors name the field.
    pub fn encode(&self, sequence: u64) -> Result<(EventId, Payload)> {
        let id = self.event_id.unwrap_or_default();
        let payload = Payload::encode(id, &self.account, sequence, &self.command)?;
        Ok((id, payload))
    }
}

/// An immutable, committed outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// Where the row sits in its store's commit-ordered stream (the store's own
    /// encoding): what a relay resumes after.
    pub position: Position,
    /// The UUID v7 sent as `Idempotency-Key` and carried to consumers as the
    /// instruction id.
    pub event_id: EventId,
    /// The account whose sequence orders the event.
    pub account: Account,
    /// Gapless per account, starting at 1.
    pub sequence: u64,
    /// The exact bytes the relay sends, outbox identity included.
    pub payload: Payload,
    /// When enqueue wrote the row (on PostgreSQL, the enqueuing transaction's `now()`).
    pub created_at: DateTime<Utc>,
}
