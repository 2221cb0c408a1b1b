//! `MemoryStore`: the relay-side view of the in-memory outbox (`outbox_core::Store`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use outbox_core::store::fold_delivery_states;
use outbox_core::{
    DeliveryRecord, DeliveryState, Error, ErrorKind, EventId, Exception, Lag, NewException,
    OutboxEvent, PollingRelay, Position, Resolution, Result, Store, StoreCapabilities, Wakeup,
};

use crate::database::{Database, lock};
use crate::position::{row_of, row_position};

/// An outbox kept in memory: events, cursors, delivery records and exceptions.
///
/// Clones share one database; so does [`reopen`](Self::reopen), which stands for a
/// process restart of a durable store. Nothing survives the process itself.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    pub(crate) db: Arc<Database>,
}

impl MemoryStore {
    /// A new, empty outbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new store instance over the same data, as a durable store opened again after
    /// a restart would see it.
    pub fn reopen(&self) -> Self {
        Self {
            db: Arc::clone(&self.db),
        }
    }

    /// The wake-up every commit notifies.
    pub fn wakeup(&self) -> Wakeup {
        self.db.wakeup.clone()
    }

    /// The relay for this store: `outbox_core::PollingRelay` over it, woken by every
    /// commit. Its requirements are the `Store` contract, which this store keeps.
    pub async fn polling_relay(&self, name: &str) -> Result<PollingRelay<MemoryStore>> {
        PollingRelay::open(self.clone(), name, Some(self.wakeup())).await
    }
}

#[async_trait]
impl Store for MemoryStore {
    /// One writer at a time (`begin` waits for the open transaction), no CDC.
    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(false, false)
    }

    async fn read_committed(
        &self,
        after: Option<Position>,
        limit: usize,
    ) -> Result<Vec<OutboxEvent>> {
        let skip = match after {
            Some(position) => usize::try_from(row_of(&position)?).unwrap_or(usize::MAX),
            None => 0,
        };
        let tables = lock(&self.db.tables)?;
        // Only commits append, in commit order: rows after `after` are exactly the
        // events committed after it, and no later commit can land before them.
        Ok(tables
            .events
            .iter()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn load_cursor(&self, relay: &str) -> Result<Option<Position>> {
        let tables = lock(&self.db.tables)?;
        Ok(tables.cursors.get(relay).map(|&row| row_position(row)))
    }

    async fn save_cursor(&self, relay: &str, position: Position) -> Result<()> {
        let row = row_of(&position)?;
        let mut tables = lock(&self.db.tables)?;
        if row > tables.events.len() as u64 {
            // Saved, it would skip the events committed up to that row.
            return Err(Error::new(
                ErrorKind::Internal,
                format!("cursor {relay}: {position} is not a committed event of this store"),
            ));
        }
        let saved = tables.cursors.entry(relay.to_owned()).or_insert(row);
        *saved = (*saved).max(row);
        Ok(())
    }

    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> Result<()> {
        lock(&self.db.tables)?.deliveries.extend_from_slice(records);
        Ok(())
    }

    async fn deliveries(&self, event_id: EventId) -> Result<Vec<DeliveryRecord>> {
        let tables = lock(&self.db.tables)?;
        Ok(tables
            .deliveries
            .iter()
            .filter(|record| record.event_id == event_id)
            .cloned()
            .collect())
    }

    async fn delivery_states(
        &self,
        event_ids: &[EventId],
    ) -> Result<HashMap<EventId, DeliveryState>> {
        let tables = lock(&self.db.tables)?;
        let records = tables
            .deliveries
            .iter()
            .filter(|record| event_ids.contains(&record.event_id))
            .cloned()
            .collect();
        Ok(fold_delivery_states(records))
    }

    async fn has_deliveries(&self) -> Result<bool> {
        Ok(!lock(&self.db.tables)?.deliveries.is_empty())
    }

    async fn raise_exception(&self, exception: &NewException) -> Result<bool> {
        Ok(lock(&self.db.tables)?.exceptions.raise(exception))
    }

    async fn exceptions(&self) -> Result<Vec<Exception>> {
        Ok(lock(&self.db.tables)?.exceptions.all())
    }

    async fn resolve_exception(
        &self,
        id: i64,
        resolved_by: &str,
        note: &str,
    ) -> Result<Resolution> {
        lock(&self.db.tables)?
            .exceptions
            .resolve(id, resolved_by, note)
    }

    async fn lag(&self, relay: &str) -> Result<Lag> {
        let tables = lock(&self.db.tables)?;
        let cursor = tables.cursors.get(relay).copied().unwrap_or(0);
        let pending = tables
            .events
            .get(usize::try_from(cursor).unwrap_or(usize::MAX)..)
            .unwrap_or(&[]);
        let oldest_pending_age = pending.first().map(|oldest| {
            (Utc::now() - oldest.created_at)
                .to_std()
                .unwrap_or(Duration::ZERO)
        });
        Ok(Lag {
            pending: pending.len() as u64,
            oldest_pending_age,
        })
    }
}
