//! The auditor: rebuilds what should have happened from the outbox alone and compares
//! it with what the ledger (over its API) and each consumer's inbox hold. In the style
//! of TigerBeetle's auditor — the expected state comes from what was sent, never from
//! the system under test's own bookkeeping of success.
//!
//! From the outbox: every event, its account and sequence, and whether the relay
//! recorded it as posted (accepted or replayed) or refused. Then:
//!
//! - **Hop 1** (`hop1`): every posted event has exactly one ledger transaction
//!   carrying its event id, a refused one none, and one with no terminal record is
//!   reported as not delivered; a ledger transaction with an event id the outbox does
//!   not know is an orphan; per account, the ledger's transaction order is the
//!   sequence order.
//! - **Hop 2** (`hop2`): each consumer applied every event of every account exactly
//!   once, at its outbox sequence, holds nothing, and — where the caller gives the
//!   consumer's balances — holds the ledger's balance for each account.
//!
//! Every discrepancy names the account, the sequence and the event id. End-to-end
//! tests and `scripts/chaos.sh` call [`AuditReport::assert_clean`].

mod hop1;
mod hop2;
mod report;

use std::collections::BTreeMap;

use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_core::reconcile::sequences::InboxSequences;
use outbox_core::{Ledger, Result};

pub use report::{AuditReport, Discrepancy, DiscrepancyKind};

/// Rows read per page from each side: memory is bounded by the expected state
/// (one entry per event), not by the page.
const PAGE: usize = 1000;

/// One consumer to audit: its inbox (the database may hold several consumers) and,
/// optionally, its balance per account to compare with the ledger's.
pub struct ConsumerView<'a> {
    /// The consumer's name in its inbox (`outbox consume --name`).
    pub name: String,
    pub inbox: &'a dyn InboxSequences,
    /// The consumer's own balance per account, summed over assets; `None` when the
    /// consumer keeps no balances.
    pub balances: Option<BTreeMap<String, i128>>,
}

impl std::fmt::Debug for ConsumerView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerView")
            .field("name", &self.name)
            .field("balances", &self.balances.as_ref().map(BTreeMap::len))
            .finish_non_exhaustive()
    }
}

/// The expected state, rebuilt from the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    pub event_id: String,
    pub account: String,
    pub sequence: u64,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Accepted or replayed: exactly one ledger transaction.
    Posted,
    /// Refused by the ledger: no transaction (a rejection notice instead).
    Refused,
    /// No terminal record: the relay never finished it.
    Undelivered,
}

/// Audits the outbox against the ledger and every consumer.
///
/// # Errors
/// A side that cannot be read; discrepancies are in the report, never errors.
pub async fn audit(
    outbox: &dyn CompletenessStore,
    ledger: &dyn Ledger,
    consumers: &[ConsumerView<'_>],
) -> Result<AuditReport> {
    let expected = hop1::expected(outbox).await?;
    let mut report = AuditReport {
        events: expected.len(),
        ..AuditReport::default()
    };
    hop1::compare(&expected, ledger, &mut report).await?;
    for consumer in consumers {
        hop2::compare(&expected, consumer, ledger, &mut report).await?;
    }
    Ok(report)
}
