//! `Publisher`: a transport sink of the fan-out loop (HTTP endpoint, Kafka topic,
//! RabbitMQ exchange).

use async_trait::async_trait;

use super::FanoutMessage;
use crate::error::Result;

/// What a publisher guarantees beyond the basic contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PublisherCapabilities {
    /// Several messages of one account may be in flight at once: the transport keeps
    /// their order on the wire and never delivers one after a failed earlier one
    /// (Kafka's idempotent producer, one key to one partition). When false the loop
    /// sends at most one message per account per call.
    pub ordered_pipeline: bool,
}

impl PublisherCapabilities {
    /// Capabilities with [`ordered_pipeline`](Self::ordered_pipeline) as given.
    pub const fn new(ordered_pipeline: bool) -> Self {
        Self { ordered_pipeline }
    }
}

/// A transport sink.
///
/// # Contract
/// - `publish` sends every message and returns one result per message, in input
///   order, each only once the broker or endpoint **confirmed** it (Kafka delivery
///   report with `acks=all`, AMQP publisher confirm, HTTP 2xx). Nothing is reported
///   `Ok` that could still be lost.
/// - Messages of one account appear in the input in the fan-out store's position
///   order, which is their sequence order unless a webhook reached the store late
///   ([`super::FanoutStore`], "Contract"); unless `capabilities().ordered_pipeline`,
///   there is at most one per account.
/// - Errors carry a kind and a retry class: transient (broker down, Nack, 5xx, 429
///   with its `Retry-After`) is retried by the loop with backoff; permanent (unroutable,
///   4xx, message too large) dead-letters the message and parks its account (its later
///   messages are set aside behind it) until an operator asks for a replay.
/// - Cancel safety: dropping the future may leave messages sent but unconfirmed; the
///   loop re-sends them (at least once).
#[async_trait]
pub trait Publisher: Send + Sync + 'static {
    /// The destination's identity: it names the cursor (and the dead letters) in the
    /// fan-out store, so it must be stable across restarts and differ for any two
    /// destinations that receive separately (two destinations of one store under one
    /// name would share one forward-only cursor, and the slower would lose messages;
    /// the fan-out loop does not check it, `outbox fanout` refuses two `--to` with one
    /// identity): it includes the cluster or host, vhost,
    /// topic, exchange or path, normalised, and never a credential
    /// (`kafka://b1:9092,b2:9092/ledger-events`,
    /// `amqp://rabbit:5672/%2F?exchange=ledger-events`, `https://host/path`).
    fn name(&self) -> &str;

    /// What the publisher guarantees beyond the contract; by default nothing (one
    /// message per account per call).
    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::default()
    }

    /// Sends `messages` and answers one result per message, in input order, each
    /// `Ok` only once confirmed (see the contract).
    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>>;
}

#[async_trait]
impl<T: Publisher + ?Sized> Publisher for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn capabilities(&self) -> PublisherCapabilities {
        (**self).capabilities()
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        (**self).publish(messages).await
    }
}
