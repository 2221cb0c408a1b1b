//! Completeness both ways between the outbox and the ledger (the ledger team's check).

use std::collections::HashMap;

use async_trait::async_trait;

use crate::domain::{EventId, OutboxEvent, Position};
use crate::error::Result;
use crate::store::DeliveryState;

/// How far the completeness check has got, on each side. Saved by the cursor rule:
/// only forward.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletenessCheckpoint {
    /// The last ledger transaction id read (every transaction up to it was recorded
    /// as seen).
    pub ledger_tx: Option<u64>,
    /// The last outbox position checked against what was seen.
    pub position: Option<Position>,
}

/// A ledger transaction carrying outbox metadata, as the check recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenTransaction {
    /// The ledger's transaction id.
    pub ledger_tx: u64,
    /// Its `outbox_event_id` metadata, as text (it may not even be a valid id).
    pub event_id: String,
    /// Its reference, if any.
    pub reference: Option<String>,
}

/// An outbox event with what the check knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCheck {
    /// The outbox row.
    pub event: OutboxEvent,
    /// Its delivery records, folded.
    pub delivery: DeliveryState,
    /// The ledger transactions seen carrying its event id, ascending.
    pub seen: Vec<u64>,
}

/// What the completeness check reads and keeps in the outbox database. Its own
/// records (the checkpoint, the transactions seen) are append-only like the rest;
/// the outbox rows and delivery records are only read.
#[async_trait]
pub trait CompletenessStore: Send + Sync {
    /// The checkpoint saved under `name`, `None` before the first save.
    async fn completeness_checkpoint(&self, name: &str) -> Result<Option<CompletenessCheckpoint>>;

    /// Saves the checkpoint under `name`; each side moves only forward.
    async fn save_completeness_checkpoint(
        &self,
        name: &str,
        checkpoint: &CompletenessCheckpoint,
    ) -> Result<()>;

    /// The events of `ids` the outbox knows, with their delivery states; ids it does
    /// not know are absent.
    async fn events_by_ids(
        &self,
        ids: &[EventId],
    ) -> Result<HashMap<EventId, (OutboxEvent, DeliveryState)>>;

    /// Transactions recorded as seen under `name` that carry one of `event_ids` or one
    /// of `references`.
    async fn seen_matching(
        &self,
        name: &str,
        event_ids: &[String],
        references: &[String],
    ) -> Result<Vec<SeenTransaction>>;

    /// Records `seen` under `name`; a transaction already recorded is left as it is.
    async fn record_seen(&self, name: &str, seen: &[SeenTransaction]) -> Result<()>;

    /// Up to `limit` outbox events after `after` in commit order, each with its
    /// delivery state and the transactions recorded as seen under `name` for it.
    async fn events_to_check(
        &self,
        name: &str,
        after: Option<Position>,
        limit: usize,
    ) -> Result<Vec<EventCheck>>;
}

/// Who the completeness check raises its exceptions as.
pub const SOURCE: &str = "reconcile:ledger";

/// How the completeness check runs.
#[derive(Debug, Clone)]
pub struct CompletenessCheck {
    /// The checkpoint's name (one per ledger the outbox posts to).
    pub name: String,
    /// Transactions and events read per page; memory is bounded by it.
    pub page_size: usize,
    /// An event younger than this with no transaction yet is left for a later run
    /// (the relay may still be posting it); the checkpoint stops before it.
    pub settle: std::time::Duration,
    /// The time ages are measured at.
    pub now: chrono::DateTime<chrono::Utc>,
}

/// What one completeness run covered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletenessReport {
    /// Everything read, the findings and the notes.
    pub check: super::CheckReport,
    /// Ledger transactions read (with or without outbox metadata).
    pub transactions: u64,
    /// Of them, those carrying an outbox event id.
    pub outbox_transactions: u64,
    /// Outbox events checked against what the ledger holds.
    pub events: u64,
    /// Events left for a later run (not settled yet).
    pub unsettled: u64,
}

impl CompletenessCheck {
    /// Runs both directions from the checkpoint and moves it forward.
    ///
    /// 1. **Ledger → outbox**: every transaction after the checkpoint, a page at a
    ///    time. One carrying an outbox event id the outbox does not know is an
    ///    [`OrphanTransaction`](crate::ExceptionKind::OrphanTransaction); one whose
    ///    postings, reference or outbox identity differ from the stored payload, or
    ///    whose event is recorded as refused, is a
    ///    [`ConflictingTransaction`](crate::ExceptionKind::ConflictingTransaction);
    ///    a second transaction for one event id, or for one reference, is a
    ///    [`DuplicateTransaction`](crate::ExceptionKind::DuplicateTransaction). Each is
    ///    recorded as seen, so later runs compare against it without re-reading it.
    /// 2. **Outbox → ledger**: every event after the checkpoint, in commit order. An
    ///    event with a seen transaction or a recorded refusal is complete. One without
    ///    either is asked of the ledger by event id (so a post that landed after step
    ///    1 is not reported); still absent and older than `settle` (or recorded as
    ///    accepted), it is a
    ///    [`MissingTransaction`](crate::ExceptionKind::MissingTransaction). The first
    ///    unsettled event stops the walk: the checkpoint stays before it.
    pub async fn run(
        &self,
        store: &dyn CompletenessStore,
        ledger: &dyn crate::Ledger,
    ) -> Result<CompletenessReport> {
        let mut report = CompletenessReport::default();
        let mut checkpoint = store
            .completeness_checkpoint(&self.name)
            .await?
            .unwrap_or_default();
        self.ledger_side(store, ledger, &mut checkpoint, &mut report)
            .await?;
        self.outbox_side(store, ledger, &mut checkpoint, &mut report)
            .await?;
        report.check.checked = report.transactions + report.events;
        Ok(report)
    }

    fn page_size(&self) -> usize {
        self.page_size.max(1)
    }

    async fn ledger_side(
        &self,
        store: &dyn CompletenessStore,
        ledger: &dyn crate::Ledger,
        checkpoint: &mut CompletenessCheckpoint,
        report: &mut CompletenessReport,
    ) -> Result<()> {
        loop {
            let page = ledger
                .transactions_after(checkpoint.ledger_tx, self.page_size())
                .await?;
            let Some(last) = page.last().map(|tx| tx.id) else {
                return Ok(());
            };
            report.transactions += page.len() as u64;
            let seen = ledger_page::check(self, store, &page, report).await?;
            store.record_seen(&self.name, &seen).await?;
            checkpoint.ledger_tx = Some(last);
            store
                .save_completeness_checkpoint(&self.name, checkpoint)
                .await?;
            if page.len() < self.page_size() {
                return Ok(());
            }
        }
    }

    async fn outbox_side(
        &self,
        store: &dyn CompletenessStore,
        ledger: &dyn crate::Ledger,
        checkpoint: &mut CompletenessCheckpoint,
        report: &mut CompletenessReport,
    ) -> Result<()> {
        let settled_before =
            self.now - chrono::TimeDelta::from_std(self.settle).unwrap_or(chrono::TimeDelta::MAX);
        loop {
            let page = store
                .events_to_check(&self.name, checkpoint.position, self.page_size())
                .await?;
            let full = page.len() >= self.page_size();
            let mut done = None;
            for check in page {
                match outbox_event::verdict(&check, ledger, settled_before).await? {
                    outbox_event::Verdict::Complete => {}
                    outbox_event::Verdict::Missing(finding) => report.check.findings.push(*finding),
                    outbox_event::Verdict::Unsettled => {
                        report.unsettled += 1;
                        break;
                    }
                }
                report.events += 1;
                done = Some(check.event.position);
            }
            let stopped = report.unsettled > 0;
            if let Some(position) = done {
                checkpoint.position = Some(position);
                store
                    .save_completeness_checkpoint(&self.name, checkpoint)
                    .await?;
            }
            if stopped || !full {
                return Ok(());
            }
        }
    }
}

mod ledger_page;
mod outbox_event;

#[cfg(test)]
mod tests;
