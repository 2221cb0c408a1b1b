//! LISTEN/NOTIFY wake-ups: one background task per store listens on
//! [`NOTIFY_CHANNEL`] and wakes the store's polling relays, so a relay with a long
//! poll interval still picks up a commit within milliseconds.
//!
//! # The idle-period wake-up
//!
//! A notifying transaction takes a database-wide lock through its commit, so writers
//! that all notify commit one at a time. They notify only while a relay waits for it:
//!
//! - A relay keeps polling for a moment after every batch (its wake-up is
//!   [`Wakeup::on_demand`]), so while events flow it reads them without any signal.
//!   Once it found nothing for that long it waits, and says so ([`Wakeup::relay_waiting`]).
//! - This task then takes the exclusive wake-up lock (a session advisory lock keyed by
//!   the outbox table) on its LISTEN session, and holds it until a notification comes.
//! - enqueue tries the shared lock (`pg_try_advisory_xact_lock_shared`) after its
//!   insert: refused while the task holds or waits for the exclusive one, and then the
//!   transaction notifies on commit. Granted otherwise, and held to the end of the
//!   writer's transaction, with no NOTIFY.
//! - So the exclusive lock is granted only once every writer that did not notify has
//!   ended: the task then wakes the relays once more, and their next read finds those
//!   rows (committed, or still behind the horizon, which the follow-up below covers).
//!   A commit is never left waiting for the poll interval.
//!
//! While several relay processes of one outbox wait, one holds the lock and the others
//! queue for it; queued, they make writers notify as well. The lock wait is bounded
//! (10 ms per attempt), so a long transaction that enqueued only delays the task's
//! next attempt, never its handling of notifications.
//!
//! The notification's payload names the outbox table (its oid): a store ignores the
//! notifications of another schema's outbox on the same database (an empty payload,
//! from an older writer, wakes everyone).
//!
//! A notification is a hint, never data: the relay reads the table, and the poll
//! interval stays the fallback for anything missed (a reconnect, a full notification
//! queue).
//!
//! The xmin-gated reader cannot return a committed row while an older transaction
//! is still open anywhere on the server, so the wake-up at commit may find nothing.
//! The task therefore remembers the notified transactions (the snapshot's xmax after
//! the notification: they are all below it) and re-checks `pg_snapshot_xmin` at
//! growing intervals, waking the relays again as the horizon moves past them.

use std::time::{Duration, Instant};

use outbox_core::{Backoff, Result, RetryPolicy, Wakeup};
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgNotification};
use tokio::sync::watch;

use crate::error::PgResultExt;
use crate::position::parse_xid8;

/// The channel name, as a literal for the crate's SQL text.
macro_rules! notify_channel {
    () => {
        "outbox_events"
    };
}
pub(crate) use notify_channel;

/// The wake-up lock's two keys in SQL: a tag, and the outbox table's oid (one lock per
/// outbox; the oid is found on the session's search_path, as the table is).
macro_rules! wakeup_lock_sql {
    () => {
        "1868724088, 'outbox_events'::regclass::oid::int4"
    };
}
pub(crate) use wakeup_lock_sql;

/// The notification's payload in SQL: the outbox table's oid.
macro_rules! wakeup_payload_sql {
    () => {
        "'outbox_events'::regclass::oid::text"
    };
}
pub(crate) use wakeup_payload_sql;

/// The channel enqueue notifies on commit.
pub const NOTIFY_CHANNEL: &str = notify_channel!();

/// Takes the exclusive wake-up lock, waiting at most 10 ms in one attempt: writers
/// that did not notify hold the shared one until their transactions end (normally
/// their commit, within milliseconds).
const GO_IDLE: &str = concat!(
    "SET lock_timeout = '10ms'; SELECT pg_advisory_lock(",
    wakeup_lock_sql!(),
    ")"
);
/// Delay before another attempt after a timed-out one, doubling to the longest.
const IDLE_RETRY: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

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
    let (listener, outbox) = listen(pool).await?;
    let task = Listening {
        pool: pool.clone(),
        wakeup,
        stop,
        outbox,
        pending: None,
        notified_since_check: false,
        last_xmin: 0,
        check_delay: HORIZON_CHECK.0,
        idle: false,
        idle_retry: None,
    };
    tokio::spawn(task.run(listener));
    Ok(())
}

/// A LISTEN session, and the payload of this outbox's notifications.
async fn listen(pool: &PgPool) -> Result<(PgListener, String)> {
    let mut listener = PgListener::connect_with(pool).await.storage()?;
    let outbox: String = sqlx::query_scalar(concat!("SELECT ", wakeup_payload_sql!()))
        .fetch_one(&mut listener)
        .await
        .storage()?;
    listener.listen(NOTIFY_CHANNEL).await.storage()?;
    Ok((listener, outbox))
}

struct Listening {
    pool: PgPool,
    wakeup: Wakeup,
    stop: watch::Receiver<()>,
    /// This outbox's notification payload; others' are ignored.
    outbox: String,
    /// Rows of every transaction notified so far are readable once
    /// `pg_snapshot_xmin` reaches this.
    pending: Option<u64>,
    notified_since_check: bool,
    last_xmin: u64,
    check_delay: Duration,
    /// Whether the LISTEN session holds the exclusive wake-up lock: writers notify.
    idle: bool,
    /// After a timed-out attempt at the lock: when to try again, and the delay after it.
    idle_retry: Option<(Instant, Duration)>,
}

/// What woke the loop.
enum Step {
    Stop,
    Received(std::result::Result<Option<PgNotification>, sqlx::Error>),
    CheckHorizon,
    /// A relay may have begun to wait: look again.
    RelayStarted,
    /// A relay waits: take the wake-up lock.
    GoIdle,
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
                    Ok((fresh, outbox)) => {
                        listener = Some(fresh);
                        self.outbox = outbox;
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
            let idle_in = (!self.idle && self.wakeup.relay_waiting()).then(|| {
                self.idle_retry.map_or(Duration::ZERO, |(at, _)| {
                    at.saturating_duration_since(Instant::now())
                })
            });
            let step = tokio::select! {
                biased;
                _ = self.stop.changed() => Step::Stop,
                received = active.try_recv() => Step::Received(received),
                () = sleep_or_never(check_in) => Step::CheckHorizon,
                () = sleep_or_never(idle_in) => Step::GoIdle,
                () = self.wakeup.wait_started(), if !self.idle => Step::RelayStarted,
            };
            let healthy = match step {
                Step::Stop => return,
                Step::Received(Ok(Some(first))) => {
                    let mut ours = self.is_ours(&first);
                    while let Some(next) = active.next_buffered() {
                        ours |= self.is_ours(&next);
                    }
                    if ours {
                        self.wakeup.notify();
                        self.notified_since_check = true;
                        self.check_delay = HORIZON_CHECK.0;
                        self.leave_idle(active).await
                    } else {
                        Ok(())
                    }
                }
                Step::Received(Ok(None)) => {
                    // sqlx re-established the connection and the subscription; the
                    // wake-up lock went with the old session.
                    self.idle = false;
                    self.wakeup.notify();
                    Ok(())
                }
                Step::Received(Err(e)) => Err(e).storage(),
                Step::CheckHorizon => self.check_horizon(active).await,
                Step::RelayStarted => Ok(()),
                Step::GoIdle => self.go_idle(active).await,
            };
            if let Err(e) = healthy {
                tracing::warn!(error = %e, "outbox LISTEN connection failed; reconnecting");
                listener = None;
                self.idle = false;
                self.idle_retry = None;
                self.wakeup.notify();
            }
        }
    }

    fn is_ours(&self, notification: &PgNotification) -> bool {
        let payload = notification.payload();
        payload.is_empty() || payload == self.outbox
    }

    /// A relay waits: take the exclusive wake-up lock, so writers notify from now on.
    /// Once it is granted, every writer that did not notify has ended, so the relays
    /// are woken once more to read what those wrote.
    async fn go_idle(&mut self, listener: &mut PgListener) -> Result<()> {
        let attempt = sqlx::raw_sql(GO_IDLE).execute(&mut *listener).await;
        match attempt {
            Ok(_) => {
                self.idle = true;
                self.idle_retry = None;
                self.wakeup.notify();
                // What they wrote may still be behind the horizon: follow it up.
                self.notified_since_check = true;
                self.check_delay = HORIZON_CHECK.0;
                Ok(())
            }
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("55P03") => {
                // A writer's transaction is still open; writers notified meanwhile.
                let delay = self.idle_retry.map_or(IDLE_RETRY.0, |(_, d)| d);
                self.idle_retry = Some((Instant::now() + delay, (delay * 2).min(IDLE_RETRY.1)));
                Ok(())
            }
            Err(e) => Err(e).storage(),
        }
    }

    /// A notification came: the relays are woken and busy, writers stop notifying.
    async fn leave_idle(&mut self, listener: &mut PgListener) -> Result<()> {
        if !std::mem::take(&mut self.idle) {
            return Ok(());
        }
        sqlx::query(concat!(
            "SELECT pg_advisory_unlock(",
            wakeup_lock_sql!(),
            ")"
        ))
        .execute(&mut *listener)
        .await
        .storage()
        .map(drop)
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
