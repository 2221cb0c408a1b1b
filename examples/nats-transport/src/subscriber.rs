//! `NatsSubscriber`: pulls from the durable consumer and feeds a [`MessageSink`],
//! acking each message only after the sink accepted it.

use std::sync::Arc;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::{AckKind, Message};
use async_trait::async_trait;
use futures_util::StreamExt;
use outbox_core::fanout::headers;
use outbox_core::{Error, FanoutMessage, MessageSink, Result, Retries, Subscriber};
use tokio::sync::watch;

use crate::config::NatsConfig;
use crate::error::{self, Answer};

/// Reads the stream through one durable pull consumer and hands each message to the
/// sink.
///
/// - Messages are handled one at a time, in stream order: decode the headers,
///   `sink.accept("<stream>/<stream sequence>", vec![message])`, then ack and wait
///   for the server to confirm the ack. One active subscriber per durable keeps each
///   account's order on arrival; a second one on the same durable would share the
///   messages (the inbox would still apply in order, holding what comes early).
/// - A transient `accept` error is retried with backoff (honouring its `after`)
///   without acking; a permanent one, or undecodable headers: the message is nacked
///   (redelivered to the next run, for an operator) and `run` ends with the error.
/// - Connection loss or an unconfirmed ack: a new connection with backoff, retried
///   until shutdown. What was delivered and not acked comes again after `ack_wait`
///   (at least once; the inbox deduplicates).
/// - Shutdown (`true` on the watch, or its sender dropped): finish the message in
///   hand, nack the rest of the pulled batch so it comes again at once, return `Ok`.
#[derive(Debug)]
pub struct NatsSubscriber {
    config: NatsConfig,
}

/// Why a consuming session (one connection) ended.
#[derive(Debug)]
enum End {
    /// Shutdown.
    Stopped,
    /// The connection is gone or the server did not answer: reconnect.
    Lost(Error),
    /// `run` must return this error.
    Fatal(Error),
}

impl End {
    fn from_error(e: Error) -> Self {
        if e.is_transient() {
            Self::Lost(e)
        } else {
            Self::Fatal(e)
        }
    }
}

impl NatsSubscriber {
    /// Checks the configuration; connects when `run` starts.
    ///
    /// # Errors
    /// `InvalidInput` naming the field when [`NatsConfig::validate`] fails.
    pub fn new(config: NatsConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// Connects, finds (or, with `declare`, creates) the stream, and finds or creates
    /// the durable consumer.
    async fn open(&self) -> Result<PullConsumer> {
        let context = self.config.connect("subscriber").await?;
        let stream = self.config.open_stream(&context).await?;
        let durable = pull::Config {
            durable_name: Some(self.config.durable.clone()),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::Explicit,
            ack_wait: self.config.ack_wait,
            filter_subject: self.config.subject.clone(),
            // Never give up on a message: a poison message stops `run` instead.
            max_deliver: -1,
            ..Default::default()
        };
        // The durable is the subscriber's own place in the stream: always created
        // when missing, whatever `declare` says about the stream.
        stream
            .get_or_create_consumer(&self.config.durable, durable)
            .await
            .map_err(|e| {
                use async_nats::jetstream::stream::ConsumerErrorKind as K;
                let answer = match e.kind() {
                    K::JetStream(api) => Answer::Status(api.code()),
                    K::InvalidConsumerType | K::InvalidName => Answer::Refused,
                    _ => Answer::Silent,
                };
                error::api("get consumer", &e, answer).with("durable", &self.config.durable)
            })
    }

    /// One connection's life: open, pull batches until something ends it.
    async fn session(
        &self,
        sink: &Arc<dyn MessageSink>,
        shutdown: &mut watch::Receiver<bool>,
        retries: &mut Retries,
    ) -> End {
        let opened = tokio::select! {
            biased;
            () = stopped(shutdown) => return End::Stopped,
            opened = self.open() => opened,
        };
        let consumer = match opened {
            Ok(consumer) => consumer,
            Err(e) => return End::from_error(e.with("stream", &self.config.stream)),
        };
        retries.reset();
        tracing::info!(stream = %self.config.stream, durable = %self.config.durable, "nats subscriber: consuming");
        loop {
            let requested = consumer
                .batch()
                .max_messages(self.config.batch)
                .expires(self.config.fetch_wait)
                .messages();
            let mut batch = tokio::select! {
                biased;
                () = stopped(shutdown) => return End::Stopped,
                batch = requested => match batch {
                    Ok(batch) => batch,
                    Err(e) => return End::Lost(error::api("pull", &e, Answer::Silent)),
                },
            };
            loop {
                let next = tokio::select! {
                    biased;
                    () = stopped(shutdown) => {
                        nack_rest(&mut batch).await;
                        return End::Stopped;
                    }
                    next = batch.next() => next,
                };
                let message = match next {
                    None => break,
                    Some(Ok(message)) => message,
                    Some(Err(e)) => return End::Lost(error::api("pull", &e, Answer::Silent)),
                };
                if let Some(end) = self.handle(sink, shutdown, message).await {
                    if matches!(end, End::Stopped) {
                        nack_rest(&mut batch).await;
                    }
                    return end;
                }
            }
        }
    }

    /// Decodes, hands over (retrying transient refusals), acks. `None` to go on.
    async fn handle(
        &self,
        sink: &Arc<dyn MessageSink>,
        shutdown: &mut watch::Receiver<bool>,
        message: Message,
    ) -> Option<End> {
        let delivery_id = match message.info() {
            Ok(info) => format!("{}/{}", info.stream, info.stream_sequence),
            Err(e) => return Some(End::Lost(error::ack(&e))),
        };
        let decoded = match decode(&message) {
            Ok(decoded) => decoded,
            Err(e) => {
                // Never ack a poison message: it stays in the stream for an operator.
                let _ = message.ack_with(AckKind::Nak(None)).await;
                return Some(End::Fatal(
                    e.with("stream", &self.config.stream)
                        .with("delivery", &delivery_id),
                ));
            }
        };
        let mut retries = self.config.retry_policy().start();
        loop {
            let error = match sink.accept(&delivery_id, vec![decoded.clone()]).await {
                Ok(()) => {
                    // Confirmed by the server: an ack lost on the way would bring the
                    // message again after ack_wait, out of its place.
                    return match message.double_ack().await {
                        Ok(()) => None,
                        Err(e) => Some(End::Lost(error::ack(&e).with("delivery", &delivery_id))),
                    };
                }
                Err(error) => error
                    .with("stream", &self.config.stream)
                    .with("delivery", &delivery_id)
                    .with("account", &decoded.account)
                    .with("sequence", decoded.sequence),
            };
            let shown = error.to_string();
            match retries.after(error) {
                Ok(delay) => {
                    tracing::warn!(error = %shown, failures = retries.failures(), ?delay, "nats subscriber: sink refused a message, retrying");
                    tokio::select! {
                        biased;
                        () = stopped(shutdown) => {
                            let _ = message.ack_with(AckKind::Nak(None)).await;
                            return Some(End::Stopped);
                        }
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(error) => {
                    let _ = message.ack_with(AckKind::Nak(None)).await;
                    return Some(End::Fatal(error));
                }
            }
        }
    }
}

#[async_trait]
impl Subscriber for NatsSubscriber {
    async fn run(
        &self,
        sink: Arc<dyn MessageSink>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut retries = self.config.retry_policy().start();
        loop {
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                return Ok(());
            }
            match self.session(&sink, &mut shutdown, &mut retries).await {
                End::Stopped => return Ok(()),
                End::Fatal(e) => {
                    tracing::error!(error = %e, "nats subscriber: stopping on a permanent error");
                    return Err(e);
                }
                End::Lost(e) => {
                    let shown = e.to_string();
                    // A lost connection is worth another try whatever its cause said.
                    let delay = retries.after(e.transient(None))?;
                    tracing::warn!(error = %shown, failures = retries.failures(), ?delay, "nats subscriber: connection lost, reconnecting");
                    tokio::select! {
                        biased;
                        () = stopped(&mut shutdown) => return Ok(()),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}

/// Resolves once `rx` holds `true` or its sender is gone.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Hands the pulled but unhandled messages of `batch` back for redelivery now,
/// rather than after `ack_wait`; bounded, since the batch may wait for more.
async fn nack_rest(batch: &mut async_nats::jetstream::consumer::pull::Batch) {
    let drain = async {
        while let Some(Ok(message)) = batch.next().await {
            let _ = message.ack_with(AckKind::Nak(None)).await;
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(200), drain).await;
}

/// The message of a delivery, from its string headers.
fn decode(message: &Message) -> Result<FanoutMessage> {
    let map = message.headers.as_ref();
    headers::decode(
        |name| map.and_then(|m| m.get(name)).map(|v| v.as_str()),
        message.payload.to_vec(),
    )
}
