//! LISTEN/NOTIFY wake-ups: one background task per store listens on
//! [`NOTIFY_CHANNEL`] and wakes the store's polling relays, so a relay with a long
//! poll interval still picks up a commit within milliseconds.
//!
//! enqueue queues `pg_notify('outbox_events', '')` in the caller's transaction, which
//! PostgreSQL delivers on commit only: a rollback wakes nobody. A notification is a
//! hint, never data: the relay reads the table, and the poll interval stays the
//! fallback for anything missed (a reconnect, a full notification queue).
//!
//! The xmin-gated reader cannot return a committed row while an older transaction
//! is still open anywhere on the server, so the wake-up at commit may find nothing.
//! The task therefore remembers the notified transactions (the snapshot's xmax after
//! the notification: they are all below it) and re-checks `pg_snapshot_xmin` at
//! growing intervals, waking the relays again as the horizon moves past them.

use std::time::Duration;

use outbox_core::{Backoff, Result, RetryPolicy, Wakeup};
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgNotification};
use tokio::sync::watch;

use crate::error::PgResultExt;
use crate::position::parse_xid8;

/// The channel enqueue notifies on commit.
pub const NOTIFY_CHANNEL: &str = "outbox_events";

/// First and longest delay between horizon checks while notified rows wait.
const HORIZON_CHECK: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));
/// Reconnecting the LISTEN session: for ever, 100 ms doubling up to 5 s with jitter.
const RECONNECT: RetryPolicy = RetryPolicy::forever(Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(5),
});

/// Connects, subscribes, and spawns the listening task; returns once LISTEN is in
/// place, so an enqueue committed after this returns is never missed. The task ends
/// when `stop`'s sender is dropped (with the store).
pub(crate) async fn start(pool: &PgPool, wakeup: Wakeup, stop: watch::Receiver<()>) -> Result<()> {
    let listener = listen(pool).await?;
    let task = Listening {
        pool: pool.clone(),
        wakeup,
        stop,
        pending: None,
        notified_since_check: false,
        last_xmin: 0,
        check_delay: HORIZON_CHECK.0,
    };
    tokio::spawn(task.run(listener));
    Ok(())
}

async fn listen(pool: &PgPool) -> Result<PgListener> {
    let mut listener = PgListener::connect_with(pool).await.storage()?;
    listener.listen(NOTIFY_CHANNEL).await.storage()?;
    Ok(listener)
}

struct Listening {
    pool: PgPool,
    wakeup: Wakeup,
    stop: watch::Receiver<()>,
    /// Rows of every transaction notified so far are readable once
    /// `pg_snapshot_xmin` reaches this.
    pending: Option<u64>,
    notified_since_check: bool,
    last_xmin: u64,
    check_delay: Duration,
}

/// What woke the loop.
enum Step {
    Stop,
    Received(std::result::Result<Option<PgNotification>, sqlx::Error>),
    CheckHorizon,
}

impl Listening {
    async fn run(mut self, listener: PgListener) {
        let mut listener = Some(listener);
        let mut reconnects = RECONNECT.start();
        let mut reconnect_delay = RECONNECT.backoff.initial;
        loop {
            let Some(active) = listener.as_mut() else {
                tokio::select! {
                    _ = self.stop.changed() => return,
                    () = tokio::time::sleep(reconnect_delay) => {}
                }
                match listen(&self.pool).await {
                    Ok(fresh) => {
                        listener = Some(fresh);
                        reconnects.reset();
                        reconnect_delay = RECONNECT.backoff.initial;
                        // Notifications sent while disconnected are lost: look anyway.
                        self.wakeup.notify();
                    }
                    Err(e) => {
                        let shown = e.to_string();
                        // Worth another try whatever the cause: the relay polls meanwhile.
                        reconnect_delay = reconnects
                            .after(e.transient(None))
                            .unwrap_or(RECONNECT.backoff.max);
                        tracing::warn!(error = %shown, retry_in = ?reconnect_delay, "outbox LISTEN connection failed");
                    }
                }
                continue;
            };

            let check_in =
                (self.pending.is_some() || self.notified_since_check).then_some(self.check_delay);
            let step = tokio::select! {
                _ = self.stop.changed() => Step::Stop,
                received = active.try_recv() => Step::Received(received),
                () = sleep_or_never(check_in) => Step::CheckHorizon,
            };
            let healthy = match step {
                Step::Stop => return,
                Step::Received(Ok(Some(_))) => {
                    while active.next_buffered().is_some() {}
                    self.wakeup.notify();
                    self.notified_since_check = true;
                    self.check_delay = HORIZON_CHECK.0;
                    true
                }
                Step::Received(Ok(None)) => {
                    // sqlx re-established the connection and the subscription.
                    self.wakeup.notify();
                    true
                }
                Step::Received(Err(e)) => {
                    tracing::warn!(error = %e, "outbox LISTEN connection lost; reconnecting");
                    false
                }
                Step::CheckHorizon => match self.check_horizon(active).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "outbox horizon check failed; reconnecting");
                        false
                    }
                },
            };
            if !healthy {
                listener = None;
                self.wakeup.notify();
            }
        }
    }

    /// Wakes the relays when the horizon moved past (some of) the notified rows.
    async fn check_horizon(&mut self, listener: &mut PgListener) -> Result<()> {
        let (xmin, xmax): (String, String) = sqlx::query_as(
            "SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text FROM pg_current_snapshot() AS s",
        )
        .fetch_one(&mut *listener)
        .await
        .storage()?;
        let xmin = parse_xid8("pg_snapshot_xmin", &xmin)?;
        let xmax = parse_xid8("pg_snapshot_xmax", &xmax)?;
        if std::mem::take(&mut self.notified_since_check) {
            // Every transaction notified so far has committed, so its xid (and the
            // txid on its rows) is below this snapshot's xmax.
            self.pending = Some(self.pending.map_or(xmax, |w| w.max(xmax)));
        }
        if let Some(watermark) = self.pending {
            if xmin >= watermark {
                self.pending = None;
                self.wakeup.notify();
            } else if xmin > self.last_xmin {
                // Part of what waits may have become readable.
                self.wakeup.notify();
            }
        }
        self.last_xmin = xmin;
        self.check_delay = (self.check_delay * 2).min(HORIZON_CHECK.1);
        Ok(())
    }
}

async fn sleep_or_never(delay: Option<Duration>) {
    match delay {
        Some(delay) => tokio::time::sleep(delay).await,
        None => std::future::pending().await,
    }
}
