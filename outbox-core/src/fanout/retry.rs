//! Store calls of the fan-out loop, retried on transient errors.

use std::future::Future;

use crate::dispatch::Backoff;
use crate::error::Result;

/// How many transient failures a store call of the loop survives, and how long it
/// waits between tries.
#[derive(Debug, Clone, Copy)]
pub struct StoreRetry {
    pub attempts: u32,
    pub backoff: Backoff,
}

impl Default for StoreRetry {
    /// The relay dispatcher's budget: 20 retries, 20 ms doubling up to 2 s (full
    /// jitter), so a store that fails over or restarts within about half a minute
    /// costs nothing but time.
    fn default() -> Self {
        Self {
            attempts: 20,
            backoff: Backoff {
                initial: std::time::Duration::from_millis(20),
                max: std::time::Duration::from_secs(2),
            },
        }
    }
}

impl StoreRetry {
    /// Runs `call` until it succeeds, fails permanently, or has failed transiently
    /// `attempts + 1` times; the error names the call (`what`).
    pub(super) async fn run<T, F, Fut>(&self, what: &'static str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut failures = 0;
        loop {
            match call().await {
                Ok(value) => return Ok(value),
                Err(e) if e.is_transient() && failures < self.attempts => {
                    failures += 1;
                    tracing::warn!(call = what, failures, error = %e, "fan-out store call failed; retrying");
                    tokio::time::sleep(self.backoff.delay(failures, None)).await;
                }
                Err(e) if e.is_transient() => {
                    return Err(e.exhausted().with("fanout_store_call", what));
                }
                Err(e) => return Err(e.with("fanout_store_call", what)),
            }
        }
    }
}
