//! `AmqpSubscriber`: consumes the `N` queues and feeds a [`MessageSink`], acking
//! each delivery only after the sink accepted it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, Consumer};
use outbox_core::fanout::headers;
use outbox_core::{Error, FanoutMessage, MessageSink, Result, Retries, Subscriber};
use tokio::sync::watch;

use crate::config::AmqpConfig;
use crate::error;
use crate::topology::Topology;

/// Consumes every queue `<exchange>.<i>` and hands each delivery to the sink.
///
/// - One connection, one channel per queue with `basic.qos(prefetch)`; the queues
///   are single-active-consumer, so across processes one consumer per queue is
///   active and the others stand by (fail-over, not parallelism).
/// - Per queue, deliveries are handled one at a time, in delivery order: decode
///   the headers, `sink.accept("<queue>/<delivery tag>", vec![message])`, then ack.
/// - A transient `accept` error is retried with backoff (honouring its `after`)
///   until it succeeds or shutdown; the delivery is not acked meanwhile.
/// - A permanent `accept` error or undecodable headers: the delivery is nacked with
///   requeue (it stays in the queue for an operator) and `run` ends with the error.
/// - Connection loss: reconnect with backoff (each attempt bounded by
///   `connect_timeout_ms`, retried until shutdown), redeclare the topology, resume.
///   Unacked deliveries come again (at least once; the inbox deduplicates).
/// - Shutdown (`true` on the watch, or its sender dropped): finish the delivery in
///   hand, close the connection (unacked prefetched deliveries go back to the
///   queue), return `Ok`.
#[derive(Debug)]
pub struct AmqpSubscriber {
    config: AmqpConfig,
    topology: Topology,
}

/// Why a consuming session (one connection) ended.
#[derive(Debug)]
enum End {
    /// Shutdown, or another queue's worker ended the session.
    Stopped,
    /// The connection or a channel is gone: reconnect.
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

/// What one queue's worker owns and watches.
struct Worker {
    queue: String,
    /// Kept so the channel stays open as long as its consumer is read.
    _channel: Channel,
    consumer: Consumer,
    sink: Arc<dyn MessageSink>,
    shutdown: watch::Receiver<bool>,
    /// Turned true by the first worker whose queue ended the session.
    stop: watch::Receiver<bool>,
}

impl AmqpSubscriber {
    /// Checks the configuration; connects when `run` starts.
    ///
    /// # Errors
    /// `Config` when [`AmqpConfig::validate`] fails.
    pub fn new(config: AmqpConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            topology: Topology::new(config.exchange.clone(), config.queue_count),
            config,
        })
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn config(&self) -> &AmqpConfig {
        &self.config
    }

    /// Connects, declares, and starts one consumer per queue.
    async fn open(&self) -> Result<(Connection, Vec<(String, Channel, Consumer)>)> {
        let connection = self.config.connect("subscriber").await?;
        if self.config.declare_topology {
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| error::lapin(&e, "open channel"))?;
            self.topology
                .declare(&channel)
                .await
                .map_err(|e| error::lapin(&e, "declare topology"))?;
            let _ = channel.close(200, "declared".into()).await;
        }
        let run_id = fastrand::u32(..);
        let mut consumers = Vec::with_capacity(usize::from(self.topology.queue_count()));
        for (index, queue) in self.topology.queue_names().into_iter().enumerate() {
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| error::lapin(&e, "open channel"))?;
            channel
                .basic_qos(self.config.prefetch, BasicQosOptions::default())
                .await
                .map_err(|e| error::lapin(&e, "qos").with("queue", &queue))?;
            let tag = format!("{}.{index}.{run_id:08x}", self.config.consumer_tag_prefix);
            let consumer = channel
                .basic_consume(
                    queue.as_str().into(),
                    tag.into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| error::lapin(&e, "consume").with("queue", &queue))?;
            consumers.push((queue, channel, consumer));
        }
        Ok((connection, consumers))
    }

    /// One connection's life: open, consume every queue until something ends it.
    async fn session(
        &self,
        sink: &Arc<dyn MessageSink>,
        shutdown: &watch::Receiver<bool>,
        retries: &mut Retries,
    ) -> End {
        let bound = self.config.connect_timeout();
        let mut watch_shutdown = shutdown.clone();
        let opened = tokio::select! {
            biased;
            () = stopped(&mut watch_shutdown) => return End::Stopped,
            opened = tokio::time::timeout(bound, self.open()) => opened,
        };
        let (connection, consumers) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => return End::from_error(e.with("exchange", &self.config.exchange)),
            Err(_) => {
                return End::Lost(
                    error::connect_timeout(bound).with("exchange", &self.config.exchange),
                );
            }
        };
        retries.reset();
        tracing::info!(
            exchange = %self.config.exchange,
            queues = consumers.len(),
            "amqp subscriber: consuming"
        );

        let (stop_tx, stop_rx) = watch::channel(false);
        let workers = consumers.into_iter().map(|(queue, channel, consumer)| {
            let worker = Worker {
                queue,
                _channel: channel,
                consumer,
                sink: Arc::clone(sink),
                shutdown: shutdown.clone(),
                stop: stop_rx.clone(),
            };
            let stop_tx = &stop_tx;
            async move {
                let end = self.consume(worker).await;
                if !matches!(end, End::Stopped) {
                    // Every queue restarts together on the next connection.
                    let _ = stop_tx.send(true);
                }
                end
            }
        });
        let ends = futures_util::future::join_all(workers).await;
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            connection.close(200, "subscriber stopping".into()),
        )
        .await;

        let mut outcome = End::Stopped;
        for end in ends {
            outcome = match (outcome, end) {
                (End::Fatal(e), _) | (_, End::Fatal(e)) => End::Fatal(e),
                (End::Lost(e), _) | (_, End::Lost(e)) => End::Lost(e),
                (End::Stopped, End::Stopped) => End::Stopped,
            };
        }
        outcome
    }

    /// Reads one queue until shutdown, a session stop, or an error.
    async fn consume(&self, mut worker: Worker) -> End {
        loop {
            let next = tokio::select! {
                biased;
                () = stopped(&mut worker.shutdown) => return End::Stopped,
                () = stopped(&mut worker.stop) => return End::Stopped,
                next = worker.consumer.next() => next,
            };
            let delivery = match next {
                Some(Ok(delivery)) => delivery,
                Some(Err(e)) => {
                    return End::from_error(
                        error::lapin(&e, "consume").with("queue", &worker.queue),
                    );
                }
                None => return End::Lost(error::consumer_ended(&worker.queue)),
            };
            if let Some(end) = self.handle(&mut worker, delivery).await {
                return end;
            }
        }
    }

    /// Decodes, hands over (retrying transient refusals), acks. `None` to go on.
    async fn handle(&self, worker: &mut Worker, mut delivery: Delivery) -> Option<End> {
        let delivery_id = format!("{}/{}", worker.queue, delivery.delivery_tag);
        let payload = std::mem::take(&mut delivery.data);
        let message = match decode(&delivery, payload) {
            Ok(message) => message,
            Err(e) => {
                // Never ack a poison message: it goes back to the queue for an operator.
                let _ = delivery.nack(requeue()).await;
                let message_id = delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map_or_else(String::new, |id| id.to_string());
                return Some(End::Fatal(
                    e.with("queue", &worker.queue)
                        .with("delivery", &delivery_id)
                        .with("message_id", message_id),
                ));
            }
        };
        let mut retries = self.config.retry_policy().start();
        loop {
            let error = match worker
                .sink
                .accept(&delivery_id, vec![message.clone()])
                .await
            {
                Ok(()) => {
                    return match delivery.ack(BasicAckOptions::default()).await {
                        Ok(_) => None,
                        // The broker will redeliver it: at least once.
                        Err(e) => Some(End::from_error(
                            error::lapin(&e, "ack")
                                .with("queue", &worker.queue)
                                .with("delivery", &delivery_id),
                        )),
                    };
                }
                Err(error) => error,
            };
            let error = context(error, &worker.queue, &delivery_id, &message);
            let shown = error.to_string();
            match retries.after(error) {
                Ok(delay) => {
                    tracing::warn!(error = %shown, failures = retries.failures(), ?delay, "amqp subscriber: sink refused a delivery, retrying");
                    tokio::select! {
                        biased;
                        () = stopped(&mut worker.shutdown) => return Some(End::Stopped),
                        () = stopped(&mut worker.stop) => return Some(End::Stopped),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(error) => {
                    let _ = delivery.nack(requeue()).await;
                    return Some(End::Fatal(error));
                }
            }
        }
    }
}

#[async_trait]
impl Subscriber for AmqpSubscriber {
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
            match self.session(&sink, &shutdown, &mut retries).await {
                End::Stopped => {}
                End::Fatal(e) => {
                    tracing::error!(error = %e, "amqp subscriber: stopping on a permanent error");
                    return Err(e);
                }
                End::Lost(e) => {
                    let shown = e.to_string();
                    // A lost connection is worth another try whatever its cause said.
                    let delay = retries.after(e.transient(None))?;
                    tracing::warn!(error = %shown, failures = retries.failures(), ?delay, uri = %self.config.redacted_uri(), "amqp subscriber: connection lost, reconnecting");
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

/// Resolves once `rx` holds `true` or its sender is gone (nobody can say stop any
/// more, so stop now).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

fn requeue() -> BasicNackOptions {
    BasicNackOptions {
        multiple: false,
        requeue: true,
    }
}

fn context(error: Error, queue: &str, delivery_id: &str, message: &FanoutMessage) -> Error {
    error
        .with("queue", queue)
        .with("delivery", delivery_id)
        .with("account", &message.account)
        .with("sequence", message.sequence)
}

/// The message of a delivery: string headers (long or short strings) by name.
fn decode(delivery: &Delivery, payload: Vec<u8>) -> Result<FanoutMessage> {
    let empty = FieldTable::default();
    let table = delivery.properties.headers().as_ref().unwrap_or(&empty);
    headers::decode(
        |name| match table.inner().get(name)? {
            AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok(),
            AMQPValue::ShortString(text) => Some(text.as_str()),
            _ => None,
        },
        payload,
    )
}
