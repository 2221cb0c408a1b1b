//! `PublisherConfig` and `SubscriberConfig`: where the broker is, which topic and
//! group, and the timeouts that bound every wait.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use outbox_core::{Backoff, Error, ErrorKind, Result};
use rdkafka::ClientConfig;
use serde::Deserialize;

/// The broker list used when none is configured.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
/// The topic used when none is configured.
pub const DEFAULT_TOPIC: &str = "ledger-events";
/// The client id (and consumer group) used when none is configured.
pub const DEFAULT_CLIENT_ID: &str = "ledger-outbox";

/// Publisher settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `brokers` | `127.0.0.1:9092` | `bootstrap.servers`, comma separated |
/// | `topic` | `ledger-events` | the topic every message goes to (key = account) |
/// | `client_id` | `ledger-outbox` | `client.id`, shows up in broker logs |
/// | `message_timeout_ms` | 30000 | `message.timeout.ms`: how long a message may wait for its delivery report before it is reported as a transient failure |
/// | `queue_timeout_ms` | 5000 | how long `publish` waits for room when the local queue is full before reporting that message as transient |
/// | `librdkafka` | empty | extra librdkafka properties (TLS, SASL, …); they cannot turn off idempotence or `acks=all` |
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PublisherConfig {
    pub brokers: String,
    pub topic: String,
    pub client_id: String,
    pub message_timeout_ms: u64,
    pub queue_timeout_ms: u64,
    pub librdkafka: BTreeMap<String, String>,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            brokers: DEFAULT_BROKERS.to_owned(),
            topic: DEFAULT_TOPIC.to_owned(),
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            message_timeout_ms: 30_000,
            queue_timeout_ms: 5_000,
            librdkafka: BTreeMap::new(),
        }
    }
}

impl PublisherConfig {
    /// Defaults with `brokers` and `topic` set.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            topic: topic.into(),
            ..Self::default()
        }
    }

    #[must_use]
    pub fn with_message_timeout(mut self, timeout: Duration) -> Self {
        self.message_timeout_ms = millis(timeout);
        self
    }

    pub fn message_timeout(&self) -> Duration {
        Duration::from_millis(self.message_timeout_ms)
    }

    pub fn queue_timeout(&self) -> Duration {
        Duration::from_millis(self.queue_timeout_ms)
    }

    /// The destination's identity, which names its fan-out cursor:
    /// `kafka://<brokers>/<topic>`, brokers lower-cased, with librdkafka's default
    /// port 9092 made explicit, de-duplicated and sorted. Two clusters serving a topic
    /// of the same name are two destinations; one cluster written two ways is one.
    pub fn destination_name(&self) -> String {
        let mut brokers: Vec<String> = self
            .brokers
            .split(',')
            .map(|broker| broker.trim().to_ascii_lowercase())
            .filter(|broker| !broker.is_empty())
            .map(|broker| {
                if has_port(&broker) {
                    broker
                } else {
                    format!("{broker}:9092")
                }
            })
            .collect();
        brokers.sort();
        brokers.dedup();
        format!("kafka://{}/{}", brokers.join(","), self.topic)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        require("brokers", &self.brokers)?;
        require("topic", &self.topic)?;
        require("client_id", &self.client_id)?;
        if self.message_timeout_ms == 0 {
            return Err(config_error("message_timeout_ms", "must be above 0"));
        }
        Ok(())
    }

    /// The librdkafka properties of the producer. The ones that carry the delivery
    /// guarantee are set last so `librdkafka` cannot weaken them.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = base_config(&self.librdkafka, &self.brokers, &self.client_id);
        config
            .set("message.timeout.ms", self.message_timeout_ms.to_string())
            // Java clients hash keys with murmur2: the same account lands on the same
            // partition whichever client produced it.
            .set("partitioner", "murmur2_random")
            .set("enable.idempotence", "true")
            .set("acks", "all");
        config
    }
}

/// `host:port` or `[v6]:port`, not a bare host or `[v6]`.
fn has_port(broker: &str) -> bool {
    match broker.rfind(']') {
        Some(end) => broker[end..].contains(':'),
        None => broker.contains(':'),
    }
}

impl fmt::Debug for PublisherConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublisherConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("client_id", &self.client_id)
            .field("message_timeout_ms", &self.message_timeout_ms)
            .field("queue_timeout_ms", &self.queue_timeout_ms)
            .field("librdkafka", &Redacted(&self.librdkafka))
            .finish()
    }
}

/// Subscriber settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `brokers` | `127.0.0.1:9092` | `bootstrap.servers`, comma separated |
/// | `topic` | `ledger-events` | the topic to consume |
/// | `group_id` | `ledger-outbox` | `group.id`: the consumer group whose committed offsets say what was applied |
/// | `client_id` | `ledger-outbox` | `client.id` |
/// | `session_timeout_ms` | 45000 | `session.timeout.ms`: how long the group waits for a member that vanished without leaving |
/// | `retry_initial_ms` | 100 | first delay before re-handing a message whose `accept` failed transiently (or re-trying a commit) |
/// | `retry_max_ms` | 10000 | ceiling of that delay (it doubles up to here, with full jitter) |
/// | `commit_timeout_ms` | 30000 | longest wait for one synchronous offset commit before it is retried |
/// | `close_timeout_ms` | 10000 | longest wait for the consumer to close when `run` returns; past it, `run` returns anyway and logs |
/// | `librdkafka` | empty | extra librdkafka properties; they cannot turn auto commit back on |
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriberConfig {
    pub brokers: String,
    pub topic: String,
    pub group_id: String,
    pub client_id: String,
    pub session_timeout_ms: u64,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub commit_timeout_ms: u64,
    pub close_timeout_ms: u64,
    pub librdkafka: BTreeMap<String, String>,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        Self {
            brokers: DEFAULT_BROKERS.to_owned(),
            topic: DEFAULT_TOPIC.to_owned(),
            group_id: DEFAULT_CLIENT_ID.to_owned(),
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            session_timeout_ms: 45_000,
            retry_initial_ms: 100,
            retry_max_ms: 10_000,
            commit_timeout_ms: 30_000,
            close_timeout_ms: 10_000,
            librdkafka: BTreeMap::new(),
        }
    }
}

impl SubscriberConfig {
    /// Defaults with `brokers`, `topic` and `group_id` set.
    pub fn new(
        brokers: impl Into<String>,
        topic: impl Into<String>,
        group_id: impl Into<String>,
    ) -> Self {
        Self {
            brokers: brokers.into(),
            topic: topic.into(),
            group_id: group_id.into(),
            ..Self::default()
        }
    }

    pub fn backoff(&self) -> Backoff {
        Backoff {
            initial: Duration::from_millis(self.retry_initial_ms.max(1)),
            max: Duration::from_millis(self.retry_max_ms.max(self.retry_initial_ms).max(1)),
        }
    }

    pub fn commit_timeout(&self) -> Duration {
        Duration::from_millis(self.commit_timeout_ms.max(1))
    }

    pub fn close_timeout(&self) -> Duration {
        Duration::from_millis(self.close_timeout_ms)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        require("brokers", &self.brokers)?;
        require("topic", &self.topic)?;
        require("group_id", &self.group_id)?;
        require("client_id", &self.client_id)?;
        Ok(())
    }

    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = base_config(&self.librdkafka, &self.brokers, &self.client_id);
        config
            .set("group.id", &self.group_id)
            .set("session.timeout.ms", self.session_timeout_ms.to_string())
            // Offsets move only after the sink said Ok; librdkafka must never commit
            // (or store) one on its own.
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest");
        config
    }
}

impl fmt::Debug for SubscriberConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriberConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("group_id", &self.group_id)
            .field("client_id", &self.client_id)
            .field("session_timeout_ms", &self.session_timeout_ms)
            .field("retry_initial_ms", &self.retry_initial_ms)
            .field("retry_max_ms", &self.retry_max_ms)
            .field("commit_timeout_ms", &self.commit_timeout_ms)
            .field("close_timeout_ms", &self.close_timeout_ms)
            .field("librdkafka", &Redacted(&self.librdkafka))
            .finish()
    }
}

/// The caller's extra properties first, then the connection ones, so what the caller
/// set cannot override what follows (each config sets its guarantees last).
fn base_config(extra: &BTreeMap<String, String>, brokers: &str, client_id: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in extra {
        config.set(key, value);
    }
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", client_id);
    config
}

/// Shows librdkafka keys but hides values that may be credentials.
struct Redacted<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (key, value) in self.0 {
            let secret = ["password", "secret", "key", "token", "jaas"]
                .iter()
                .any(|word| key.to_ascii_lowercase().contains(word));
            if secret {
                map.entry(key, &"<redacted>");
            } else {
                map.entry(key, value);
            }
        }
        map.finish()
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn require(field: &'static str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        Err(config_error(field, "must not be empty"))
    } else {
        Ok(())
    }
}

fn config_error(field: &'static str, message: &str) -> Error {
    Error::new(ErrorKind::Config, format!("kafka {field} {message}")).with("field", field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarantees_cannot_be_overridden() {
        let mut publisher = PublisherConfig::new("127.0.0.1:1", "t");
        publisher
            .librdkafka
            .insert("enable.idempotence".into(), "false".into());
        publisher.librdkafka.insert("acks".into(), "1".into());
        let config = publisher.client_config();
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("acks"), Some("all"));

        let mut subscriber = SubscriberConfig::new("127.0.0.1:1", "t", "g");
        subscriber
            .librdkafka
            .insert("enable.auto.commit".into(), "true".into());
        let config = subscriber.client_config();
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        assert_eq!(config.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(config.get("group.id"), Some("g"));
    }

    #[test]
    fn debug_hides_credentials() {
        let mut publisher = PublisherConfig::default();
        publisher
            .librdkafka
            .insert("sasl.password".into(), "hunter2".into());
        publisher
            .librdkafka
            .insert("security.protocol".into(), "SASL_SSL".into());
        let text = format!("{publisher:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("SASL_SSL"), "{text}");
    }

    #[test]
    fn empty_fields_are_config_errors() {
        let err = PublisherConfig::new("", "t").validate().unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Config);
        assert_eq!(err.context("field"), Some("brokers"));
        let err = SubscriberConfig::new("b", "t", " ").validate().unwrap_err();
        assert_eq!(err.context("field"), Some("group_id"));
    }
}
