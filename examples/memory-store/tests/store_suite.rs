//! testkit's store and inbox suites on the in-memory store, unchanged: each case on
//! a fresh database.

use std::collections::BTreeMap;

use async_trait::async_trait;
use outbox_core::{
    Accepted, Error, ErrorKind, Exception, GapAlarm, InboxEngine, InboxMessage, NewEvent,
    OutboxEvent, Relay, Result, Store,
};
use outbox_example_memory_store::{MemoryConsumer, MemoryInbox, MemoryStore, MemoryTransaction};
use outbox_testkit::{InboxHarness, StoreHarness, StoreTamper, fixtures};

#[derive(Clone)]
struct MemoryHarness {
    store: MemoryStore,
}

#[async_trait]
impl StoreHarness for MemoryHarness {
    type Store = MemoryStore;
    type Tx = MemoryTransaction;

    async fn new() -> Self {
        Self {
            store: MemoryStore::new(),
        }
    }

    fn store(&self) -> MemoryStore {
        self.store.clone()
    }

    async fn reopen(&self) -> MemoryStore {
        self.store.reopen()
    }

    async fn relay(&self, store: &MemoryStore, name: &str) -> Box<dyn Relay> {
        Box::new(store.polling_relay(name).await.expect("relay"))
    }

    async fn begin(&self) -> MemoryTransaction {
        self.store.begin().await
    }

    async fn enqueue(&self, tx: &mut MemoryTransaction, event: &NewEvent) -> Result<OutboxEvent> {
        tx.enqueue(event)
    }

    async fn commit(&self, tx: MemoryTransaction) -> Result<()> {
        tx.commit()
    }

    async fn rollback(&self, tx: MemoryTransaction) -> Result<()> {
        tx.rollback();
        Ok(())
    }

    async fn enqueue_committed(&self, events: Vec<NewEvent>) -> Result<Vec<OutboxEvent>> {
        let mut tx = self.store.begin().await;
        let stored = events
            .iter()
            .map(|event| tx.enqueue(event))
            .collect::<Result<Vec<_>>>()?;
        tx.commit()?;
        Ok(stored)
    }

    /// Nothing but the store can reach its records (they are private fields of the
    /// crate), so there is no tamper to try: the immutability cases skip, saying so.
    async fn tamper(&self, tamper: StoreTamper) -> Result<u64> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("{tamper:?}: an in-memory store has no writer besides itself"),
        ))
    }
}

mod store {
    outbox_testkit::store_suite!(super::MemoryHarness);
}

/// The consumer's own data: the treasury, summed per (consumer, account).
type Treasury = BTreeMap<(String, String), i64>;

struct MemoryTreasury {
    consumer: MemoryConsumer<Treasury>,
}

#[async_trait(?Send)]
impl InboxHarness for MemoryTreasury {
    async fn new() -> Self {
        Self {
            consumer: MemoryConsumer::new(Treasury::new()),
        }
    }

    async fn accept(
        &self,
        engine: &InboxEngine,
        message: InboxMessage,
        fail_handler: bool,
    ) -> Result<Accepted> {
        let consumer = engine.consumer().to_owned();
        let mut handler = |inbox: &mut MemoryInbox<Treasury>, m: &InboxMessage| -> Result<()> {
            if fail_handler {
                return Err(Error::new(ErrorKind::Handler, "handler failed on purpose"));
            }
            let key = (consumer.clone(), m.account.to_string());
            *inbox.data_mut()?.entry(key).or_default() += fixtures::impact_of(m)?;
            Ok(())
        };
        let mut inbox = self.consumer.begin().await;
        // On an error `inbox` is dropped here: the transaction rolls back.
        let accepted = engine.accept(&mut inbox, message, &mut handler).await?;
        inbox.commit()?;
        Ok(accepted)
    }

    async fn check_gaps(&self, engine: &InboxEngine) -> Result<Vec<GapAlarm>> {
        let mut inbox = self.consumer.begin().await;
        let alarms = engine.check_gaps(&mut inbox).await?;
        inbox.commit()?;
        Ok(alarms)
    }

    async fn treasury(&self, consumer: &str) -> Vec<(String, i64)> {
        self.consumer
            .read(|treasury| {
                treasury
                    .iter()
                    .filter(|((c, _), _)| c == consumer)
                    .map(|((_, account), sum)| (account.clone(), *sum))
                    .collect()
            })
            .expect("treasury")
    }

    async fn applied(&self, consumer: &str) -> Vec<(String, String, u64)> {
        self.consumer
            .processed(consumer)
            .expect("markers")
            .into_iter()
            .map(|m| (m.instruction_id, m.account.to_string(), m.sequence))
            .collect()
    }

    async fn held(&self, consumer: &str) -> Vec<(String, u64)> {
        self.consumer
            .held(consumer)
            .expect("held")
            .into_iter()
            .map(|h| (h.account.to_string(), h.sequence))
            .collect()
    }

    async fn exceptions(&self) -> Vec<Exception> {
        self.consumer.exceptions().expect("exceptions")
    }
}

mod inbox {
    outbox_testkit::inbox_suite!(super::MemoryTreasury);
}

/// The capabilities the store suite reads: a change here changes which cases run
/// (`late_commit_is_still_delivered` interleaves writers only with
/// `concurrent_writers`), so it must be deliberate.
#[test]
fn capabilities_are_one_writer_and_no_cdc() {
    let capabilities = MemoryStore::new().capabilities();
    assert!(!capabilities.concurrent_writers);
    assert!(!capabilities.cdc);
}
