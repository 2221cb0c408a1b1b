//! One rule for retrying a transient failure, used by every loop that retries: the
//! relay dispatcher (its store calls and its ledger posts), the fan-out loop (its store
//! calls), the transports' subscribers (their sinks, commits and reconnects), the
//! Postgres wake-up listener and `outbox enqueue`.
//!
//! Exponential backoff with full jitter — the n-th retry waits a uniformly random time
//! in `[0, min(max, initial · 2^(n-1))]`, so many clients that failed together do not
//! come back together — or the other side's `Retry-After` when that is longer; a bound
//! on the number of retries, or none. Only [`crate::Retry::Transient`] errors are
//! retried; a transient error whose budget is spent comes back marked
//! [`crate::Retry::Exhausted`], so a caller can tell "gave up" from "cannot succeed".

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result, Retry};

/// Exponential backoff with full jitter; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first retry's delay.
    pub initial: Duration,
    /// The largest ceiling of the jittered delay (a longer `Retry-After` is honoured as asked).
    pub max: Duration,
}

impl Backoff {
    /// The delay before retry number `failures` (1 for the first retry): jittered, or
    /// `retry_after` when that is longer (a server's explicit wish is honoured even
    /// beyond `max`).
    pub fn delay(&self, failures: u32, retry_after: Option<Duration>) -> Duration {
        let exp = failures.saturating_sub(1).min(20);
        let ceiling = self.initial.saturating_mul(1 << exp).min(self.max);
        let jittered = ceiling.mul_f64(fastrand::f64());
        match retry_after {
            Some(after) if after > jittered => after,
            _ => jittered,
        }
    }
}

impl Default for Backoff {
    /// 100 ms doubling up to 10 s.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

/// How transient failures of one kind of call are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The delay before each retry.
    pub backoff: Backoff,
    /// Retries after the first failure before giving up; `None` retries for ever.
    pub max_retries: Option<u32>,
}

impl RetryPolicy {
    /// Store calls (a lock timeout, a fail-over, a restart): 20 retries, 20 ms
    /// doubling up to 2 s, so a store back within about half a minute costs only time.
    pub const STORE: Self = Self {
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_secs(2),
        },
        max_retries: Some(20),
    };

    /// Retries for ever with `backoff` (a daemon's connection to its broker).
    pub const fn forever(backoff: Backoff) -> Self {
        Self {
            backoff,
            max_retries: None,
        }
    }

    /// The delay before the next try after `failures` transient failures (this one
    /// included), or `None` when `error` must not be retried: it is not transient, or
    /// the retries are spent.
    pub fn delay_after(&self, failures: u32, error: &Error) -> Option<Duration> {
        let Retry::Transient { after } = error.retry() else {
            return None;
        };
        if self.max_retries.is_some_and(|max| failures > max) {
            return None;
        }
        Some(self.backoff.delay(failures, after))
    }

    /// A fresh count of failures, for a loop that cannot hand its call to [`run`](Self::run)
    /// (one that borrows `&mut self` on each try, or waits on a shutdown signal).
    pub fn start(&self) -> Retries {
        Retries {
            policy: *self,
            failures: 0,
        }
    }

    /// Runs `call` until it succeeds, fails permanently, or its retries are spent;
    /// `what` names the call in the log lines and in the error's context.
    ///
    /// # Errors
    /// The last error, marked [`Retry::Exhausted`] when the retries ran out.
    pub async fn run<T, F, Fut>(&self, what: &'static str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retries = self.start();
        loop {
            match call().await {
                Ok(value) => return Ok(value),
                Err(e) => match retries.after(e) {
                    Ok(delay) => {
                        tracing::warn!(
                            call = what,
                            failures = retries.failures(),
                            ?delay,
                            "transient failure; retrying"
                        );
                        tokio::time::sleep(delay).await;
                    }
                    Err(e) => return Err(e.with("call", what)),
                },
            }
        }
    }
}

/// The failures of one call so far, under one [`RetryPolicy`].
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    policy: RetryPolicy,
    failures: u32,
}

impl Retries {
    /// Counts the failure `error`: `Ok(delay)` to wait and try again, or `Err` with
    /// the error to give up with (marked [`Retry::Exhausted`] when only the budget
    /// stopped it).
    ///
    /// # Errors
    /// `error` itself when it is permanent or its retries are spent.
    pub fn after(&mut self, error: Error) -> std::result::Result<Duration, Error> {
        self.failures = self.failures.saturating_add(1);
        match self.policy.delay_after(self.failures, &error) {
            Some(delay) => Ok(delay),
            None if error.is_transient() => Err(error.exhausted()),
            None => Err(error),
        }
    }

    /// Transient failures counted so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Starts counting again (after a success of a long-running loop).
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::error::ErrorKind;

    fn transient() -> Error {
        Error::new(ErrorKind::Storage, "locked").transient(None)
    }

    #[test]
    fn backoff_is_capped_and_honours_retry_after() {
        let b = Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(80),
        };
        for failures in 1..30 {
            assert!(b.delay(failures, None) <= Duration::from_millis(80));
        }
        assert!(b.delay(1, None) <= Duration::from_millis(10));
        assert_eq!(
            b.delay(1, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn only_transient_errors_are_retried_and_the_budget_is_kept() {
        let policy = RetryPolicy {
            backoff: Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(1),
            },
            max_retries: Some(2),
        };
        let mut retries = policy.start();
        assert!(retries.after(transient()).is_ok());
        assert!(retries.after(transient()).is_ok());
        let spent = retries.after(transient()).unwrap_err();
        assert_eq!(spent.retry(), Retry::Exhausted);
        let permanent = Error::new(ErrorKind::Internal, "bug");
        let err = policy.start().after(permanent).unwrap_err();
        assert_eq!(err.retry(), Retry::Permanent);
        let asked = transient().transient(Some(Duration::from_secs(3)));
        assert_eq!(
            RetryPolicy::forever(policy.backoff)
                .start()
                .after(asked)
                .unwrap(),
            Duration::from_secs(3)
        );
    }

    #[tokio::test]
    async fn run_retries_until_success_or_exhaustion() {
        let policy = RetryPolicy {
            backoff: Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(2),
            },
            max_retries: Some(3),
        };
        let calls = AtomicU32::new(0);
        let ok = policy
            .run("flaky", || async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0..=2 => Err(transient()),
                    _ => Ok(7),
                }
            })
            .await;
        assert_eq!((ok.unwrap(), calls.load(Ordering::SeqCst)), (7, 4));
        let down = policy
            .run("down", || async { Err::<(), _>(transient()) })
            .await;
        let err = down.unwrap_err();
        assert_eq!(err.retry(), Retry::Exhausted);
        assert_eq!(err.context("call"), Some("down"));
    }
}
