//! `FanoutStore`: the durable log the webhook intake appends to and the fan-out loop
//! reads, with one cursor per transport kept apart from the (immutable) messages.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::FanoutMessage;
use crate::error::Result;

/// A message as the fan-out store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Strictly increasing in commit order; may have gaps.
    pub position: u64,
    pub message: FanoutMessage,
    pub received_at: DateTime<Utc>,
}

/// What an `append` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppendOutcome {
    /// Messages newly stored.
    pub stored: usize,
    /// Messages already stored under their dedup key (a ledger replay's re-emit).
    pub duplicates: usize,
    /// The webhook id had been appended before (a retried delivery): nothing was stored.
    pub delivery_seen: bool,
}

/// The fan-out log.
///
/// # Contract
/// - `append` is atomic and durable when it returns `Ok`: either the delivery id and
///   every new message are stored, or nothing is. It dedupes on the delivery id
///   (the `formance-webhook-id`) and on each message's [`FanoutMessage::dedup_key`].
///   Stored messages are never updated or deleted.
/// - Positions are assigned so that a reader never sees position `p` committed after
///   it has read a higher one: `read_after(cursor)` must not skip a late commit.
/// - `read_after` returns messages with `position > after`, ascending, at most `limit`.
/// - Cursors are per transport name; `load_cursor` is 0 when none was saved.
///   `save_cursor` only ever moves the cursor forward (a lower value is ignored).
/// - A store that cannot be reached fails with a transient error, so the intake
///   answers 5xx and the ledger retries.
#[async_trait]
pub trait FanoutStore: Send + Sync + 'static {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome>;

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>>;

    async fn load_cursor(&self, transport: &str) -> Result<u64>;

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()>;
}

#[async_trait]
impl<T: FanoutStore + ?Sized> FanoutStore for std::sync::Arc<T> {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        (**self).append(delivery_id, messages).await
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        (**self).read_after(after, limit).await
    }

    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        (**self).load_cursor(transport).await
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        (**self).save_cursor(transport, position).await
    }
}
