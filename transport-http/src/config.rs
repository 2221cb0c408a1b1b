//! Settings of the three HTTP roles: the webhook receiver / intake
//! ([`ReceiverConfig`]), the fan-out publisher ([`PublisherConfig`]) and the consumer's
//! receiver ([`SubscriberConfig`]). Each `Debug` hides the secrets.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Webhook receiver settings. How a delivery is verified and read (secrets,
/// timestamp tolerance) is the ledger adapter's [`outbox_core::fanout::WebhookDecoder`],
/// given beside this.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `listen` | — | address to bind (`127.0.0.1:0` picks a port) |
/// | `max_body_bytes` | 1 MiB | larger deliveries get 413, before the decoder runs |
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
}

impl ReceiverConfig {
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            max_body_bytes: 1 << 20,
        }
    }
}

/// Fan-out publisher settings: one subscriber endpoint.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `endpoint` | — | the subscriber's URL (`http://host:8092/hop2/messages`); credentials in it are never logged |
/// | `secret` | — | OUR signing secret, shared with the subscriber (its bytes are the HMAC key) |
/// | `timeout` | 30 s | whole-request timeout per message |
/// | `connect_timeout` | 5 s | TCP connect timeout |
#[derive(Clone)]
pub struct PublisherConfig {
    pub endpoint: String,
    pub secret: String,
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

impl PublisherConfig {
    pub fn new(endpoint: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            secret: secret.into(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The destination's identity, which names the publisher's fan-out cursor: the
    /// endpoint without credentials, query or fragment (scheme, host, port, path;
    /// host lower-cased, default port dropped).
    ///
    /// # Errors
    /// `Config` naming `endpoint` when it is not an http(s) URL.
    pub fn destination_name(&self) -> outbox_core::Result<String> {
        crate::publisher::endpoint(&self.endpoint).map(|url| crate::publisher::redact_url(&url))
    }
}

impl fmt::Debug for PublisherConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The endpoint may embed credentials: only its redacted form is shown.
        f.debug_struct("PublisherConfig")
            .field("endpoint", &crate::publisher::redact(&self.endpoint))
            .field("secret", &"<redacted>")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// Consumer-side receiver settings ([`crate::HttpSubscriber`]).
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `listen` | — | address to bind (`127.0.0.1:0` picks a port; see `local_addr`) |
/// | `secret` | — | the publisher's signing secret (its bytes are the HMAC key) |
/// | `tolerance` | 5 min | oldest (or furthest in the future) signature timestamp accepted |
/// | `max_body_bytes` | 1 MiB | larger messages get 413 |
#[derive(Clone)]
pub struct SubscriberConfig {
    pub listen: SocketAddr,
    pub secret: String,
    pub tolerance: Duration,
    pub max_body_bytes: usize,
}

impl SubscriberConfig {
    pub fn new(listen: SocketAddr, secret: impl Into<String>) -> Self {
        Self {
            listen,
            secret: secret.into(),
            tolerance: crate::signing::DEFAULT_TOLERANCE,
            max_body_bytes: 1 << 20,
        }
    }
}

impl fmt::Debug for SubscriberConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubscriberConfig")
            .field("listen", &self.listen)
            .field("secret", &"<redacted>")
            .field("tolerance", &self.tolerance)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}
