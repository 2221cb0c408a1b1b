//! Balances per account and asset against the provider's statement (the
//! reconciliation function's check).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{Account, EventId};
use crate::error::Result;

/// An outbox event the relay posted, for naming what came last before a drift.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedEvent {
    /// The event's account.
    pub account: Account,
    /// Its sequence.
    pub sequence: u64,
    /// Its id.
    pub event_id: EventId,
    /// The ledger transaction its delivery recorded.
    pub ledger_tx: Option<u64>,
}

/// What the balance check reads from the outbox database.
#[async_trait]
pub trait PostedHistory: Send + Sync {
    /// Up to `limit` events of any of `accounts` that were enqueued at or before
    /// `before` and have an accepted or replayed delivery, highest sequence first per
    /// account, newest first overall.
    async fn last_posted(
        &self,
        accounts: &[Account],
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<PostedEvent>>;
}
