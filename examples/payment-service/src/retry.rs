//! Retrying the whole payout transaction when the database reports a transient
//! failure (a serialization conflict, a deadlock, a busy SQLite file, a dropped
//! connection). The transaction rolled back, so running it again is safe; the client
//! id of the payout keeps a retry that did commit from writing it twice.

use std::future::Future;
use std::time::Duration;

use outbox_core::Result;

/// Attempts before a transient failure is answered as 503.
pub const ATTEMPTS: u32 = 3;

/// Runs `attempt` until it succeeds, fails permanently, or has failed transiently
/// [`ATTEMPTS`] times, waiting 50 ms, then 100 ms, between attempts.
///
/// # Errors
/// The last error.
pub async fn with_retries<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(50);
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if e.is_transient() && tries < ATTEMPTS => {
                tracing::warn!(error = %e, tries, "transient failure: the payout transaction runs again");
                tokio::time::sleep(delay).await;
                delay *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use outbox_core::{Error, ErrorKind};

    use super::*;

    fn busy() -> Error {
        Error::new(ErrorKind::Storage, "database is locked").transient(None)
    }

    #[tokio::test]
    async fn transient_failures_are_retried_then_given_up() {
        let calls = Cell::new(0);
        let ok = with_retries(|| {
            calls.set(calls.get() + 1);
            async { if calls.get() < 3 { Err(busy()) } else { Ok(7) } }
        })
        .await;
        assert_eq!((ok.unwrap(), calls.get()), (7, 3));

        calls.set(0);
        let failed: Result<()> = with_retries(|| {
            calls.set(calls.get() + 1);
            async { Err(busy()) }
        })
        .await;
        assert!(failed.unwrap_err().is_transient());
        assert_eq!(calls.get(), ATTEMPTS);
    }

    #[tokio::test]
    async fn a_permanent_failure_is_not_retried() {
        let calls = Cell::new(0);
        let failed: Result<()> = with_retries(|| {
            calls.set(calls.get() + 1);
            async { Err(Error::invalid("asset", "no")) }
        })
        .await;
        assert!(failed.is_err());
        assert_eq!(calls.get(), 1);
    }
}
