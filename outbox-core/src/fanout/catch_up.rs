//! Catch-up from the ledger's own log: what the webhooks never brought.
//!
//! Webhooks are a copy of the ledger's log delivered at least once — while the
//! sender keeps trying. A delivery the intake refused (clock skew, a rotated secret,
//! a body over the limit) or that the sender gave up on leaves a gap no retry fills.
//! The ledger's log is the complete record, so [`CatchUp`] reads it after a
//! checkpoint and appends to the [`FanoutStore`] the messages each entry implies,
//! deduplicated exactly as webhooks are (same [`FanoutMessage::dedup_key`]s): a
//! message a webhook already brought is a duplicate, and so is a webhook arriving
//! after catch-up stored its message.
//!
//! The checkpoint is a fan-out store cursor named `ledger-log:<ledger>`. It moves only
//! forward, and only after the appends of the entries it passes are durable; a crash
//! re-reads at most one page, whose appends are then duplicates.
//!
//! A settle time ([`CatchUp::with_settle`]) leaves the newest entries to their
//! webhooks, which are normally a few milliseconds behind the log: the periodic run
//! then fills only real gaps, and messages keep the trace context their webhook
//! carries.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::{FanoutMessage, FanoutStore};
use crate::error::{Error, ErrorKind, Result};
use crate::relay::Wakeup;

/// Entries read per page by default (Formance's largest page).
pub const DEFAULT_CATCH_UP_PAGE: usize = 100;

/// One entry of a ledger's log and the Hop 2 messages it implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerLogEntry {
    /// The entry's id in the ledger's log: ascending in commit order.
    pub id: u64,
    /// When the ledger wrote it.
    pub date: DateTime<Utc>,
    /// A new transaction with outbox metadata → committed; a revert → reverted; the
    /// relay's rejection notice → rejected; anything else → none.
    pub messages: Vec<FanoutMessage>,
}

/// A ledger's ordered record of committed events.
///
/// # Contract
/// - [`ledger`](Self::ledger) names the ledger; it keys the catch-up checkpoint.
/// - `read_after(after, limit)` returns at most `limit` entries with an id above
///   `after`, ascending, each once; it returns an empty page only when the log holds
///   nothing after `after` (yet), so an empty answer is the end of the log.
/// - An entry's messages are those its webhook would have carried: same identity,
///   same dedup keys, same payload bytes (consumers parse the payload).
/// - A ledger that cannot be reached fails with a transient error.
#[async_trait]
pub trait LedgerLogSource: Send + Sync + 'static {
    /// The ledger's name (`payouts`): it names the checkpoint `ledger-log:<ledger>`.
    fn ledger(&self) -> &str;

    /// Up to `limit` log entries with an id above `after`, ascending (0: from the
    /// first); empty only at the end of the log.
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerLogEntry>>;
}

/// What one catch-up run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatchUpReport {
    /// The run read the entries after this log id.
    pub after: u64,
    /// The last log id read (`after` when there was nothing).
    pub through: u64,
    /// Log entries read.
    pub logs: u64,
    /// Messages those entries implied.
    pub messages: u64,
    /// Messages newly stored: the gap that was filled.
    pub appended: u64,
    /// Messages already stored (by a webhook, or an earlier catch-up).
    pub duplicates: u64,
    /// The checkpoint after the run.
    pub checkpoint: u64,
    /// The run stopped at an entry younger than the settle time, left to its webhook
    /// (and to the next run).
    pub settling: bool,
}

/// Reads a [`LedgerLogSource`] after the checkpoint and appends what is missing.
pub struct CatchUp {
    store: Arc<dyn FanoutStore>,
    log: Arc<dyn LedgerLogSource>,
    page_size: usize,
    settle: Duration,
    wakeup: Option<Wakeup>,
}

impl std::fmt::Debug for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUp")
            .field("ledger", &self.log.ledger())
            .field("page_size", &self.page_size)
            .field("settle", &self.settle)
            .finish_non_exhaustive()
    }
}

impl CatchUp {
    /// Catch-up from `log` into `store`: pages of [`DEFAULT_CATCH_UP_PAGE`] entries,
    /// no settle time (reads to the end), no wake-up.
    pub fn new(store: Arc<dyn FanoutStore>, log: Arc<dyn LedgerLogSource>) -> Self {
        Self {
            store,
            log,
            page_size: DEFAULT_CATCH_UP_PAGE,
            settle: Duration::ZERO,
            wakeup: None,
        }
    }

    /// Leaves entries younger than `settle` (by the ledger's date) for a later run:
    /// their webhooks are probably on the way. Zero (the default) reads to the end.
    #[must_use]
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Entries read per page (at least 1).
    #[must_use]
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// Notified after a page that stored something, so the fan-out loops do not wait
    /// for their poll interval.
    #[must_use]
    pub fn with_wakeup(mut self, wakeup: Wakeup) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    /// The name of the checkpoint in the fan-out store: `ledger-log:<ledger>`.
    pub fn checkpoint_name(&self) -> String {
        format!("ledger-log:{}", self.log.ledger())
    }

    /// The last log id whose messages are known to be in the fan-out store.
    ///
    /// # Errors
    /// The store's.
    pub async fn checkpoint(&self) -> Result<u64> {
        self.store.load_cursor(&self.checkpoint_name()).await
    }

    /// Reads the log to its end after the checkpoint — or from `since` (inclusive)
    /// when given, which rescans without ever moving the checkpoint backwards — and
    /// appends what is missing. `on_appended` sees each newly stored message with its
    /// log id, as it is stored.
    ///
    /// # Errors
    /// The source's or the store's; the checkpoint then stays where the last durable
    /// page left it, and the next run resumes there. A source that breaks its
    /// ordering contract is an `Internal` error.
    ///
    /// Cancel safety: every append is atomic and the checkpoint is saved after them; a
    /// cancelled run leaves at most duplicates for the next one.
    pub async fn run_once(
        &self,
        since: Option<u64>,
        on_appended: &mut (dyn FnMut(u64, &FanoutMessage) + Send),
    ) -> Result<CatchUpReport> {
        let name = self.checkpoint_name();
        let checkpoint = self.store.load_cursor(&name).await?;
        let after = since.map_or(checkpoint, |since| since.saturating_sub(1));
        let mut report = CatchUpReport {
            after,
            through: after,
            checkpoint,
            ..CatchUpReport::default()
        };
        let settled_before = chrono::Duration::from_std(self.settle)
            .ok()
            .and_then(|settle| Utc::now().checked_sub_signed(settle))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        loop {
            let page = self.log.read_after(report.through, self.page_size).await?;
            if page.is_empty() {
                return Ok(report);
            }
            let mut stored = 0;
            for entry in &page {
                if !self.settle.is_zero() && entry.date > settled_before {
                    report.settling = true;
                    break;
                }
                if entry.id <= report.through {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!(
                            "the ledger log answered entry {} after {}: out of order",
                            entry.id, report.through
                        ),
                    )
                    .with("ledger", self.log.ledger()));
                }
                stored += self.append(entry, &mut report, on_appended).await?;
                report.through = entry.id;
                report.logs += 1;
            }
            if report.through > report.checkpoint {
                // After the appends: the checkpoint never passes a message not stored.
                self.store.save_cursor(&name, report.through).await?;
                report.checkpoint = report.through;
            }
            if stored > 0
                && let Some(wakeup) = &self.wakeup
            {
                wakeup.notify();
            }
            if report.settling {
                return Ok(report);
            }
        }
    }

    /// Appends one entry's messages under its own delivery id; returns how many
    /// were newly stored.
    async fn append(
        &self,
        entry: &LedgerLogEntry,
        report: &mut CatchUpReport,
        on_appended: &mut (dyn FnMut(u64, &FanoutMessage) + Send),
    ) -> Result<usize> {
        if entry.messages.is_empty() {
            return Ok(0);
        }
        report.messages += entry.messages.len() as u64;
        let delivery = format!("ledger-log:{}:{}", self.log.ledger(), entry.id);
        let outcome = self
            .store
            .append(&delivery, &entry.messages)
            .await
            .map_err(|e| e.with("log_id", entry.id))?;
        if outcome.delivery_seen {
            // A rescan (`since`) of an entry an earlier run already appended.
            report.duplicates += entry.messages.len() as u64;
            return Ok(0);
        }
        report.appended += outcome.stored as u64;
        report.duplicates += outcome.duplicates as u64;
        if outcome.stored == entry.messages.len() {
            for message in &entry.messages {
                on_appended(entry.id, message);
            }
        } else if outcome.stored > 0 {
            // Only counts come back; name the entry rather than guess which message.
            tracing::info!(
                log_id = entry.id,
                stored = outcome.stored,
                "catch-up stored part of a log entry's messages"
            );
        }
        Ok(outcome.stored)
    }

    /// Runs a catch-up at once and then every `interval`, until `stop` turns true.
    /// A failed run is logged and retried at the next tick: an unreachable ledger must
    /// not stop the webhook intake or the fan-out loops beside it.
    pub async fn run_every(self, interval: Duration, mut stop: watch::Receiver<bool>) {
        let mut quiet = |_: u64, _: &FanoutMessage| {};
        loop {
            if *stop.borrow() {
                return;
            }
            let run = self.run_once(None, &mut quiet);
            let outcome = tokio::select! {
                outcome = run => outcome,
                _ = stop.wait_for(|stop| *stop) => return,
            };
            match outcome {
                Ok(report) if report.appended > 0 => tracing::warn!(
                    ledger = self.log.ledger(),
                    appended = report.appended,
                    through = report.through,
                    "catch-up filled a gap the webhooks left"
                ),
                Ok(report) => tracing::debug!(
                    ledger = self.log.ledger(),
                    through = report.through,
                    duplicates = report.duplicates,
                    "catch-up found nothing missing"
                ),
                Err(error) if error.is_transient() => {
                    tracing::warn!(%error, ledger = self.log.ledger(), "catch-up failed; retrying at the next interval");
                }
                Err(error) => {
                    tracing::error!(%error, ledger = self.log.ledger(), "catch-up failed permanently; it stays at its checkpoint until fixed (see `outbox fanout catch-up --since`)");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}
