//! `PollingRelay`: the default relay, polling any [`Store`] after its saved cursor.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::Relay;
use crate::domain::{OutboxEvent, Position};
use crate::error::Result;
use crate::store::Store;

/// An in-process wake-up shared by a store and its relays: enqueue calls [`Wakeup::notify`].
///
/// A store whose writers signal only while a relay waits ([`Wakeup::on_demand`], the
/// PostgreSQL store: a NOTIFY on every commit would serialise the writers) also learns
/// here when a relay starts waiting ([`Wakeup::relay_waiting`],
/// [`Wakeup::wait_started`]); its relays keep polling for a moment after every batch,
/// so a steady stream of events is read without any signal.
#[derive(Debug, Clone, Default)]
pub struct Wakeup(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    wake: Notify,
    on_demand: bool,
    /// How many times [`Wakeup::notify`] was called: a waiter that began before the
    /// latest call has been woken, even if it has not run yet.
    wakes: AtomicU64,
    /// Relays inside [`PollingRelay::wait`], waiting for a wake-up.
    waiting: AtomicUsize,
    /// The value of `wakes` when the latest of them began to wait.
    latest_wait: AtomicU64,
    started: Notify,
}

impl Wakeup {
    /// A wake-up no one waits on yet; clone it to share it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A wake-up for a store that signals only while a relay waits (see the type's
    /// docs): relays tell it when they start waiting and poll a little after each batch.
    pub fn on_demand() -> Self {
        Self(Arc::new(Shared {
            on_demand: true,
            ..Shared::default()
        }))
    }

    /// Whether this is an [`on_demand`](Self::on_demand) wake-up.
    pub fn is_on_demand(&self) -> bool {
        self.0.on_demand
    }

    /// Wakes one waiting relay, or the next one to wait.
    pub fn notify(&self) {
        self.0.wakes.fetch_add(1, Ordering::SeqCst);
        self.0.wake.notify_waiters();
        self.0.wake.notify_one();
    }

    /// Whether a relay is waiting for a wake-up and has not been woken since it began
    /// (only relays over an on-demand wake-up tell).
    pub fn relay_waiting(&self) -> bool {
        self.0.waiting.load(Ordering::SeqCst) > 0
            && self.0.latest_wait.load(Ordering::SeqCst) == self.0.wakes.load(Ordering::SeqCst)
    }

    /// Returns once a relay has begun to wait since the last call (at once if one has):
    /// a hint, to be checked with [`relay_waiting`](Self::relay_waiting).
    pub async fn wait_started(&self) {
        self.0.started.notified().await;
    }

    pub(crate) async fn notified(&self) {
        self.0.wake.notified().await;
    }

    /// Waits for a wake-up, counted in [`relay_waiting`](Self::relay_waiting) meanwhile;
    /// returns at once, uncounted, when a wake-up came since the last wait.
    async fn wait_counted(&self) {
        let notified = self.0.wake.notified();
        tokio::pin!(notified);
        if notified.as_mut().enable() {
            return;
        }
        let _counted = Waiting::begin(&self.0);
        notified.await;
    }
}

/// One relay counted as waiting, until dropped (also when its wait is cancelled).
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn begin(shared: &'a Shared) -> Self {
        shared
            .latest_wait
            .store(shared.wakes.load(Ordering::SeqCst), Ordering::SeqCst);
        shared.waiting.fetch_add(1, Ordering::SeqCst);
        shared.started.notify_one();
        Self(shared)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// After a wake-up that found nothing (the enqueue's transaction had not committed yet),
/// look again a few times at growing short delays before falling back to the interval.
/// Over an on-demand wake-up, also after every batch: the relay keeps polling while
/// events flow, and waits for a signal only once it found nothing for this long.
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
            let on_demand = self.wakeup.as_ref().is_some_and(Wakeup::is_on_demand);
            self.recheck = if on_demand {
                0
            } else {
                AFTER_WAKEUP_DELAYS.len()
            };
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
            Some(wakeup) if wakeup.is_on_demand() => {
                tokio::select! {
                    () = wakeup.wait_counted() => self.recheck = 0,
                    () = tokio::time::sleep(interval) => {}
                }
            }
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

    fn one_event(store: &MemoryStore) {
        use crate::domain::{
            Account, Amount, Asset, LedgerCommand, Metadata, NewEvent, PostBody, PostCommand,
            Posting,
        };
        store.add(&NewEvent::new(
            Account::parse("merchants:1").unwrap(),
            LedgerCommand::Post(PostCommand {
                body: PostBody::Postings(vec![Posting {
                    source: Account::parse("world").unwrap(),
                    destination: Account::parse("merchants:1").unwrap(),
                    amount: Amount::new(1),
                    asset: Asset::parse("USD/2").unwrap(),
                }]),
                reference: None,
                metadata: Metadata::new(),
            }),
        ));
    }

    const HOUR: Duration = Duration::from_secs(3600);

    /// Over an on-demand wake-up the store sees a relay waiting, and no longer once it
    /// has woken it (before the relay even runs again).
    #[tokio::test]
    async fn an_on_demand_relay_is_seen_waiting_until_woken() {
        let wakeup = Wakeup::on_demand();
        let mut relay = PollingRelay::open(MemoryStore::default(), "r", Some(wakeup.clone()))
            .await
            .unwrap();
        assert!(!wakeup.relay_waiting());
        let waiting = tokio::spawn(async move {
            relay.wait(HOUR).await;
            relay
        });
        tokio::time::timeout(Duration::from_secs(10), wakeup.wait_started())
            .await
            .expect("the relay never said it waits");
        assert!(wakeup.relay_waiting());
        wakeup.notify();
        assert!(!wakeup.relay_waiting(), "still seen waiting once woken");
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the wake-up did not end the wait")
            .unwrap();
        assert_eq!(wakeup.0.waiting.load(Ordering::SeqCst), 0);
    }

    /// After a batch, an on-demand relay polls again shortly instead of waiting for a
    /// signal its writers only send while a relay waits.
    #[tokio::test]
    async fn after_a_batch_an_on_demand_relay_polls_without_a_signal() {
        let store = MemoryStore::default();
        let wakeup = Wakeup::on_demand();
        let mut relay = PollingRelay::open(store.clone(), "r", Some(wakeup.clone()))
            .await
            .unwrap();
        one_event(&store);
        assert_eq!(relay.next_batch(10).await.unwrap().len(), 1);
        tokio::time::timeout(Duration::from_secs(10), relay.wait(HOUR))
            .await
            .expect("waited for a signal right after a batch");
        assert!(!wakeup.relay_waiting());

        // A plain wake-up keeps today's behaviour: after a batch it waits for a signal.
        let plain = Wakeup::new();
        let mut relay = PollingRelay::open(store.clone(), "p", Some(plain))
            .await
            .unwrap();
        assert_eq!(relay.next_batch(10).await.unwrap().len(), 1);
        let early = tokio::time::timeout(Duration::from_millis(200), relay.wait(HOUR)).await;
        assert!(
            early.is_err(),
            "a plain relay polled again without a signal"
        );
    }

    /// A wake-up that came while the relay was busy ends its next wait at once, and
    /// that wait is not counted as waiting.
    #[tokio::test]
    async fn a_wakeup_sent_while_busy_ends_the_next_wait_uncounted() {
        let wakeup = Wakeup::on_demand();
        let mut relay = PollingRelay::open(MemoryStore::default(), "r", Some(wakeup.clone()))
            .await
            .unwrap();
        wakeup.notify();
        tokio::time::timeout(Duration::from_secs(10), relay.wait(HOUR))
            .await
            .expect("the earlier wake-up was lost");
        let started = tokio::time::timeout(Duration::from_millis(50), wakeup.wait_started()).await;
        assert!(started.is_err(), "a wait that ended at once was counted");
    }
}
