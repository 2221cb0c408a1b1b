//! Exceptions: the reconciliation and alarm queue. Each names an account and sequence.

use chrono::{DateTime, Utc};

use crate::domain::Account;

/// Why an exception was raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExceptionKind {
    /// The ledger permanently refused an event (e.g. INSUFFICIENT_FUND).
    Rejected,
    /// The same idempotency key was answered with a different body: the account is stopped.
    IdempotencyMismatch,
    /// The relay stopped an account on a permanent error that is not a business refusal
    /// (a misconfigured ledger, an unreadable payload, retries exhausted in drain mode).
    Stopped,
    /// A consumer has held a later sequence longer than the alarm age; `sequence` is the missing one.
    Gap,
    /// A message with a new instruction id but an already-applied sequence.
    StaleSequence,
    /// Two different instructions claim the same account sequence.
    ConflictingSequence,
    /// Reconciliation: a sequence is missing or repeated in what a consumer applied.
    SequenceContinuity,
    /// Reconciliation: ledger and statement disagree on an asset's aggregate balance.
    BalanceMismatch,
    /// Reconciliation: an outbox event without a ledger transaction, or the reverse.
    Unmatched,
    /// One instruction reported with two outcomes (committed after rejected, or the
    /// reverse): money may sit on the wrong side; nothing of the second was applied.
    ConflictingOutcome,
}

impl ExceptionKind {
    /// Every kind, in declaration order (for listings and for parsing).
    pub const ALL: [Self; 10] = [
        Self::Rejected,
        Self::IdempotencyMismatch,
        Self::Stopped,
        Self::Gap,
        Self::StaleSequence,
        Self::ConflictingSequence,
        Self::SequenceContinuity,
        Self::BalanceMismatch,
        Self::Unmatched,
        Self::ConflictingOutcome,
    ];

    /// The stable name stored in the `exceptions.kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::IdempotencyMismatch => "idempotency_mismatch",
            Self::Stopped => "stopped",
            Self::Gap => "gap",
            Self::StaleSequence => "stale_sequence",
            Self::ConflictingSequence => "conflicting_sequence",
            Self::SequenceContinuity => "sequence_continuity",
            Self::BalanceMismatch => "balance_mismatch",
            Self::Unmatched => "unmatched",
            Self::ConflictingOutcome => "conflicting_outcome",
        }
    }

    /// The kind stored as `text` (see [`as_str`](Self::as_str)); `None` for any other
    /// text.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// An exception to record. Recording the same (source, kind, account, sequence) twice
/// keeps the first, so an alarm fires once per gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewException {
    /// Who raised it: a relay name or a consumer name.
    pub source: String,
    /// What a person has to look at.
    pub kind: ExceptionKind,
    /// The account concerned: the outbox event's or the message's account.
    pub account: Account,
    /// The per-account sequence concerned: the event's or the message's; for
    /// [`ExceptionKind::Gap`] the missing one.
    pub sequence: u64,
    /// What happened, for the person on call: the ledger's code, the instructions
    /// involved, the error. Never a secret.
    pub detail: String,
}

/// A recorded exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// The store's row id: unique, increasing in the order exceptions were recorded.
    pub id: i64,
    /// Who raised it: a relay name or a consumer name.
    pub source: String,
    /// What a person has to look at.
    pub kind: ExceptionKind,
    /// The account concerned.
    pub account: Account,
    /// The per-account sequence concerned (for a gap, the missing one).
    pub sequence: u64,
    /// What happened, as recorded.
    pub detail: String,
    /// When the store recorded it.
    pub detected_at: DateTime<Utc>,
}
