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
    /// Messages read from the store per window, and most sent per round, for a
    /// publisher that does not pipeline (HTTP, AMQP).
    pub batch_size: usize,
    /// The same for a publisher that keeps order in a pipeline
    /// ([`crate::PublisherCapabilities::ordered_pipeline`]: Kafka), whose producer
    /// needs bigger rounds to batch.
    pub pipelined_batch_size: usize,
    /// How many windows the loop keeps in memory past a transiently failing account's
    /// message so other accounts keep flowing: the buffer holds at most a window times
    /// the larger of this and `rounds_in_flight + 1`.
    pub look_ahead: usize,
    /// Most messages of one account in a round when the publisher pipelines in order;
    /// otherwise one.
    pub max_per_account: usize,
    /// Rounds awaiting their confirmations at once when the publisher pipelines in
    /// order; otherwise one.
    pub rounds_in_flight: usize,
    /// The longest idle wait when no wake-up comes.
    pub poll_interval: Duration,
    /// Delay before retrying an account after a transient publish failure (full
    /// jitter; a longer `Retry-After` wins).
    pub backoff: Backoff,
    /// How store calls retry transient errors; once spent, the loop ends with the
    /// error.
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
