//! What a backend provides so the suites can drive it.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::reconcile::balances::PostedHistory;
use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_core::reconcile::sequences::InboxSequences;
use outbox_core::{
    Accepted, Error, ErrorKind, Exception, FanoutStore, GapAlarm, InboxEngine, InboxMessage,
    NewEvent, OutboxEvent, Relay, Result, Store,
};

use crate::tamper::{FanoutTamper, StoreTamper};

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
    /// Tries `tamper` on the backend behind the store, the way another writer of the
    /// database could (an operator's session, a bug), and answers what the backend
    /// said: the records changed, or its error through the store crate's own error
    /// mapping (the suite expects `Immutable`). Answer `Unsupported` only when nothing
    /// but the store can reach the records (an in-memory store): the immutability
    /// cases then pass after printing `skipped <case>: <why>`.
    ///
    /// The default runs [`StoreTamper::sql`], the statement for the in-tree schema,
    /// through [`execute_raw`](Self::execute_raw).
    async fn tamper(&self, tamper: StoreTamper) -> Result<u64> {
        self.execute_raw(tamper.sql()).await
    }
    /// Runs one SQL statement in its own transaction, mapped by the store crate's own
    /// error mapping; returns the rows affected. Used by the default
    /// [`tamper`](Self::tamper) and by the reconciliation suite, which writes inbox
    /// rows and retention permits with it. The default answers `Unsupported`: a
    /// store that takes no SQL overrides `tamper` instead.
    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        Err(no_sql(sql))
    }
}

/// What the default `execute_raw` answers: this harness takes no SQL.
fn no_sql(sql: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("this harness runs no SQL (asked: {sql})"),
    )
}

/// A store harness whose store also answers the reconciliation checks' reads
/// (`outbox_core::reconcile`), with the SQL literals the reconciliation suite's raw
/// inserts need: the suite writes inbox rows and retention permits through
/// [`StoreHarness::execute_raw`], as a consumer or a retention pass would have.
pub trait ReconcileHarness:
    StoreHarness<Store: InboxSequences + CompletenessStore + PostedHistory>
{
    /// `at` as a literal of the backend's timestamp columns.
    fn time_literal(&self, at: DateTime<Utc>) -> String;
    /// `bytes` as a literal of the backend's byte-string columns.
    fn bytes_literal(&self, bytes: &[u8]) -> String;
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

/// A fresh, isolated fan-out store (Hop 2) and the backend access the fan-out suite
/// needs beyond the trait.
#[async_trait]
pub trait FanoutStoreHarness: Clone + Send + Sync + Sized + 'static {
    type Store: FanoutStore + Clone;

    /// A harness over a new, empty database (file, schema…).
    async fn new() -> Self;
    /// The store (the same one on every call).
    fn store(&self) -> Self::Store;
    /// A new store instance over the same database, as after a process restart.
    async fn reopen(&self) -> Self::Store;
    /// The store as a trait object.
    fn dyn_store(&self) -> Arc<dyn FanoutStore> {
        Arc::new(self.store())
    }
    /// Tries `tamper` on the backend behind the store, as
    /// [`StoreHarness::tamper`] does for the relay-side store: answers the records
    /// changed or the backend's error through the store crate's own mapping;
    /// `Unsupported` only when nothing but the store can reach the records (the
    /// immutability cases then pass after printing why).
    ///
    /// The default runs [`FanoutTamper::sql`], the statement for the in-tree schema,
    /// through [`execute_raw`](Self::execute_raw).
    async fn tamper(&self, tamper: FanoutTamper) -> Result<u64> {
        self.execute_raw(tamper.sql()).await
    }
    /// Runs one SQL statement in its own transaction, mapped by the store crate's own
    /// error mapping; returns the rows affected. In the suite only the default
    /// [`tamper`](Self::tamper) uses it; the default answers `Unsupported`.
    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        Err(no_sql(sql))
    }
    /// Makes the backend refuse to store every message whose `instruction_id` is
    /// `instruction_id`, inside the store's own append (a test-only trigger or CHECK
    /// on SQL), so that one message of an append fails after the delivery id was
    /// written: the suite checks the whole append is then undone.
    async fn refuse_instruction(&self, instruction_id: &str);
    /// A store whose backend cannot be reached (no server listening, a database file
    /// locked by another writer beyond the busy timeout…). `Err` when opening it
    /// already fails; the suite requires that error, and every operation's error on an
    /// opened store, to be transient.
    async fn unreachable(&self) -> Result<Arc<dyn FanoutStore>>;
}

/// Runs a fan-out harness's store through `Arc<dyn FanoutStore>`: the same cases, the
/// same database access, only the store is a trait object (what binaries hold).
#[derive(Debug, Clone)]
pub struct ThroughDyn<H>(pub H);

#[async_trait]
impl<H: FanoutStoreHarness> FanoutStoreHarness for ThroughDyn<H> {
    type Store = Arc<dyn FanoutStore>;

    async fn new() -> Self {
        Self(H::new().await)
    }

    fn store(&self) -> Arc<dyn FanoutStore> {
        self.0.dyn_store()
    }

    async fn reopen(&self) -> Arc<dyn FanoutStore> {
        Arc::new(self.0.reopen().await)
    }

    async fn tamper(&self, tamper: FanoutTamper) -> Result<u64> {
        self.0.tamper(tamper).await
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        self.0.execute_raw(sql).await
    }

    async fn refuse_instruction(&self, instruction_id: &str) {
        self.0.refuse_instruction(instruction_id).await;
    }

    async fn unreachable(&self) -> Result<Arc<dyn FanoutStore>> {
        self.0.unreachable().await
    }
}
