//! What the checks ask of a deployment's databases, answered by each store
//! (`sqlite.rs`, `postgres.rs`). Every write a check makes happens in a transaction
//! it rolls back: a check leaves no row, no sequence number and no lock behind.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::{
    Accepted, Account, Amount, Asset, EventId, InboxMessage, LedgerCommand, MessageKind, Metadata,
    NewEvent, OutboxEvent, PostBody, PostCommand, Posting, Result,
};

/// The schema version applied and the newest this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub applied: i64,
    pub current: i64,
}

/// Two enqueues of the check's own account, each rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    pub account: String,
    pub first_sequence: u64,
    pub second_sequence: u64,
    /// Rows of that account after both rollbacks (must be 0).
    pub rows_left: u64,
}

/// Numbers missing from one account's sequence: `from..=to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    pub account: String,
    pub from: u64,
    pub to: u64,
}

/// What the database said to one forbidden change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Refused, with the database's message.
    Refused(String),
    /// Done: the control is missing.
    Allowed,
}

/// UPDATE and DELETE tried on a row the check inserted, all rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    pub table: &'static str,
    pub update: Attempt,
    pub delete: Attempt,
}

/// One redelivery tried through a consumer's inbox, rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redelivery {
    pub consumer: String,
    pub instruction_id: String,
    /// What the first delivery did (`None` for a message already applied for real).
    pub first: Option<Accepted>,
    pub again: Accepted,
    /// Times the impact handler ran for the redelivery (must be 0).
    pub impact_calls_on_redelivery: u32,
}

/// A consumer's high-water mark for one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub consumer: String,
    pub account: String,
    pub last_applied: u64,
}

/// A consumer's oldest held message of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub consumer: String,
    pub account: String,
    pub last_applied: u64,
    pub lowest_held: u64,
    pub held_at: DateTime<Utc>,
}

/// A database of the deployment: the outbox's, the consumer's or the fan-out's.
#[async_trait]
pub trait Db: Send + Sync {
    /// The URL, without credentials, for the report.
    fn name(&self) -> String;
    /// Table names in the database (or schema).
    async fn tables(&self) -> Result<BTreeSet<String>>;
    /// Column names of `table`, in order.
    async fn columns(&self, table: &str) -> Result<Vec<String>>;
    /// Column sets of the primary key and every unique index of `table`.
    async fn unique_keys(&self, table: &str) -> Result<Vec<BTreeSet<String>>>;
    /// The outbox schema's migration state.
    async fn migration(&self) -> Result<Migration>;
    /// Enqueues `event` twice, each time in a transaction rolled back.
    async fn rolled_back_enqueues(&self, first: NewEvent, second: NewEvent) -> Result<Rollback>;
    /// The `n` most recent outbox events, newest first.
    async fn recent_events(&self, n: usize) -> Result<Vec<OutboxEvent>>;
    /// Missing sequence numbers per account, from 1 up to each account's highest.
    async fn sequence_holes(&self) -> Result<Vec<Hole>>;
    /// Whether whole periods of the outbox were dropped by retention (so an account
    /// may rightly start above 1).
    async fn retention_dropped(&self) -> Result<bool>;
    /// The highest sequence of each account.
    async fn max_sequences(&self) -> Result<BTreeMap<String, u64>>;
    /// Tries UPDATE and DELETE on a row of `table` the check inserts itself.
    async fn try_changes(&self, table: &'static str) -> Result<Changes>;
    /// Redelivers, in a rolled-back transaction, the most recent applied message of
    /// each consumer and a message of the check's own (delivered twice).
    async fn redeliveries(&self) -> Result<Vec<Redelivery>>;
    async fn high_water_marks(&self) -> Result<Vec<Mark>>;
    async fn held_gaps(&self) -> Result<Vec<Held>>;
    /// The retention policy `outbox retention set` stored, if any.
    async fn retention_policy(
        &self,
    ) -> Result<Option<outbox_core::retention::StoredRetentionPolicy>>;
}

/// The check's own account and event: never committed, named so nobody mistakes
/// them for a payout (`outbox_check:<uuid>`).
pub fn check_event() -> NewEvent {
    let id = EventId::new();
    let account = Account::parse(&format!("outbox_check:{}", id.as_uuid().simple()))
        .expect("a UUID makes a valid address segment");
    synthetic(account)
}

/// Another event of the same check account.
pub fn synthetic(account: Account) -> NewEvent {
    NewEvent::new(
        account.clone(),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: Account::parse("world").expect("valid"),
                destination: account,
                amount: Amount::new(1),
                asset: Asset::parse("USD/2").expect("valid"),
            }]),
            reference: None,
            metadata: Metadata::from([("event_type".into(), "outbox.check".into())]),
        }),
    )
    .with_event_id(EventId::new())
}

/// The check's own inbox message: a fresh instruction on a fresh account, sequence 1.
pub fn check_message() -> InboxMessage {
    let id = EventId::new();
    InboxMessage {
        instruction_id: format!("outbox-check-{id}"),
        account: Account::parse(&format!("outbox_check:{}", id.as_uuid().simple())).expect("valid"),
        sequence: 1,
        kind: MessageKind::Committed,
        payload: b"{}".to_vec(),
    }
}
