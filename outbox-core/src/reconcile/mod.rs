//! Reconciliation: the checks that catch what slipped past the relay and the inbox
//! (docs/RECONCILIATION.md).
//!
//! - [`sequences`]: the consuming team's check that what a consumer applied is every
//!   account's sequence once, from 1, with no hole and no repeat.
//! - [`completeness`]: the ledger team's check that every outbox event has exactly one
//!   ledger transaction (or a recorded refusal), and every ledger transaction carrying
//!   outbox metadata has its outbox row.
//! - [`balances`]: the reconciliation function's check of the ledger's balances per
//!   account and asset against the provider's [`statement`].
//!
//! Each check reads through a small trait its store implements, pages through both
//! sides (its memory does not grow with the outbox), never changes what it checks,
//! and returns its findings as [`NewException`]s for the
//! exception queue.

pub mod balances;
pub mod completeness;
#[cfg(test)]
mod reading_ledger;
pub mod sequences;
pub mod statement;

use crate::exception::NewException;

/// What one run of a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// What the check looked at (markers, events, transactions, statement lines).
    pub checked: u64,
    /// Every finding of this run, in the order found.
    pub findings: Vec<NewException>,
    /// Things a person should know that are not exceptions (a capability the ledger
    /// lacks, what the check could not cover).
    pub notes: Vec<String>,
}
