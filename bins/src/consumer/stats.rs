//! `ConsumerStats`: what a reference consumer's inbox did, for progress lines and
//! summaries.

use std::sync::atomic::{AtomicU64, Ordering};

use outbox_core::Accepted;

/// Counters of what the inbox did.
#[derive(Debug, Default)]
pub struct ConsumerStats {
    pub applied: AtomicU64,
    pub duplicates: AtomicU64,
    pub held: AtomicU64,
    pub released: AtomicU64,
    pub stale: AtomicU64,
    /// Two instructions at one sequence, or one instruction with two outcomes.
    pub conflicts: AtomicU64,
}

impl ConsumerStats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Counts one inbox decision (an applied message counts the held ones it released).
    pub fn record(&self, accepted: &Accepted) {
        match accepted {
            Accepted::Applied { released } => {
                self.applied
                    .fetch_add(1 + released.len() as u64, Ordering::Relaxed);
                self.released
                    .fetch_add(released.len() as u64, Ordering::Relaxed);
            }
            Accepted::Duplicate => _ = self.duplicates.fetch_add(1, Ordering::Relaxed),
            Accepted::Stale { .. } => _ = self.stale.fetch_add(1, Ordering::Relaxed),
            Accepted::Held { .. } => _ = self.held.fetch_add(1, Ordering::Relaxed),
            Accepted::Conflict { .. } | Accepted::ConflictingOutcome { .. } => {
                _ = self.conflicts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
