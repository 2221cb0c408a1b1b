//! Configuration of a dev ledger and the statistics it reports.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// How a dev ledger runs. `Default` is an in-memory ledger on an ephemeral
/// loopback port, without webhooks — what tests want.
#[derive(Debug, Clone)]
pub struct DevLedgerConfig {
    /// Where to listen; port 0 picks a free port (see [`crate::RunningDevLedger::addr`]).
    pub listen: SocketAddr,
    /// SQLite file holding the log and pending webhook deliveries; `None` keeps
    /// everything in memory and loses it at shutdown.
    pub data: Option<PathBuf>,
    /// Endpoints every event is delivered to.
    pub webhooks: Vec<WebhookTarget>,
    /// Retry schedule of webhook deliveries.
    pub webhook_backoff: WebhookBackoff,
    /// Most elements one `_bulk` call takes (the ledger's `--bulk-max-size`).
    pub bulk_max_size: usize,
    /// Ledgers created at start when they do not exist yet.
    pub create_ledgers: Vec<String>,
}

impl Default for DevLedgerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            data: None,
            webhooks: Vec::new(),
            webhook_backoff: WebhookBackoff::default(),
            bulk_max_size: DEFAULT_BULK_MAX_SIZE,
            create_ledgers: Vec::new(),
        }
    }
}

/// The real ledger's default `--bulk-max-size`.
pub const DEFAULT_BULK_MAX_SIZE: usize = 100;

/// One webhook endpoint and the secret its deliveries are signed with.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    pub url: String,
    /// Used as-is as the HMAC key (Formance does not base64-decode it).
    pub secret: String,
}

impl fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Exponential backoff of webhook retries: `min(initial · 2^n, max)`, at most
/// `max_attempts` attempts in all. A longer `Retry-After` from the receiver is
/// honoured up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookBackoff {
    pub initial: Duration,
    pub max: Duration,
    pub max_attempts: u32,
}

impl Default for WebhookBackoff {
    /// Short development defaults (the real service waits 1 min .. 1 h, 15 attempts).
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(2),
            max_attempts: 10,
        }
    }
}

impl WebhookBackoff {
    /// Delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// Counters of a running dev ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DevLedgerStats {
    /// Transactions committed, over all ledgers (reversals included, dry runs not).
    pub transactions: u64,
    /// Writes answered from an idempotency key since start.
    pub idempotency_hits: u64,
    /// Webhook deliveries acknowledged with a 2xx since start.
    pub webhooks_delivered: u64,
    /// Webhook deliveries waiting for (another) attempt.
    pub webhooks_pending: u64,
    /// Webhook deliveries given up (permanent 4xx or attempts exhausted) since start.
    pub webhooks_failed: u64,
    /// Webhook HTTP attempts made since start.
    pub webhook_attempts: u64,
    /// Answers replaced or delayed by the fault injector since start.
    pub faults_injected: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_secret() {
        let t = WebhookTarget {
            url: "http://127.0.0.1:1/hook".into(),
            secret: "s3cr3t".into(),
        };
        let text = format!("{t:?}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("127.0.0.1:1"), "{text}");
    }

    #[test]
    fn backoff_doubles_up_to_max() {
        let b = WebhookBackoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(300),
            max_attempts: 5,
        };
        let delays: Vec<u128> = (1..=5).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [50, 100, 200, 300, 300]);
    }
}
