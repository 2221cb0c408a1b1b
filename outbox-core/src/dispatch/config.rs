//! `DispatchConfig`: how the relay dispatcher batches, parallelises and retries.

use std::time::Duration;

pub use crate::retry::Backoff;

/// Dispatcher settings.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `batch_size` | 500 | events read from the relay at a time |
/// | `bulk` | true | post heads of many accounts in one `_bulk` call, and an account's consecutive posts as one ordered run (docs/ARCHITECTURE.md#hot-accounts) |
/// | `max_bulk` | 100 | elements per bulk call (capped by the ledger's own limit) |
/// | `parallel_requests` | 8 | ledger requests in flight at once (accounts run in parallel) |
/// | `poll_interval` | 1 s | longest idle wait when no wake-up arrives |
/// | `backoff` | 100 ms … 10 s | retry delay for transient failures, full jitter |
/// | `max_attempts` | none | give up on an event after this many transient failures (drain mode) |
/// | `cursor_interval` | 200 ms | least time between cursor saves while busy (always saved when idle or stopping) |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchConfig {
    /// Events read from the relay at a time; the dispatcher reads more only while
    /// fewer than this many are active.
    pub batch_size: usize,
    /// Whether the heads of several accounts go out in one `_bulk` call (each with its
    /// own idempotency key) when the ledger supports it, and an account's consecutive
    /// posts in one ordered run when the ledger has `ordered_runs`.
    pub bulk: bool,
    /// Most elements per bulk call, capped by [`crate::LedgerCapabilities::max_bulk`];
    /// 1 or less sends one post per event.
    pub max_bulk: usize,
    /// Ledger requests in flight at once (at least 1). One account still has at most
    /// one event in flight: parallelism is across accounts.
    pub parallel_requests: usize,
    /// The longest wait for new events when no wake-up arrives.
    pub poll_interval: Duration,
    /// Delay before retrying an account's head after a transient failure (full jitter;
    /// a longer `Retry-After` wins).
    pub backoff: Backoff,
    /// `None`: transient failures are retried for ever. `Some(n)`: after `n` failures
    /// of one event its account is stopped with a `Stopped` exception, so a drain
    /// ends (`outbox relay --once` uses 30 unless told otherwise).
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
