//! `PollingRelay`: the default relay, polling any [`Store`] after its saved cursor.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::Relay;
use crate::domain::{OutboxEvent, Position};
use crate::error::Result;
use crate::store::Store;

/// An in-process wake-up shared by a store and its relays: enqueue calls [`Wakeup::notify`].
#[derive(Debug, Clone, Default)]
pub struct Wakeup(Arc<Notify>);

impl Wakeup {
    /// A wake-up no one waits on yet; clone it to share it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes one waiting relay, or the next one to wait.
    pub fn notify(&self) {
        self.0.notify_waiters();
        self.0.notify_one();
    }

    pub(crate) async fn notified(&self) {
        self.0.notified().await;
    }
}

/// After a wake-up that found nothing (the enqueue's transaction had not committed yet),
/// look again a few times at growing short delays before falling back to the interval.
const AFTER_WAKEUP_DELAYS: [Duration; 5] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
];

/// Polls a [`Store`] for committed events after the relay's cursor.
#[derive(Debug)]
pub struct PollingRelay<S> {
    store: S,
    name: String,
    read_position: Option<Position>,
    acknowledged: Option<Position>,
    wakeup: Option<Wakeup>,
    recheck: usize,
}

impl<S: Store> PollingRelay<S> {
    /// Opens relay `name`, resuming after its saved cursor.
    pub async fn open(store: S, name: impl Into<String>, wakeup: Option<Wakeup>) -> Result<Self> {
        let name = name.into();
        let acknowledged = store.load_cursor(&name).await?;
        Ok(Self {
            store,
            name,
            read_position: acknowledged,
            acknowledged,
            wakeup,
            recheck: AFTER_WAKEUP_DELAYS.len(),
        })
    }

    /// The store the relay reads.
    pub fn store(&self) -> &S {
        &self.store
    }
}

#[async_trait]
impl<S: Store> Relay for PollingRelay<S> {
    fn name(&self) -> &str {
        &self.name
    }

    async fn next_batch(&mut self, max: usize) -> Result<Vec<OutboxEvent>> {
        let batch = self.store.read_committed(self.read_position, max).await?;
        if let Some(last) = batch.last() {
            self.read_position = Some(last.position);
            self.recheck = AFTER_WAKEUP_DELAYS.len();
        }
        Ok(batch)
    }

    /// The store's `save_cursor`, nothing more: its rule is the relay's rule.
    async fn acknowledge(&mut self, through: Position) -> Result<()> {
        self.store.save_cursor(&self.name, through).await?;
        self.acknowledged = self.acknowledged.max(Some(through));
        Ok(())
    }

    fn acknowledged(&self) -> Option<Position> {
        self.acknowledged
    }

    async fn wait(&mut self, interval: Duration) {
        if let Some(delay) = AFTER_WAKEUP_DELAYS.get(self.recheck) {
            self.recheck += 1;
            tokio::time::sleep(*delay).await;
            return;
        }
        match &self.wakeup {
            Some(wakeup) => {
                tokio::select! {
                    () = wakeup.notified() => self.recheck = 0,
                    () = tokio::time::sleep(interval) => {}
                }
            }
            None => tokio::time::sleep(interval).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{MemoryStore, row_position};

    /// A relay's acknowledged position follows the store's cursor: never back.
    #[tokio::test]
    async fn acknowledging_behind_the_cursor_changes_nothing() {
        let store = MemoryStore::default();
        let mut relay = PollingRelay::open(store.clone(), "relay", None)
            .await
            .unwrap();
        relay.acknowledge(row_position(3)).await.unwrap();
        relay.acknowledge(row_position(1)).await.unwrap();
        assert_eq!(relay.acknowledged(), Some(row_position(3)));
        assert_eq!(
            store.load_cursor("relay").await.unwrap(),
            Some(row_position(3))
        );
    }
}
