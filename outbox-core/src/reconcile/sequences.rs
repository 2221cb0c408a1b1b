//! Sequence continuity over a consumer's inbox (the consuming team's check).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::Account;
use crate::error::Result;
use crate::inbox::{HeldGap, MessageKind};

/// One processed marker of a consumer's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMarker {
    /// The consumer whose inbox holds it.
    pub consumer: String,
    /// The account the instruction was applied on.
    pub account: Account,
    /// The sequence it was applied at.
    pub sequence: u64,
    /// The instruction (outbox event) id.
    pub instruction_id: String,
    /// Whether it was applied as committed, reverted or rejected.
    pub kind: MessageKind,
    /// When the consumer applied it.
    pub applied_at: DateTime<Utc>,
}

/// Where a page of markers ends: the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MarkerKey {
    /// The marker's consumer.
    pub consumer: String,
    /// The marker's account.
    pub account: String,
    /// The marker's sequence.
    pub sequence: u64,
    /// The marker's instruction id (two markers may share a sequence: the fault
    /// this check looks for).
    pub instruction_id: String,
}

impl MarkerKey {
    /// The key of `marker`.
    pub fn of(marker: &AppliedMarker) -> Self {
        Self {
            consumer: marker.consumer.clone(),
            account: marker.account.as_str().to_owned(),
            sequence: marker.sequence,
            instruction_id: marker.instruction_id.clone(),
        }
    }
}

/// A held gap of one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGap {
    /// The consumer holding messages.
    pub consumer: String,
    /// The account, its high-water mark and its lowest held message.
    pub gap: HeldGap,
    /// How many messages of the account are held.
    pub held: u64,
}

/// What the sequence check reads from a consumer database. Read-only.
#[async_trait]
pub trait InboxSequences: Send + Sync {
    /// Up to `limit` processed markers after `after` (from the first when `None`), in
    /// (consumer, account, sequence, instruction id) order, every consumer of the
    /// database included.
    async fn markers_after(
        &self,
        after: Option<&MarkerKey>,
        limit: usize,
    ) -> Result<Vec<AppliedMarker>>;

    /// Every (consumer, account) with held messages.
    async fn held_gaps(&self) -> Result<Vec<ConsumerGap>>;

    /// Whether retention has removed processed markers from this database: an
    /// account's lowest remaining sequence may then be above 1 without a loss.
    async fn markers_pruned(&self) -> Result<bool>;
}
