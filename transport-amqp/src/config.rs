//! `AmqpConfig`: where the broker is, how the topology is named and sized, and the
//! timeouts and backoff of both sides.

use std::fmt;
use std::time::Duration;

use outbox_core::{Backoff, Result, RetryPolicy};
use serde::Deserialize;

use crate::error;

/// Configuration shared by [`AmqpPublisher`](crate::AmqpPublisher) and
/// [`AmqpSubscriber`](crate::AmqpSubscriber); both sides must agree on `exchange`
/// and `queue_count`, or accounts land on queues nobody consumes in order.
///
/// `Debug` hides the password of `uri`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmqpConfig {
    /// Broker address, `amqp://user:password@host:port/vhost` (`%2f` is the `/` vhost).
    pub uri: String,
    /// The durable direct exchange; queues are named `<exchange>.<i>`.
    pub exchange: String,
    /// How many queues (`N`) accounts are spread over. Changing it re-routes accounts:
    /// drain the queues first.
    pub queue_count: u16,
    /// Unacknowledged deliveries the broker may push per queue (`basic.qos`).
    pub prefetch: u16,
    /// Consumer tags are `<prefix>.<i>.<random>` (visible in the management UI).
    pub consumer_tag_prefix: String,
    /// Declare the exchange, queues and bindings on every (re)connect. Turn off when
    /// an operator owns the topology (definitions file) and the user may not declare.
    pub declare_topology: bool,
    /// Bound of one connection attempt (TCP + AMQP handshake + setup), milliseconds.
    pub connect_timeout_ms: u64,
    /// How long a publish waits for its broker confirm, milliseconds; past it the
    /// message is reported as a transient error (it may still arrive: at least once).
    pub confirm_timeout_ms: u64,
    /// First delay of the subscriber's reconnect and accept-retry backoff, milliseconds.
    pub backoff_initial_ms: u64,
    /// Cap of that backoff, milliseconds.
    pub backoff_max_ms: u64,
}

/// The default broker address (RabbitMQ's local guest account).
pub const DEFAULT_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

impl Default for AmqpConfig {
    fn default() -> Self {
        Self {
            uri: DEFAULT_URI.to_owned(),
            exchange: "ledger-events".to_owned(),
            queue_count: 8,
            prefetch: 32,
            consumer_tag_prefix: "ledger-outbox".to_owned(),
            declare_topology: true,
            connect_timeout_ms: 5_000,
            confirm_timeout_ms: 30_000,
            backoff_initial_ms: 200,
            backoff_max_ms: 10_000,
        }
    }
}

impl AmqpConfig {
    /// The defaults with another broker address and exchange.
    pub fn new(uri: impl Into<String>, exchange: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            exchange: exchange.into(),
            ..Self::default()
        }
    }

    /// Checks what the broker would otherwise reject later, less clearly.
    ///
    /// # Errors
    /// `Config` naming the field: empty or too long exchange (AMQP short strings
    /// are at most 255 bytes, and `<exchange>.<i>` must fit), zero queues, zero
    /// prefetch, zero timeouts, an unparsable `uri`.
    pub fn validate(&self) -> Result<()> {
        if self.queue_count == 0 {
            return Err(error::config("queue_count", "must be at least 1"));
        }
        if self.exchange.is_empty() {
            return Err(error::config("exchange", "must not be empty"));
        }
        let last_index = self.queue_count - 1;
        let longest_queue = self.exchange.len() + 1 + last_index.to_string().len();
        if longest_queue > 255 {
            return Err(error::config(
                "exchange",
                "too long: queue names `<exchange>.<i>` must fit in 255 bytes",
            ));
        }
        if self.prefetch == 0 {
            return Err(error::config(
                "prefetch",
                "must be at least 1 (0 means unlimited in AMQP)",
            ));
        }
        if self.consumer_tag_prefix.len() > 200 {
            return Err(error::config(
                "consumer_tag_prefix",
                "too long (at most 200 bytes)",
            ));
        }
        for (field, value) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("confirm_timeout_ms", self.confirm_timeout_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("backoff_max_ms", self.backoff_max_ms),
        ] {
            if value == 0 {
                return Err(error::config(field, "must be positive"));
            }
        }
        self.uri
            .parse::<lapin::uri::AMQPUri>()
            .map_err(|e| error::config("uri", format!("not an AMQP URI: {e}")))?;
        Ok(())
    }

    /// The destination's identity, which names the publisher's fan-out cursor:
    /// `amqp(s)://<host>:<port>/<vhost>?exchange=<exchange>`, host lower-cased, the
    /// scheme's default port made explicit, vhost and exchange percent-encoded, no
    /// credentials or tuning parameters. A path-less URI is the default vhost `/`, as
    /// the AMQP URI spec (and lapin) read it.
    ///
    /// # Errors
    /// `Config` naming `uri` when it is not an AMQP URI.
    pub fn destination_name(&self) -> Result<String> {
        let url = url::Url::parse(&self.uri)
            .ok()
            .filter(|u| matches!(u.scheme(), "amqp" | "amqps") && !u.cannot_be_a_base())
            .ok_or_else(|| error::config("uri", "not an amqp:// or amqps:// URI"))?;
        let default_port = if url.scheme() == "amqps" { 5671 } else { 5672 };
        let host = url.host_str().unwrap_or("localhost").to_ascii_lowercase();
        let vhost = url
            .path()
            .get(1..)
            .map_or_else(|| "/".to_owned(), percent_decode);
        let encode =
            |text: &str| url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        Ok(format!(
            "{}://{host}:{}/{}?exchange={}",
            url.scheme(),
            url.port().unwrap_or(default_port),
            encode(&vhost),
            encode(&self.exchange)
        ))
    }

    /// Opens a connection named `ledger-outbox <role> <exchange>` in the management
    /// UI (no bound here: callers bound the whole setup).
    pub(crate) async fn connect(&self, role: &str) -> Result<lapin::Connection> {
        let properties = lapin::ConnectionProperties::default()
            .with_connection_name(format!("ledger-outbox {role} {}", self.exchange).into());
        lapin::Connection::connect(&self.uri, properties)
            .await
            .map_err(|e| error::lapin(&e, "connect").with("uri", self.redacted_uri()))
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub(crate) fn confirm_timeout(&self) -> Duration {
        Duration::from_millis(self.confirm_timeout_ms)
    }

    /// How a lost connection and a sink's transient refusal are retried: for ever,
    /// `backoff_initial_ms` doubling up to `backoff_max_ms` with full jitter, so a
    /// fleet of consumers does not reconnect in lockstep (`outbox_core::retry`).
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::forever(Backoff {
            initial: Duration::from_millis(self.backoff_initial_ms),
            max: Duration::from_millis(self.backoff_max_ms),
        })
    }

    /// `uri` with its password replaced, for logs and `Debug`.
    pub fn redacted_uri(&self) -> String {
        redact(&self.uri)
    }
}

fn redact(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut url) if url.password().is_some() => {
            // Cannot fail: the URL has a password, so it has a host.
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        Ok(_) => uri.to_owned(),
        Err(_) => "<unparsable uri>".to_owned(),
    }
}

/// `%XX` escapes decoded (a `+` stays a `+`: this is a path, not a form).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Debug for AmqpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpConfig")
            .field("uri", &self.redacted_uri())
            .field("exchange", &self.exchange)
            .field("queue_count", &self.queue_count)
            .field("prefetch", &self.prefetch)
            .field("consumer_tag_prefix", &self.consumer_tag_prefix)
            .field("declare_topology", &self.declare_topology)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("confirm_timeout_ms", &self.confirm_timeout_ms)
            .field("backoff_initial_ms", &self.backoff_initial_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Error, ErrorKind};

    #[test]
    fn defaults_are_valid_and_documented() {
        let c = AmqpConfig::default();
        assert_eq!(c.uri, "amqp://guest:guest@127.0.0.1:5672/%2f");
        assert_eq!(c.queue_count, 8);
        c.validate().unwrap();
    }

    #[test]
    fn debug_hides_the_password() {
        let c = AmqpConfig::new("amqp://app:s3cret@broker:5672/%2f", "ledger-events");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("app:***@broker"), "{shown}");
    }

    #[test]
    fn invalid_fields_are_named() {
        let field = |c: AmqpConfig| {
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), &ErrorKind::Config);
            e.context("field").unwrap().to_owned()
        };
        let base = AmqpConfig::default;
        assert_eq!(
            field(AmqpConfig {
                queue_count: 0,
                ..base()
            }),
            "queue_count"
        );
        assert_eq!(
            field(AmqpConfig {
                exchange: String::new(),
                ..base()
            }),
            "exchange"
        );
        assert_eq!(
            field(AmqpConfig {
                exchange: "x".repeat(254),
                ..base()
            }),
            "exchange"
        );
        assert_eq!(
            field(AmqpConfig {
                prefetch: 0,
                ..base()
            }),
            "prefetch"
        );
        assert_eq!(
            field(AmqpConfig {
                uri: "http://nope".into(),
                ..base()
            }),
            "uri"
        );
    }

    #[test]
    fn reconnects_are_retried_for_ever_within_the_configured_bounds() {
        let c = AmqpConfig {
            backoff_initial_ms: 100,
            backoff_max_ms: 1_000,
            ..AmqpConfig::default()
        };
        let policy = c.retry_policy();
        assert_eq!(policy.max_retries, None);
        let lost = Error::new(ErrorKind::Transport, "connection reset").transient(None);
        let mut retries = policy.start();
        for attempt in 1..40 {
            let d = retries.after(lost.clone()).expect("retried for ever");
            assert!(d <= Duration::from_millis(1_000), "{attempt}: {d:?}");
        }
    }

    #[test]
    fn deserializes_with_defaults_and_rejects_unknown_fields() {
        // serde_json is not a dependency; use serde's value deserializer.
        use serde::de::IntoDeserializer;
        use serde::de::value::{Error as DeError, MapDeserializer};
        let map = MapDeserializer::<_, DeError>::new(
            [("exchange", "payouts-events")]
                .into_iter()
                .map(|(k, v)| (k, v.into_deserializer())),
        );
        let c = AmqpConfig::deserialize(map).unwrap();
        assert_eq!(c.exchange, "payouts-events");
        assert_eq!(c.queue_count, 8);
        let map = MapDeserializer::<_, DeError>::new(
            [("exchnage", "typo")]
                .into_iter()
                .map(|(k, v)| (k, v.into_deserializer())),
        );
        assert!(AmqpConfig::deserialize(map).is_err());
    }
}
