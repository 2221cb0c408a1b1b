//! Completeness both ways between the outbox and the ledger (the ledger team's check).

use std::collections::HashMap;

use async_trait::async_trait;

use crate::domain::{EventId, OutboxEvent, Position};
use crate::error::Result;
use crate::store::DeliveryState;

/// How far the completeness check has got, on each side. Saved by the cursor rule:
/// only forward.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletenessCheckpoint {
    /// The last ledger transaction id read (every transaction up to it was recorded
    /// as seen).
    pub ledger_tx: Option<u64>,
    /// The last outbox position checked against what was seen.
    pub position: Option<Position>,
}

/// A ledger transaction carrying outbox metadata, as the check recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenTransaction {
    /// The ledger's transaction id.
    pub ledger_tx: u64,
    /// Its `outbox_event_id` metadata, as text (it may not even be a valid id).
    pub event_id: String,
    /// Its reference, if any.
    pub reference: Option<String>,
}

/// An outbox event with what the check knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCheck {
    /// The outbox row.
    pub event: OutboxEvent,
    /// Its delivery records, folded.
    pub delivery: DeliveryState,
    /// The ledger transactions seen carrying its event id, ascending.
    pub seen: Vec<u64>,
}

/// What the completeness check reads and keeps in the outbox database. Its own
/// records (the checkpoint, the transactions seen) are append-only like the rest;
/// the outbox rows and delivery records are only read.
#[async_trait]
pub trait CompletenessStore: Send + Sync {
    /// The checkpoint saved under `name`, `None` before the first save.
    async fn completeness_checkpoint(&self, name: &str) -> Result<Option<CompletenessCheckpoint>>;

    /// Saves the checkpoint under `name`; each side moves only forward.
    async fn save_completeness_checkpoint(
        &self,
        name: &str,
        checkpoint: &CompletenessCheckpoint,
    ) -> Result<()>;

    /// The events of `ids` the outbox knows, with their delivery states; ids it does
    /// not know are absent.
    async fn events_by_ids(
        &self,
        ids: &[EventId],
    ) -> Result<HashMap<EventId, (OutboxEvent, DeliveryState)>>;

    /// Transactions recorded as seen under `name` that carry one of `event_ids` or one
    /// of `references`.
    async fn seen_matching(
        &self,
        name: &str,
        event_ids: &[String],
        references: &[String],
    ) -> Result<Vec<SeenTransaction>>;

    /// Records `seen` under `name`; a transaction already recorded is left as it is.
    async fn record_seen(&self, name: &str, seen: &[SeenTransaction]) -> Result<()>;

    /// Up to `limit` outbox events after `after` in commit order, each with its
    /// delivery state and the transactions recorded as seen under `name` for it.
    async fn events_to_check(
        &self,
        name: &str,
        after: Option<Position>,
        limit: usize,
    ) -> Result<Vec<EventCheck>>;
}
