//! Several relay processes on one outbox: accounts are spread over partitions (by the
//! store: Postgres hashes the account address), each
//! partition is owned by one process at a time (through `PartitionLocks`), and each
//! owned partition runs its own dispatcher with its own cursor.
//!
//! # Why per-account order holds across instances
//! Every dispatcher sends an account's event N+1 only after it has seen N's terminal
//! outcome from the ledger, and every send carries the event id as idempotency key.
//! So even if a partition briefly has two senders (the old owner's last round still in
//! flight when the new owner starts), each post of N+1 happens after N is committed in
//! the ledger, and a duplicate post is a replay: the ledger's per-account commit order
//! is the sequence order. The locks keep that overlap to at most one round, and the
//! stores fence their cursor writes on lock ownership.

mod supervisor;

pub use supervisor::{Fleet, FleetConfig, PartitionLocks, PartitionRelays};

#[cfg(test)]
mod tests;
