//! What the transport suite needs from a transport under test.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{ErrorKind, FanoutMessage, FanoutStore, MessageSink, Publisher, Subscriber};

/// A consumer the suite can inspect: it applies through a real inbox and remembers what
/// it was handed.
pub trait ProbeConsumer: MessageSink {
    /// Every message handed to `accept`, in arrival order, duplicates included.
    fn received(&self) -> Vec<FanoutMessage>;
    /// `(account, sequence, instruction id)` of each message the inbox applied, in
    /// apply order (a duplicate absorbed by the inbox is not here).
    fn applied(&self) -> Vec<(String, u64, String)>;
    /// The consumer's own balance of `account` in `asset` (its treasury table): an
    /// instruction applied twice would show here even if the inbox listed it once.
    fn balance(&self, account: &str, asset: &str) -> i64;
}

/// A fault a transport can be made to show, and how its error must be classified.
pub struct InjectedFault {
    pub name: &'static str,
    /// A publisher whose publish of `message` meets the fault.
    pub publisher: Arc<dyn Publisher>,
    pub message: FanoutMessage,
    pub kind: ErrorKind,
    pub transient: bool,
    /// The `Retry-After` the error must carry, when the transport reports one.
    pub after: Option<Duration>,
}

impl std::fmt::Debug for InjectedFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InjectedFault")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("transient", &self.transient)
            .finish_non_exhaustive()
    }
}

/// A fresh destination (topic, exchange + queues, endpoint) for one case.
#[async_trait]
pub trait Destination: Send + Sync {
    fn publisher(&self) -> Arc<dyn Publisher>;
    /// A new subscriber reading this destination (same consumer group where it applies).
    async fn subscriber(&self) -> Arc<dyn Subscriber>;
    /// Stops the broker (or endpoint server) of a restartable destination.
    async fn stop_broker(&self);
    /// Starts it again and returns once it accepts connections (recreating what a
    /// memory-only broker forgot).
    async fn start_broker(&self);
    /// Whether consumers keep their place across a broker restart. A Kafka-protocol
    /// broker with memory storage (Tansu in tests) forgets the topic and the group's
    /// offsets: the topic is recreated with offsets from 0 again, and a consumer
    /// positioned past them would wait for offsets that are not coming, so the case
    /// starts a new subscriber after the restart. Real Kafka keeps both.
    fn consumers_survive_restart(&self) -> bool {
        true
    }
    /// The faults this transport can inject, each with its expected classification.
    async fn faults(&self) -> Vec<InjectedFault>;
    /// Removes what the destination created.
    async fn cleanup(&self);
}

/// A transport under test. `new` is cheap; `destination` reaches the real service.
///
/// A transport crate implements `new` and `destination`; the database side has
/// defaults (a SQLite fan-out store and a probe on the SQLite inbox, from
/// [`crate::transport_parts`]) that a harness may override to run on another store.
/// Run the cases with [`crate::transport_suite!`]; docs/ADAPTERS.md, "Transports".
#[async_trait]
pub trait TransportHarness: Send + Sync + Sized {
    async fn new() -> Self;
    /// A fresh destination; `restartable` ones may have their broker stopped and
    /// started by the case. `Err` names the service that cannot be reached: the case
    /// is skipped, or fails when `OUTBOX_TEST_REQUIRE=1`.
    async fn destination(&self, restartable: bool) -> Result<Box<dyn Destination>, String>;
    /// A fresh, real fan-out store for cases that drive the fan-out loop; by default
    /// [`sqlite_fanout_store`](crate::transport_parts::sqlite_fanout_store).
    async fn fanout_store(&self) -> Arc<dyn FanoutStore> {
        crate::transport_parts::sqlite_fanout_store().await
    }
    /// A fresh consumer with its own inbox; by default a
    /// [`SqliteProbe`](crate::transport_parts::SqliteProbe).
    async fn consumer(&self) -> Arc<dyn ProbeConsumer> {
        crate::transport_parts::SqliteProbe::new().await
    }
}
