//! A custom `outbox_core::Ledger` adapter, written as a team outside ledger-outbox
//! would write one for its own ledger: a small in-memory ledger with Formance's
//! idempotency rules, insufficient-funds refusals, bulk, ordered runs, revert, lookups
//! by event id and aggregate balances. It depends on `outbox-core` only and passes
//! testkit's ledger suite (tests/ledger_suite.rs; docs/ADAPTERS.md#ledger).
//!
//! Not a ledger to run in production: everything is lost with the process.

#![warn(missing_docs)]

pub mod books;
pub mod fault;
pub mod ledger;
pub mod pattern;

pub use fault::Fault;
pub use ledger::{MAX_BULK, MemoryLedger};
