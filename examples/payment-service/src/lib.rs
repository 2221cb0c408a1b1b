//! The parts both payment services share: what a payout request is, how it becomes
//! an outbox event, how failures answer over HTTP, and the retry of transient ones.
//!
//! The two binaries (`payment-service-postgres`, `payment-service-sqlite`) differ
//! only in the transaction that writes the payout intent and calls `enqueue`.

pub mod answer;
pub mod payout;
pub mod retry;
