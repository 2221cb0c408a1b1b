//! `NatsPublisher`: publishes each message to the stream's subject and reports it
//! `Ok` only once JetStream acknowledged storing it.

use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use async_trait::async_trait;
use outbox_core::fanout::headers;
use outbox_core::{FanoutMessage, Publisher, Result};
use tokio::sync::Mutex;

use crate::config::NatsConfig;
use crate::error;

/// A fan-out loop sink on a JetStream stream.
///
/// - One connection, opened on the first publish (and again after a failed open);
///   the client reconnects by itself after that.
/// - `publish` sends every message of the call, then waits for each one's
///   acknowledgement (JetStream's publisher confirm, after the stream stored it):
///   one result per message, in input order.
/// - No `Nats-Msg-Id` header: JetStream's duplicate window would drop a re-send, and
///   the consumer's inbox is where duplicates are absorbed.
/// - Capabilities: none. Two messages of one account in one call could be stored out
///   of order around a reconnect (the first lost in flight, the second sent after),
///   so the loop sends one per account per call.
#[derive(Debug)]
pub struct NatsPublisher {
    config: NatsConfig,
    name: String,
    context: Mutex<Option<Context>>,
}

impl NatsPublisher {
    /// Checks the configuration; connects on the first publish.
    ///
    /// # Errors
    /// `InvalidInput` naming the field when [`NatsConfig::validate`] fails.
    pub fn new(config: NatsConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            name: config.destination_name(),
            config,
            context: Mutex::default(),
        })
    }

    /// The connected context, connecting (and declaring the stream) when needed.
    async fn context(&self) -> Result<Context> {
        let mut slot = self.context.lock().await;
        if let Some(context) = slot.as_ref() {
            return Ok(context.clone());
        }
        let context = self.config.connect("publisher").await?;
        if self.config.declare {
            // Before the first publish: a subject without a stream answers "no
            // responders", a permanent refusal.
            self.config
                .open_stream(&context)
                .await
                .map_err(|e| e.with("stream", &self.config.stream))?;
        }
        *slot = Some(context.clone());
        Ok(context)
    }
}

/// The identity headers of `message` as NATS headers.
fn header_map(message: &FanoutMessage) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers::encode(message) {
        map.insert(name, value);
    }
    map
}

#[async_trait]
impl Publisher for NatsPublisher {
    fn name(&self) -> &str {
        &self.name
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        let context = match self.context().await {
            Ok(context) => context,
            Err(e) => return messages.iter().map(|_| Err(e.clone())).collect(),
        };
        // Send everything first, then wait for the acks: one round trip per call,
        // not per message.
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            let sent = context
                .publish_with_headers(
                    self.config.subject.clone(),
                    header_map(message),
                    message.payload.clone().into(),
                )
                .await;
            pending.push(sent);
        }
        let mut results = Vec::with_capacity(messages.len());
        for (message, sent) in messages.iter().zip(pending) {
            let acked = match sent {
                Ok(ack) => ack.await.map(|_| ()),
                Err(e) => Err(e),
            };
            results.push(acked.map_err(|e| {
                error::publish(&e)
                    .with("subject", &self.config.subject)
                    .with("account", &message.account)
                    .with("sequence", message.sequence)
            }));
        }
        results
    }
}
