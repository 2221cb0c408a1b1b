//! `FanoutConfig` and `FanoutSummary`.

use std::time::Duration;

use crate::dispatch::Backoff;
use crate::domain::Account;

/// Fan-out loop settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `batch_size` | 1000 | messages read per window and most sent per round |
/// | `pipelined_batch_size` | 5000 | the same for a publisher that pipelines in order (Kafka) |
/// | `look_ahead` | 10 | windows read past a blocked account to find other accounts' work |
/// | `max_per_account` | 256 | messages of one account per round when the publisher pipelines in order |
/// | `rounds_in_flight` | 16 | rounds published at once when the publisher pipelines in order (1 otherwise) |
/// | `poll_interval` | 500 ms | idle wait when no wake-up comes |
/// | `backoff` | 100 ms … 10 s | retry delay after a transient failure (full jitter, `Retry-After` honoured) |
/// | `permanent_retry` | 60 s | retry delay of an account blocked by a permanent failure |
#[derive(Debug, Clone)]
pub struct FanoutConfig {
    pub batch_size: usize,
    pub pipelined_batch_size: usize,
    pub look_ahead: usize,
    pub max_per_account: usize,
    pub rounds_in_flight: usize,
    pub poll_interval: Duration,
    pub backoff: Backoff,
    pub permanent_retry: Duration,
}

impl Default for FanoutConfig {
    fn default() -> Self {
        Self {
            batch_size: 1000,
            pipelined_batch_size: 5000,
            look_ahead: 10,
            max_per_account: 256,
            rounds_in_flight: 16,
            poll_interval: Duration::from_millis(500),
            backoff: Backoff::default(),
            permanent_retry: Duration::from_secs(60),
        }
    }
}

/// What a fan-out run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FanoutSummary {
    /// Messages confirmed by the transport (a message re-sent after a failure counts once
    /// per confirmation).
    pub published: u64,
    /// Transient failures that were (or will be) retried.
    pub retried: u64,
    /// Permanent failures; each blocks its account until it succeeds.
    pub permanent_failures: u64,
    /// Accounts blocked by a permanent failure when the run ended.
    pub blocked: Vec<Account>,
}
