//! What the ledger suite needs from a ledger under test, beyond the `Ledger` trait.
//!
//! The suite drives the ledger through `outbox_core::Ledger` only. What a case needs
//! from outside the trait — a fresh ledger, funds on an account, a body the ledger
//! refuses with a given code, a fault on the next call — it asks the harness, so the
//! suite holds no HTTP, SQL or other storage assumption a ledger might not meet.

use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{Account, Asset, EventId, Ledger};

/// A fault the harness can make its ledger show on the next write call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerFault {
    /// The next write is refused before it runs, as unavailable (HTTP 503), with
    /// `Retry-After: retry_after` (whole seconds).
    Unavailable {
        /// The delay the ledger asks for.
        retry_after: Duration,
    },
    /// The next write is refused before it runs, as throttled (HTTP 429), with
    /// `Retry-After: retry_after` (whole seconds).
    Throttled {
        /// The delay the ledger asks for.
        retry_after: Duration,
    },
    /// The next write commits and its answer is lost (a timeout, a dropped
    /// connection): the caller sees an error although the write is in the ledger.
    AnswerLostAfterCommit,
}

/// A refusal this ledger produces besides insufficient funds, prepared by the harness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedRefusal {
    /// The code the ledger must answer in `PostOutcome::Rejected`.
    pub code: String,
    /// The event id the body carries; the suite posts it under this key.
    pub event: EventId,
    /// A body the ledger refuses with `code` every time it is evaluated (the harness
    /// has set up whatever the refusal needs, such as a reference another transaction
    /// holds).
    pub body: Vec<u8>,
}

/// A ledger under test. Each case calls `new` and gets a fresh, empty ledger: no
/// transaction, no account, no idempotency key from another case.
#[async_trait]
pub trait LedgerHarness: Send + Sync + Sized + 'static {
    /// The adapter under test.
    type Ledger: Ledger;

    /// A fresh, empty ledger and an adapter over it.
    async fn new() -> Self;

    /// The adapter (the same one on every call).
    fn ledger(&self) -> &Self::Ledger;

    /// Puts `amount` minor units of `asset` on `account` from outside the case's own
    /// posts (on Formance, a post from `world`), so that a payout from it has funds.
    async fn fund(&self, account: &Account, asset: &Asset, amount: u64);

    /// The code this ledger refuses an overdraft with (Formance: `INSUFFICIENT_FUND`).
    fn insufficient_funds_code(&self) -> &str {
        "INSUFFICIENT_FUND"
    }

    /// The code this ledger refuses a second revert of one transaction with
    /// (Formance: `ALREADY_REVERT`).
    fn already_reverted_code(&self) -> &str {
        "ALREADY_REVERT"
    }

    /// One prepared body for every other refusal code this ledger can produce
    /// (Formance: `COMPILATION_FAILED`, `NO_POSTINGS`, `METADATA_OVERRIDE`,
    /// `CONFLICT`). Empty (the default) when insufficient funds is its only refusal.
    async fn refusals(&self) -> Vec<PreparedRefusal> {
        Vec::new()
    }

    /// Makes the ledger's next write call meet `fault`. `false` when this ledger
    /// cannot show it: the cases that need it are skipped, saying so.
    async fn inject(&self, fault: LedgerFault) -> bool;
}
