//! The exception queue: what a person has to look at, from the relay, the inbox and
//! the three reconciliation checks (`outbox reconcile`, docs/RECONCILIATION.md).
//!
//! The queue is append-only. An exception is *open* until a resolution record (who,
//! when, why) is appended for it; nothing is updated or deleted. Raising an exception
//! whose [identity](NewException::identity) matches an open one changes nothing, so a
//! re-run of a check does not repeat what is already waiting for someone; once that
//! one is resolved, the same finding raises a new exception.

use chrono::{DateTime, Utc};

use crate::domain::Account;
use crate::error::{Error, Result};

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
    /// One instruction reported with two outcomes (committed after rejected, or the
    /// reverse): money may sit on the wrong side; nothing of the second was applied.
    ConflictingOutcome,
    /// Sequence check: a number is missing from what a consumer applied (a dropped
    /// event); `sequence` is the missing one.
    MissingSequence,
    /// Sequence check: two instructions were applied at one account sequence (an
    /// impact that reached the consumer twice); `sequence` is the repeated one.
    RepeatedSequence,
    /// Completeness: an outbox event with no ledger transaction and no recorded refusal.
    MissingTransaction,
    /// Completeness: a ledger transaction carrying an outbox event id the outbox does
    /// not know.
    OrphanTransaction,
    /// Completeness: two ledger transactions for one event id, or one reference twice.
    DuplicateTransaction,
    /// Completeness: the ledger transaction's postings differ from the stored payload,
    /// or an event recorded as refused has a transaction.
    ConflictingTransaction,
    /// Balances: the ledger and the provider's statement disagree on an account's
    /// balance in one asset.
    BalanceMismatch,
}

/// How urgently a person has to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Expected business outcomes worth a record (a refused payout).
    Info,
    /// Something is late or stopped; money has not moved wrongly yet.
    Warning,
    /// Money may be on the wrong side of a balance, or a guarantee was broken.
    Critical,
}

impl Severity {
    /// The stable name stored in the `exceptions.severity` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    /// The severity stored as `text`; `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Info, Self::Warning, Self::Critical]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

impl ExceptionKind {
    /// Every kind, in declaration order (for listings and for parsing).
    pub const ALL: [Self; 14] = [
        Self::Rejected,
        Self::IdempotencyMismatch,
        Self::Stopped,
        Self::Gap,
        Self::StaleSequence,
        Self::ConflictingSequence,
        Self::ConflictingOutcome,
        Self::MissingSequence,
        Self::RepeatedSequence,
        Self::MissingTransaction,
        Self::OrphanTransaction,
        Self::DuplicateTransaction,
        Self::ConflictingTransaction,
        Self::BalanceMismatch,
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
            Self::ConflictingOutcome => "conflicting_outcome",
            Self::MissingSequence => "missing_sequence",
            Self::RepeatedSequence => "repeated_sequence",
            Self::MissingTransaction => "missing_transaction",
            Self::OrphanTransaction => "orphan_transaction",
            Self::DuplicateTransaction => "duplicate_transaction",
            Self::ConflictingTransaction => "conflicting_transaction",
            Self::BalanceMismatch => "balance_mismatch",
        }
    }

    /// The kind stored as `text` (see [`as_str`](Self::as_str)); `None` for any other
    /// text.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The severity an exception of this kind gets unless its raiser says otherwise.
    pub fn default_severity(self) -> Severity {
        match self {
            Self::Rejected => Severity::Info,
            Self::Stopped | Self::Gap | Self::StaleSequence | Self::MissingTransaction => {
                Severity::Warning
            }
            Self::IdempotencyMismatch
            | Self::ConflictingSequence
            | Self::ConflictingOutcome
            | Self::MissingSequence
            | Self::RepeatedSequence
            | Self::OrphanTransaction
            | Self::DuplicateTransaction
            | Self::ConflictingTransaction
            | Self::BalanceMismatch => Severity::Critical,
        }
    }
}

/// An exception to raise. Build it with [`NewException::new`] and the `with_…`
/// methods for what applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewException {
    /// Who raised it: a relay name, a consumer name, or a check
    /// (`reconcile:sequences`, `reconcile:ledger`, `reconcile:balances`).
    pub source: String,
    /// What a person has to look at.
    pub kind: ExceptionKind,
    /// How urgently ([`ExceptionKind::default_severity`] unless set).
    pub severity: Severity,
    /// The account concerned: the outbox event's or the message's account; for a
    /// balance, the statement's ledger account.
    pub account: Account,
    /// The per-account sequence concerned: the event's or the message's; for
    /// [`ExceptionKind::Gap`] and [`ExceptionKind::MissingSequence`] the missing one;
    /// for a balance, the last sequence posted on the account before the statement
    /// time (0 when none).
    pub sequence: u64,
    /// The outbox event id (instruction id) concerned, when one is.
    pub event_id: Option<String>,
    /// The ledger transaction concerned, when one is.
    pub ledger_tx: Option<u64>,
    /// The asset concerned (`USD/2`), when one is.
    pub asset: Option<String>,
    /// The ledger's amount in minor units, when amounts are compared.
    pub ledger_amount: Option<i128>,
    /// The other side's amount (the provider's statement) in minor units.
    pub provider_amount: Option<i128>,
    /// What happened, for the person on call: the ledger's code, the instructions
    /// involved, the error. Never a secret.
    pub detail: String,
}

impl NewException {
    /// An exception of `kind` with the kind's default severity and no optional field.
    pub fn new(
        source: impl Into<String>,
        kind: ExceptionKind,
        account: Account,
        sequence: u64,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            source: source.into(),
            kind,
            severity: kind.default_severity(),
            account,
            sequence,
            event_id: None,
            ledger_tx: None,
            asset: None,
            ledger_amount: None,
            provider_amount: None,
            detail: detail.into(),
        }
    }

    /// Sets the severity.
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// Names the event (instruction) concerned.
    pub fn with_event_id(mut self, event_id: impl Into<String>) -> Self {
        self.event_id = Some(event_id.into());
        self
    }

    /// Names the ledger transaction concerned.
    pub fn with_ledger_tx(mut self, ledger_tx: u64) -> Self {
        self.ledger_tx = Some(ledger_tx);
        self
    }

    /// Names the asset concerned.
    pub fn with_asset(mut self, asset: impl Into<String>) -> Self {
        self.asset = Some(asset.into());
        self
    }

    /// Records the two amounts compared, in minor units.
    pub fn with_amounts(mut self, ledger: Option<i128>, provider: Option<i128>) -> Self {
        self.ledger_amount = ledger;
        self.provider_amount = provider;
        self
    }

    /// What makes two exceptions the same finding: source, kind, account, sequence,
    /// event id and asset (not the detail or the amounts, which a re-run may word or
    /// measure differently). A store refuses a second *open* exception with the same
    /// identity.
    pub fn identity(&self) -> String {
        [
            self.source.as_str(),
            self.kind.as_str(),
            self.account.as_str(),
            &self.sequence.to_string(),
            self.event_id.as_deref().unwrap_or(""),
            self.asset.as_deref().unwrap_or(""),
        ]
        .join("\u{1f}")
    }
}

/// The append-only record that closes an exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// Who resolved it (the operator's name as given, or the OS user).
    pub resolved_by: String,
    /// Why: what was found and done.
    pub note: String,
    /// When the store recorded the resolution.
    pub resolved_at: DateTime<Utc>,
}

impl Resolution {
    /// Checks what a resolution must carry before a store records it: who
    /// (`resolved_by`) and why (`note`), neither empty nor blank.
    ///
    /// # Errors
    /// `InvalidInput` naming `note` or `resolved_by`.
    pub fn validate(resolved_by: &str, note: &str) -> Result<()> {
        if note.trim().is_empty() {
            return Err(Error::invalid(
                "note",
                "a resolution needs a note: what was found and what was done",
            ));
        }
        if resolved_by.trim().is_empty() {
            return Err(Error::invalid(
                "resolved_by",
                "a resolution needs the name of who resolved it",
            ));
        }
        Ok(())
    }
}

/// A recorded exception, with its resolution when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// The store's row id: unique, increasing in the order exceptions were recorded.
    pub id: i64,
    /// Who raised it: a relay name, a consumer name or a check.
    pub source: String,
    /// What a person has to look at.
    pub kind: ExceptionKind,
    /// How urgently.
    pub severity: Severity,
    /// The account concerned.
    pub account: Account,
    /// The per-account sequence concerned (for a gap, the missing one).
    pub sequence: u64,
    /// The outbox event id concerned, when one is.
    pub event_id: Option<String>,
    /// The ledger transaction concerned, when one is.
    pub ledger_tx: Option<u64>,
    /// The asset concerned, when one is.
    pub asset: Option<String>,
    /// The ledger's amount in minor units, when amounts were compared.
    pub ledger_amount: Option<i128>,
    /// The provider's amount in minor units, when amounts were compared.
    pub provider_amount: Option<i128>,
    /// What happened, as recorded.
    pub detail: String,
    /// When the store recorded it.
    pub detected_at: DateTime<Utc>,
    /// The record that closed it; `None` while it is open.
    pub resolution: Option<Resolution>,
}

impl Exception {
    /// The finding it records, as it was raised (its identity included).
    pub fn finding(&self) -> NewException {
        NewException {
            source: self.source.clone(),
            kind: self.kind,
            severity: self.severity,
            account: self.account.clone(),
            sequence: self.sequence,
            event_id: self.event_id.clone(),
            ledger_tx: self.ledger_tx,
            asset: self.asset.clone(),
            ledger_amount: self.ledger_amount,
            provider_amount: self.provider_amount,
            detail: self.detail.clone(),
        }
    }

    /// Whether no resolution has been recorded for it.
    pub fn is_open(&self) -> bool {
        self.resolution.is_none()
    }
}

/// Which exceptions a listing returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExceptionQuery {
    /// Only those without a resolution.
    pub open_only: bool,
    /// Only these kinds (all when empty).
    pub kinds: Vec<ExceptionKind>,
}

impl ExceptionQuery {
    /// Whether `exception` is one this query returns.
    pub fn matches(&self, exception: &Exception) -> bool {
        (!self.open_only || exception.is_open())
            && (self.kinds.is_empty() || self.kinds.contains(&exception.kind))
    }
}
