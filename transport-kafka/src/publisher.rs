//! `KafkaPublisher`: the fan-out loop's Kafka sink (idempotent producer, key = account,
//! identity in headers, `Ok` only after the delivery report).

use std::collections::HashSet;
use std::fmt;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_core::fanout::headers;
use outbox_core::{Error, ErrorKind, FanoutMessage, Publisher, PublisherCapabilities, Result};
use rdkafka::client::Client;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tracing::{debug, error, warn};

use crate::config::PublisherConfig;
use crate::error::{map_code, map_kafka_error};

/// How long `publish` sleeps before offering a message to a full queue again.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(50);
/// Slack on top of `message.timeout.ms` before `publish` stops waiting for a report
/// librdkafka promised (it always reports; this only bounds a bug).
const REPORT_SLACK: Duration = Duration::from_secs(10);

/// Publishes fan-out messages to one Kafka topic.
///
/// Every message goes to the configured topic with the account as key (one account,
/// one partition, one order), the identity headers of
/// [`outbox_core::fanout::headers`] and the payload bytes unchanged. The producer is
/// idempotent with `acks=all`, so retries inside librdkafka neither duplicate nor
/// reorder a partition. After a fatal idempotence error the producer is re-created
/// and the affected messages are reported transient, so the loop re-sends them.
pub struct KafkaPublisher {
    name: String,
    config: PublisherConfig,
    producer: RwLock<FutureProducer>,
}

impl KafkaPublisher {
    /// Creates the producer; it connects lazily, so an unreachable broker shows up as
    /// transient delivery failures, not here.
    ///
    /// # Errors
    /// `Config` when the configuration is incomplete or librdkafka rejects it.
    pub fn new(config: PublisherConfig) -> Result<Self> {
        config.validate()?;
        let producer = create_producer(&config)?;
        Ok(Self {
            name: config.destination_name(),
            config,
            producer: RwLock::new(producer),
        })
    }

    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    fn producer(&self) -> FutureProducer {
        match self.producer.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces `used` with a fresh producer (unless another call already did).
    ///
    /// Done after a fatal error, and after any delivery that failed transiently: a
    /// broker that lost its state (a restart without its log) can keep answering the
    /// old producer id with `UNKNOWN_PRODUCER_ID` while librdkafka keeps bumping its
    /// epoch, so messages would time out forever. A fresh producer asks for a new id;
    /// nothing is lost, since every unconfirmed message was reported `Err` and is
    /// re-sent by the loop.
    fn replace(&self, used: FutureProducer, why: &str) {
        match create_producer(&self.config) {
            Ok(fresh) => {
                let mut guard = match self.producer.write() {
                    Ok(guard) => guard,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if same_client(guard.client(), used.client()) {
                    warn!(topic = %self.config.topic, why, "re-creating the kafka producer");
                    let old = std::mem::replace(&mut *guard, fresh);
                    drop(guard);
                    drop_off_runtime(old);
                } else {
                    drop(guard);
                    drop_off_runtime(fresh);
                }
            }
            Err(e) => error!(error = %e, "could not re-create the kafka producer"),
        }
        drop_off_runtime(used);
    }

    fn context(&self, err: Error, message: &FanoutMessage) -> Error {
        err.with("topic", &self.config.topic)
            .with("account", message.account.as_str())
            .with("sequence", message.sequence)
            .with("instruction_id", &message.instruction_id)
    }

    /// Offers one message to librdkafka's queue, waiting up to `queue_timeout` for
    /// room. Returns the delivery report future.
    async fn enqueue(
        &self,
        producer: &FutureProducer,
        message: &FanoutMessage,
    ) -> Result<DeliveryFuture> {
        let mut owned = OwnedHeaders::new_with_capacity(8);
        for (name, value) in headers::encode(message) {
            owned = owned.insert(Header {
                key: name,
                value: Some(value.as_str()),
            });
        }
        let mut record = FutureRecord::to(&self.config.topic)
            .key(message.account.as_str())
            .payload(message.payload.as_slice())
            .headers(owned);
        let started = Instant::now();
        loop {
            match producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if started.elapsed() < self.config.queue_timeout() =>
                {
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                }
                Err((e, _)) => return Err(map_kafka_error("enqueue", &e)),
            }
        }
    }
}

#[async_trait]
impl Publisher for KafkaPublisher {
    fn name(&self) -> &str {
        &self.name
    }

    /// The idempotent producer keeps each partition's order across its own retries
    /// and fails a partition's later messages after an earlier one timed out.
    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::new(true)
    }

    /// Enqueues every message, then awaits every delivery report.
    ///
    /// A message whose enqueue failed makes the later messages of its account fail
    /// too (transient, not sent), so a retry can never land them out of order.
    ///
    /// Cancel safety: dropping the future leaves enqueued messages to be delivered
    /// in the background without anyone hearing of it; the loop re-sends them.
    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        let producer = self.producer();
        let mut pending: Vec<Result<DeliveryFuture>> = Vec::with_capacity(messages.len());
        let mut blocked: HashSet<&str> = HashSet::new();
        for message in messages {
            let account = message.account.as_str();
            if blocked.contains(account) {
                let err = Error::new(
                    ErrorKind::Transport,
                    "kafka: not sent, an earlier message of this account failed",
                )
                .transient(None);
                pending.push(Err(self.context(err, message)));
                continue;
            }
            match self.enqueue(&producer, message).await {
                Ok(delivery) => pending.push(Ok(delivery)),
                Err(err) => {
                    blocked.insert(account);
                    pending.push(Err(self.context(err, message)));
                }
            }
        }

        let patience = self.config.message_timeout() + REPORT_SLACK;
        let mut results = Vec::with_capacity(messages.len());
        let mut delivery_failed = false;
        for (message, entry) in messages.iter().zip(pending) {
            let enqueued = entry.is_ok();
            let outcome =
                match entry {
                    Err(err) => Err(err),
                    Ok(delivery) => match tokio::time::timeout(patience, delivery).await {
                        Ok(Ok(Ok(report))) => {
                            debug!(
                                topic = %self.config.topic,
                                account = message.account.as_str(),
                                sequence = message.sequence,
                                partition = report.partition,
                                offset = report.offset,
                                "kafka delivery confirmed"
                            );
                            Ok(())
                        }
                        Ok(Ok(Err((e, _)))) => {
                            Err(self.context(map_kafka_error("deliver", &e), message))
                        }
                        Ok(Err(_canceled)) => Err(self
                            .context(map_kafka_error("deliver", &KafkaError::Canceled), message)),
                        Err(_elapsed) => Err(self.context(
                            map_code("deliver (no report)", RDKafkaErrorCode::MessageTimedOut),
                            message,
                        )),
                    },
                };
            if let Err(err) = &outcome {
                warn!(error = %err, "kafka publish failed");
                delivery_failed |= enqueued && err.is_transient();
            }
            results.push(outcome);
        }
        if let Some((code, reason)) = producer.client().fatal_error() {
            error!(topic = %self.config.topic, ?code, %reason, "kafka producer hit a fatal error");
            self.replace(producer, "fatal error");
        } else if delivery_failed {
            self.replace(producer, "a delivery failed transiently");
        }
        results
    }
}

impl fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaPublisher")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn create_producer(config: &PublisherConfig) -> Result<FutureProducer> {
    config
        .client_config()
        .create()
        .map_err(|e| map_kafka_error("create producer", &e).with("brokers", &config.brokers))
}

/// Drops a producer handle on a plain thread: dropping the last handle purges and
/// flushes (up to 500 ms) and joins librdkafka's threads, which must not stall a
/// runtime worker.
fn drop_off_runtime(producer: FutureProducer) {
    let spawned = std::thread::Builder::new()
        .name("kafka-producer-close".into())
        .spawn(move || drop(producer));
    if let Err(e) = spawned {
        error!(error = %e, "could not start a thread to close a kafka producer");
    }
}

fn same_client<A: rdkafka::ClientContext, B: rdkafka::ClientContext>(
    a: &Client<A>,
    b: &Client<B>,
) -> bool {
    std::ptr::eq(a.native_ptr().cast::<u8>(), b.native_ptr().cast::<u8>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(brokers: &str, topic: &str) -> String {
        KafkaPublisher::new(PublisherConfig::new(brokers, topic))
            .unwrap()
            .name()
            .to_owned()
    }

    #[test]
    fn the_name_is_the_cluster_and_the_topic_with_brokers_sorted() {
        let name_of_a = name("127.0.0.2:9092, 127.0.0.1:9092", "ledger-events");
        assert_eq!(
            name_of_a,
            "kafka://127.0.0.1:9092,127.0.0.2:9092/ledger-events"
        );
        // The same cluster written another way is the same destination.
        assert_eq!(
            name("127.0.0.1,127.0.0.2:9092,127.0.0.1:9092", "ledger-events"),
            name_of_a
        );
        assert_eq!(name("LOCALHOST:9092", "t"), "kafka://localhost:9092/t");
        // Another cluster with the same topic has a cursor of its own.
        assert_ne!(name("127.0.0.3:9092", "ledger-events"), name_of_a);
        assert_ne!(name("127.0.0.1:9093", "ledger-events"), name_of_a);
        assert_ne!(name("127.0.0.1:9092", "ledger-events"), name_of_a);
        assert_ne!(name("127.0.0.1:9092,127.0.0.2:9092", "other"), name_of_a);
        assert_eq!(name("[::1]:9092,[::1]", "t"), "kafka://[::1]:9092/t");
    }
}
