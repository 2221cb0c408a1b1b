//! What the auditor found.

use std::fmt;

/// One way the system's state differs from what the outbox says should have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DiscrepancyKind {
    /// A posted event has no ledger transaction.
    MissingOnLedger,
    /// An event has more than one ledger transaction.
    DoubledOnLedger,
    /// A refused event has a ledger transaction.
    RefusedButPosted,
    /// The relay recorded no terminal outcome.
    Undelivered,
    /// A ledger transaction whose event id the outbox does not know.
    Orphan,
    /// An account's ledger transactions are not in sequence order.
    OutOfOrder,
    /// A consumer never applied an event.
    NotApplied,
    /// A consumer applied an event more than once, or two at one sequence.
    AppliedTwice,
    /// A consumer applied an event at another sequence than the outbox's.
    WrongSequence,
    /// A consumer applied an instruction the outbox does not know.
    UnknownApplied,
    /// A consumer still holds messages behind a gap.
    HeldGap,
    /// A consumer's balance differs from the ledger's.
    BalanceDiffers,
}

/// One discrepancy, naming where to look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discrepancy {
    pub kind: DiscrepancyKind,
    /// The consumer, for Hop 2 findings.
    pub consumer: Option<String>,
    pub account: String,
    pub sequence: Option<u64>,
    pub event_id: Option<String>,
    pub detail: String,
}

impl fmt::Display for Discrepancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.kind)?;
        if let Some(consumer) = &self.consumer {
            write!(f, " consumer={consumer}")?;
        }
        write!(f, " account={}", self.account)?;
        if let Some(sequence) = self.sequence {
            write!(f, " sequence={sequence}")?;
        }
        if let Some(event_id) = &self.event_id {
            write!(f, " event_id={event_id}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// The auditor's figures and findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Outbox events audited.
    pub events: usize,
    /// Of them, posted (accepted or replayed) and refused.
    pub posted: usize,
    pub refused: usize,
    /// Ledger transactions read (with or without outbox metadata).
    pub ledger_transactions: usize,
    /// Messages applied, summed over the consumers.
    pub applied: usize,
    pub discrepancies: Vec<Discrepancy>,
}

impl AuditReport {
    pub fn is_clean(&self) -> bool {
        self.discrepancies.is_empty()
    }

    /// Panics listing every discrepancy (account, sequence, event id) unless none.
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "{self}");
    }

    pub(crate) fn push(
        &mut self,
        kind: DiscrepancyKind,
        account: &str,
        sequence: Option<u64>,
        event_id: Option<&str>,
        detail: impl Into<String>,
    ) {
        self.discrepancies.push(Discrepancy {
            kind,
            consumer: None,
            account: account.to_owned(),
            sequence,
            event_id: event_id.map(str::to_owned),
            detail: detail.into(),
        });
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "audit: {} events ({} posted, {} refused), {} ledger transactions, {} applied by consumers: {} discrepancies",
            self.events,
            self.posted,
            self.refused,
            self.ledger_transactions,
            self.applied,
            self.discrepancies.len()
        )?;
        for discrepancy in &self.discrepancies {
            writeln!(f, "  {discrepancy}")?;
        }
        Ok(())
    }
}
