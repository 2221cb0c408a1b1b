//! `KafkaSubscriber`: a consumer-group source that hands each message to a
//! `MessageSink` and commits its offset only after the sink said `Ok`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::fanout::headers;
use outbox_core::{Error, FanoutMessage, MessageSink, Result, RetryPolicy, Subscriber};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedHeaders, BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::config::SubscriberConfig;
use crate::error::{is_rebalance_code, is_refusal_code, map_kafka_error};

/// Pause after a consumer error before polling again, so a broker that is down does
/// not turn the loop into a busy spin (librdkafka reconnects on its own).
const CONSUMER_ERROR_PAUSE: Duration = Duration::from_millis(500);

/// Every header name `headers::decode` reads; a non-UTF-8 value of one of these is
/// reported as malformed rather than missing.
const KNOWN_HEADERS: [&str; 8] = [
    headers::INSTRUCTION_ID,
    headers::ACCOUNT,
    headers::SEQUENCE,
    headers::EVENT_TYPE,
    headers::LEDGER,
    headers::LEDGER_TX_ID,
    headers::TRACEPARENT,
    headers::TRACESTATE,
];

/// Consumes one topic in a consumer group and feeds a [`MessageSink`].
///
/// Messages are handled one at a time, in the order the consumer delivers them, so
/// the messages of one partition (and so of one account) are handed over
/// sequentially and in order. Each delivery is one message with the id
/// `<topic>/<partition>/<offset>`; its offset (+1) is committed synchronously once
/// `accept` returned `Ok`, never before. A transient `accept` error re-hands the same
/// message after a growing, bounded delay until it succeeds or shutdown; nothing
/// after it is handed meanwhile.
pub struct KafkaSubscriber {
    config: SubscriberConfig,
}

impl KafkaSubscriber {
    /// # Errors
    /// `Config` when the configuration is incomplete.
    pub fn new(config: SubscriberConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    pub fn config(&self) -> &SubscriberConfig {
        &self.config
    }

    fn with_place(&self, err: Error, partition: i32, offset: i64) -> Error {
        err.with("topic", &self.config.topic)
            .with("group", &self.config.group_id)
            .with("partition", partition)
            .with("offset", offset)
    }

    async fn consume(
        &self,
        consumer: &Arc<StreamConsumer>,
        sink: &dyn MessageSink,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<()> {
        loop {
            if *shutdown.borrow() {
                return Ok(());
            }
            let received = tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        // The sender is gone: nobody can ask us to stop any more, and
                        // nobody is waiting for us either.
                        return Ok(());
                    }
                    continue;
                }
                received = consumer.recv() => received.map(|m| self.take(&m)),
            };
            let (partition, offset, decoded) = match received {
                Ok(taken) => taken,
                Err(KafkaError::MessageConsumptionFatal(code)) => {
                    return Err(map_kafka_error(
                        "consume",
                        &KafkaError::MessageConsumptionFatal(code),
                    )
                    .with("topic", &self.config.topic)
                    .with("group", &self.config.group_id));
                }
                Err(e) if e.rdkafka_error_code().is_some_and(is_refusal_code) => {
                    // Retrying cannot help until an operator fixes the credentials or ACLs.
                    return Err(map_kafka_error("consume", &e)
                        .with("topic", &self.config.topic)
                        .with("group", &self.config.group_id));
                }
                Err(e) => {
                    warn!(topic = %self.config.topic, error = %e, "kafka consumer error; polling again");
                    if pause(CONSUMER_ERROR_PAUSE, shutdown).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            let message = decoded.map_err(|e| self.with_place(e, partition, offset))?;
            let delivery_id = format!("{}/{partition}/{offset}", self.config.topic);
            if !self
                .hand_over(sink, &delivery_id, message, shutdown)
                .await?
            {
                return Ok(());
            }
            if !self.commit(consumer, partition, offset, shutdown).await? {
                return Ok(());
            }
        }
    }

    /// Copies what outlives the borrowed message: its place and the decoded message.
    fn take(&self, message: &BorrowedMessage<'_>) -> (i32, i64, Result<FanoutMessage>) {
        let decoded = decode(message.headers(), message.payload().unwrap_or_default());
        (message.partition(), message.offset(), decoded)
    }

    /// Hands one message to the sink until it says `Ok` (true), shutdown (false), or a
    /// permanent error (Err).
    async fn hand_over(
        &self,
        sink: &dyn MessageSink,
        delivery_id: &str,
        message: FanoutMessage,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool> {
        let mut retries = RetryPolicy::forever(self.config.backoff()).start();
        loop {
            match sink.accept(delivery_id, vec![message.clone()]).await {
                Ok(()) => {
                    debug!(
                        delivery_id,
                        account = message.account.as_str(),
                        sequence = message.sequence,
                        "kafka message accepted"
                    );
                    return Ok(true);
                }
                Err(e) => {
                    let shown = e.to_string();
                    match retries.after(e) {
                        Ok(delay) => {
                            warn!(delivery_id, failures = retries.failures(), ?delay, error = %shown, "sink failed transiently; handing the message again");
                            if pause(delay, shutdown).await {
                                return Ok(false);
                            }
                        }
                        Err(e) => {
                            error!(delivery_id, error = %e, "sink failed permanently; stopping without acknowledging");
                            return Err(e
                                .with("delivery_id", delivery_id)
                                .with("account", message.account.as_str())
                                .with("sequence", message.sequence));
                        }
                    }
                }
            }
        }
    }

    /// Commits `offset + 1` of `partition` synchronously. True when committed (or when
    /// the partition moved to another member, which re-reads from the last committed
    /// offset), false on shutdown.
    async fn commit(
        &self,
        consumer: &Arc<StreamConsumer>,
        partition: i32,
        offset: i64,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<bool> {
        let mut retries = RetryPolicy::forever(self.config.backoff()).start();
        loop {
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(&self.config.topic, partition, Offset::Offset(offset + 1))
                .map_err(|e| self.with_place(map_kafka_error("commit", &e), partition, offset))?;
            let handle = Arc::clone(consumer);
            // A synchronous commit blocks its thread until the coordinator answers.
            let committing =
                tokio::task::spawn_blocking(move || handle.commit(&list, CommitMode::Sync));
            let outcome = match tokio::time::timeout(self.config.commit_timeout(), committing).await
            {
                Ok(Ok(result)) => {
                    result.map_err(|e| (e.rdkafka_error_code(), map_kafka_error("commit", &e)))
                }
                Ok(Err(join)) => {
                    return Err(self.with_place(
                        Error::new(
                            outbox_core::ErrorKind::Internal,
                            format!("kafka commit task failed: {join}"),
                        ),
                        partition,
                        offset,
                    ));
                }
                Err(_elapsed) => Err((
                    None,
                    Error::new(outbox_core::ErrorKind::Transport, "kafka commit timed out")
                        .transient(None),
                )),
            };
            match outcome {
                Ok(()) => {
                    debug!(topic = %self.config.topic, partition, offset, "kafka offset committed");
                    return Ok(true);
                }
                Err((Some(code), e)) if is_rebalance_code(code) => {
                    warn!(partition, offset, error = %e, "partition moved to another member before the commit; it will be re-delivered there");
                    return Ok(true);
                }
                Err((_, e)) => {
                    let shown = e.to_string();
                    let delay = retries
                        .after(e)
                        .map_err(|e| self.with_place(e, partition, offset))?;
                    warn!(partition, offset, failures = retries.failures(), error = %shown, "kafka commit failed; retrying");
                    if pause(delay, shutdown).await {
                        return Ok(false);
                    }
                }
            }
        }
    }
}

#[async_trait]
impl Subscriber for KafkaSubscriber {
    /// Joins the group, consumes until `shutdown` turns true (or its sender is
    /// dropped), then closes the consumer within `close_timeout`.
    ///
    /// # Errors
    /// A permanent `accept` error, a message whose headers cannot be decoded
    /// (`InvalidInput` naming the header), a permanent commit failure or a fatal
    /// consumer error. The message in question is not committed.
    ///
    /// Cancel safety: dropping the future closes the consumer on a background
    /// thread; the message in hand, if any, is not committed and comes again.
    async fn run(
        &self,
        sink: Arc<dyn MessageSink>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let consumer: StreamConsumer = self.config.client_config().create().map_err(|e| {
            map_kafka_error("create consumer", &e).with("brokers", &self.config.brokers)
        })?;
        let guard = ConsumerGuard(Some(Arc::new(consumer)));
        let Some(consumer) = guard.0.as_ref() else {
            unreachable!("the guard was just filled");
        };
        consumer
            .subscribe(&[self.config.topic.as_str()])
            .map_err(|e| map_kafka_error("subscribe", &e).with("topic", &self.config.topic))?;
        info!(topic = %self.config.topic, group = %self.config.group_id, "kafka subscriber started");
        let result = self.consume(consumer, sink.as_ref(), &mut shutdown).await;
        guard.close(self.config.close_timeout()).await;
        info!(topic = %self.config.topic, group = %self.config.group_id, ok = result.is_ok(), "kafka subscriber stopped");
        result
    }
}

impl fmt::Debug for KafkaSubscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSubscriber")
            .field("config", &self.config)
            .finish()
    }
}

/// Owns the consumer so that it is always dropped off the async threads.
///
/// Dropping a `StreamConsumer` leaves the group and waits for librdkafka to close;
/// that wait was seen to hang in rdkafka 0.39 (after `committed()`, which this crate
/// therefore never calls). The drop runs on a plain thread of its own: a hang there
/// costs a thread, never a runtime worker, and does not hold up runtime shutdown the
/// way a stuck `spawn_blocking` task would.
struct ConsumerGuard(Option<Arc<StreamConsumer>>);

impl ConsumerGuard {
    async fn close(mut self, timeout: Duration) {
        let Some(consumer) = self.0.take() else {
            return;
        };
        let (done, closed) = oneshot::channel();
        if let Err(e) = drop_on_thread(consumer, Some(done)) {
            error!(error = %e, "could not start a thread to close the kafka consumer");
            return;
        }
        if tokio::time::timeout(timeout, closed).await.is_err() {
            error!(
                ?timeout,
                "kafka consumer did not close in time; leaving it to a background thread"
            );
        }
    }
}

impl Drop for ConsumerGuard {
    fn drop(&mut self) {
        if let Some(consumer) = self.0.take()
            && let Err(e) = drop_on_thread(consumer, None)
        {
            error!(error = %e, "could not start a thread to close the kafka consumer");
        }
    }
}

fn drop_on_thread(
    consumer: Arc<StreamConsumer>,
    done: Option<oneshot::Sender<()>>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("kafka-consumer-close".into())
        .spawn(move || {
            drop(consumer);
            if let Some(done) = done {
                let _ = done.send(());
            }
        })
        .map(drop)
}

/// Sleeps for `delay` unless shutdown comes first (true).
async fn pause(delay: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(delay) => *shutdown.borrow(),
        changed = shutdown.changed() => changed.is_err() || *shutdown.borrow(),
    }
}

/// Rebuilds the fan-out message from a Kafka record's headers and payload.
fn decode(headers_in: Option<&BorrowedHeaders>, payload: &[u8]) -> Result<FanoutMessage> {
    if let Some(all) = headers_in {
        for header in all.iter() {
            if KNOWN_HEADERS.contains(&header.key)
                && let Some(value) = header.value
                && std::str::from_utf8(value).is_err()
            {
                return Err(Error::invalid(
                    format!("header {}", header.key),
                    "is not UTF-8",
                ));
            }
        }
    }
    headers::decode(
        |name| {
            // Kafka allows repeated keys; like Java's `lastHeader`, the last one wins.
            headers_in?
                .iter()
                .filter(|header| header.key == name)
                .last()
                .and_then(|header| header.value)
                .and_then(|value| std::str::from_utf8(value).ok())
        },
        payload.to_vec(),
    )
}
