//! `Summary`: what a dispatcher run did, for logs, the CLI and tests.

use crate::domain::Account;

/// What one dispatcher run did, counted over this run only, and the accounts it left
/// stopped. A fleet adds up its partitions' summaries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// New ledger transactions.
    pub accepted: u64,
    /// Idempotency-Hit replays: the ledger already had them.
    pub replayed: u64,
    /// Permanent business refusals (each has an exception and a Hop 2 notice).
    pub rejected: u64,
    /// Transient failures that were retried.
    pub retried: u64,
    /// Events found terminal in the delivery records after a restart, not re-sent.
    pub already_done: u64,
    /// Accounts stopped by a permanent error; their events wait for an operator.
    pub stopped: Vec<Account>,
}

impl std::ops::AddAssign for Summary {
    /// Adds another run's work (a fleet sums its partitions' dispatchers).
    fn add_assign(&mut self, other: Self) {
        self.accepted += other.accepted;
        self.replayed += other.replayed;
        self.rejected += other.rejected;
        self.retried += other.retried;
        self.already_done += other.already_done;
        self.stopped.extend(other.stopped);
    }
}

impl Summary {
    /// Events that reached a terminal outcome in this run.
    pub fn terminal(&self) -> u64 {
        self.accepted + self.replayed + self.rejected
    }
}
