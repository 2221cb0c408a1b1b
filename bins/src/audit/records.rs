//! A consumer inbox's rows as the audit reads them, whichever store holds them.

use chrono::{DateTime, Utc};
use outbox_core::{Account, MessageKind};

/// A consumer's processed marker for one instruction (`inbox_messages`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMarker {
    pub consumer: String,
    pub account: Account,
    pub sequence: u64,
    pub kind: MessageKind,
    pub applied_at: DateTime<Utc>,
}

/// A message still waiting in a consumer's gap queue (`inbox_held`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldMessage {
    pub consumer: String,
    pub account: Account,
    pub sequence: u64,
    pub kind: MessageKind,
    pub held_at: DateTime<Utc>,
}
