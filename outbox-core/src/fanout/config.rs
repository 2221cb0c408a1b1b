//! `FanoutConfig` and `FanoutSummary`.

use std::time::Duration;

use crate::dispatch::Backoff;
use crate::domain::Account;
use crate::retry::RetryPolicy;

/// Fan-out loop settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `batch_size` | 1000 | messages read per window and most sent per round |
/// | `pipelined_batch_size` | 5000 | the same for a publisher that pipelines in order (Kafka) |
/// | `look_ahead` | 10 | windows read past a transiently failing account to find other accounts' work |
/// | `max_per_account` | 256 | messages of one account per round when the publisher pipelines in order |
/// | `rounds_in_flight` | 16 | rounds published at once when the publisher pipelines in order (1 otherwise) |
/// | `poll_interval` | 500 ms | idle wait when no wake-up comes |
/// | `backoff` | 100 ms … 10 s | retry delay after a transient failure (full jitter, `Retry-After` honoured) |
/// | `store_retry` | 20 retries, 20 ms … 2 s | transient failures a store call survives before the loop ends with the error |
#[derive(Debug, Clone)]
pub struct FanoutConfig {
    pub batch_size: usize,
    pub pipelined_batch_size: usize,
    pub look_ahead: usize,
    pub max_per_account: usize,
    pub rounds_in_flight: usize,
    pub poll_interval: Duration,
    pub backoff: Backoff,
    pub store_retry: RetryPolicy,
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
            store_retry: RetryPolicy::STORE,
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
    /// Permanent refusals; each was dead-lettered and parked its account.
    pub permanent_failures: u64,
    /// Later messages of parked accounts recorded behind their refusal.
    pub set_aside: u64,
    /// Dead-lettered messages re-published after a replay request (also in `published`).
    pub replayed: u64,
    /// Accounts parked behind a dead letter when the run ended.
    pub blocked: Vec<Account>,
}
