//! `DispatchConfig`: how the relay dispatcher batches, parallelises and retries.

use std::time::Duration;

pub use crate::retry::Backoff;

/// Dispatcher settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `batch_size` | 500 | events read from the relay at a time |
/// | `bulk` | true | post heads of many accounts in one `_bulk` call |
/// | `max_bulk` | 100 | elements per bulk call (capped by the ledger's own limit) |
/// | `parallel_requests` | 8 | ledger requests in flight at once (accounts run in parallel) |
/// | `poll_interval` | 1 s | longest idle wait when no wake-up arrives |
/// | `backoff` | 100 ms … 10 s | retry delay for transient failures, full jitter |
/// | `max_attempts` | none | give up on an event after this many transient failures (drain mode) |
/// | `cursor_interval` | 200 ms | least time between cursor saves while busy (always saved when idle or stopping) |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchConfig {
    pub batch_size: usize,
    pub bulk: bool,
    pub max_bulk: usize,
    pub parallel_requests: usize,
    pub poll_interval: Duration,
    pub backoff: Backoff,
    pub max_attempts: Option<u32>,
    /// A cursor save per round would cost an fsync per round; after a crash a cursor
    /// that lags only means more events to look up (they have terminal records and are
    /// not re-sent).
    pub cursor_interval: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            batch_size: 500,
            bulk: true,
            max_bulk: 100,
            parallel_requests: 8,
            poll_interval: Duration::from_secs(1),
            backoff: Backoff::default(),
            max_attempts: None,
            cursor_interval: Duration::from_millis(200),
        }
    }
}
