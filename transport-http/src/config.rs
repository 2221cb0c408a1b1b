//! `ReceiverConfig`: where the webhook receiver listens and how it checks deliveries.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Webhook receiver settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `listen` | `127.0.0.1:8091` | address to bind |
/// | `secret` | — | the Formance webhook secret (its bytes are the HMAC key) |
/// | `tolerance` | 5 min | oldest (or furthest in the future) signature timestamp accepted |
/// | `max_body_bytes` | 1 MiB | larger deliveries get 413 |
#[derive(Clone)]
pub struct ReceiverConfig {
    pub listen: SocketAddr,
    pub secret: String,
    pub tolerance: Duration,
    pub max_body_bytes: usize,
}

impl ReceiverConfig {
    pub fn new(listen: SocketAddr, secret: impl Into<String>) -> Self {
        Self {
            listen,
            secret: secret.into(),
            tolerance: Duration::from_secs(300),
            max_body_bytes: 1 << 20,
        }
    }
}

impl fmt::Debug for ReceiverConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiverConfig")
            .field("listen", &self.listen)
            .field("secret", &"<redacted>")
            .field("tolerance", &self.tolerance)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}
