//! What a backend provides so the suites can drive it.

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{
    Accepted, Exception, GapAlarm, InboxEngine, InboxMessage, NewEvent, OutboxEvent, Relay, Result,
    Store,
};

/// A fresh, isolated store plus the transaction-bound operations the generic trait
/// leaves to each store crate (enqueue runs on the store's native transaction type).
#[async_trait]
pub trait StoreHarness: Clone + Send + Sync + Sized + 'static {
    type Store: Store + Clone;
    /// An open caller transaction.
    type Tx: Send;

    /// A harness over a new, empty database (file, schema…).
    async fn new() -> Self;
    /// The store (the same one on every call).
    fn store(&self) -> Self::Store;
    /// A new store instance over the same database, as after a process restart.
    async fn reopen(&self) -> Self::Store;
    /// The store as a trait object, to run the suite through `Arc<dyn Store>`.
    fn dyn_store(&self) -> Arc<dyn Store> {
        Arc::new(self.store())
    }
    /// The default relay over `store`.
    async fn relay(&self, store: &Self::Store, name: &str) -> Box<dyn Relay>;

    async fn begin(&self) -> Self::Tx;
    async fn enqueue(&self, tx: &mut Self::Tx, event: &NewEvent) -> Result<OutboxEvent>;
    async fn commit(&self, tx: Self::Tx) -> Result<()>;
    async fn rollback(&self, tx: Self::Tx) -> Result<()>;
    /// Enqueues on a connection of its own, one transaction, committed. Callable from
    /// many tasks at once.
    async fn enqueue_committed(&self, events: Vec<NewEvent>) -> Result<Vec<OutboxEvent>>;
    /// Runs one SQL statement in its own transaction; returns the rows affected.
    async fn execute_raw(&self, sql: &str) -> Result<u64>;
}

/// A fresh consumer database with a treasury table.
///
/// The harness's handler decodes the payload as `{"amount": <i64>}` and writes one
/// treasury row in the consumer's transaction: `+amount` for committed, `-amount`
/// for reverted. With `fail_handler` it fails instead.
///
/// Not `Send`: inbox storage borrows the consumer's transaction, and SQLite
/// connections are not `Sync`. The inbox tests run on a current-thread runtime.
#[async_trait(?Send)]
pub trait InboxHarness: Send + Sync + Sized + 'static {
    async fn new() -> Self;
    /// Runs `engine.accept` in a fresh transaction; commits on `Ok`, rolls back on `Err`.
    async fn accept(
        &self,
        engine: &InboxEngine,
        message: InboxMessage,
        fail_handler: bool,
    ) -> Result<Accepted>;
    /// Runs `engine.check_gaps` in a fresh transaction and commits.
    async fn check_gaps(&self, engine: &InboxEngine) -> Result<Vec<GapAlarm>>;
    /// The sum of treasury rows per account written for `consumer`.
    async fn treasury(&self, consumer: &str) -> Vec<(String, i64)>;
    /// `(instruction_id, account, sequence)` of processed markers of `consumer`, by account then sequence.
    async fn applied(&self, consumer: &str) -> Vec<(String, String, u64)>;
    /// `(account, sequence)` of held messages of `consumer`.
    async fn held(&self, consumer: &str) -> Vec<(String, u64)>;
    async fn exceptions(&self) -> Vec<Exception>;
}
