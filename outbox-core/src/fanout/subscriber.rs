//! `Subscriber` (a transport source) and `MessageSink` (where it hands messages: the
//! consumer's inbox transaction, or the fan-out intake).

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use super::FanoutMessage;
use crate::error::Result;

/// Applies the messages of one delivery.
///
/// # Contract
/// Return `Ok` only once the messages are durably applied or stored (or recognised
/// as duplicates): the caller then acknowledges the delivery (HTTP 2xx, Kafka offset
/// commit, AMQP ack) and it will not come again. On `Err` nothing may have been
/// half-applied; the caller retries a transient error and reports a permanent one.
#[async_trait]
pub trait MessageSink: Send + Sync + 'static {
    /// Applies or stores `messages`, the contents of one delivery, and returns once
    /// that is durable. `delivery_id` is the transport's id for the delivery (the
    /// webhook id at the intake, which dedupes on it; `<topic>/<partition>/<offset>`
    /// on Kafka; `<queue>/<delivery tag>` on AMQP).
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()>;
}

#[async_trait]
impl<T: MessageSink + ?Sized> MessageSink for Arc<T> {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        (**self).accept(delivery_id, messages).await
    }
}

/// A transport source feeding a sink.
///
/// # Contract
/// - Every message is handed to `sink.accept` and acknowledged to the transport only
///   after `accept` returned `Ok` (at least once: a crash in between redelivers).
/// - Messages of one account are handed over in the order the transport delivered
///   them, one delivery at a time per account.
/// - A transient `accept` error is retried (with backoff) without moving past the
///   message. A permanent one, or a message whose headers cannot be decoded, ends
///   `run` with that error (naming the field or header): a poison message needs an
///   operator and is never acknowledged silently.
/// - Connection loss (broker restart) is survived by reconnecting.
/// - `run` returns when `shutdown` turns true, after finishing the delivery in hand.
#[async_trait]
pub trait Subscriber: Send + Sync + 'static {
    /// Receives until `shutdown` turns true, handing each delivery to `sink`.
    ///
    /// # Errors
    /// A permanent `accept` error, or a message whose headers cannot be decoded
    /// (naming the header); see the contract.
    async fn run(&self, sink: Arc<dyn MessageSink>, shutdown: watch::Receiver<bool>) -> Result<()>;
}
