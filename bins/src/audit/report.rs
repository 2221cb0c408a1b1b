//! What `outbox audit` reports about one event, section by section in the order the
//! money moves: the outbox row, its delivery attempts, the ledger, Hop 2, the
//! consumer, the exceptions. `--json` prints this structure as it is; the readable
//! report (`text.rs`) renders the same facts.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::value::RawValue;

/// The whole audit of one event.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The event id: Idempotency-Key on Hop 1, instruction id on Hop 2.
    pub event_id: String,
    pub outbox: OutboxRow,
    /// Oldest first.
    pub deliveries: Vec<Attempt>,
    /// `None` when the ledger was not read (see `not_seen`).
    pub ledger: Option<LedgerSection>,
    /// `None` when no fan-out database was given.
    pub hop2: Option<Hop2Section>,
    /// `None` when no consumer database was given.
    pub consumer: Option<ConsumerSection>,
    /// Every exception naming the event's account and sequence, or mentioning its id,
    /// in every database read, oldest first.
    pub exceptions: Vec<ExceptionEntry>,
    /// The parts the audit could not see, and why.
    pub not_seen: Vec<NotSeen>,
    /// Contradictions between the records (each makes the audit fail).
    pub findings: Vec<String>,
    /// Found, no finding, and (with `--verify-log`) an intact chain.
    pub consistent: bool,
}

#[derive(Debug, Serialize)]
pub struct NotSeen {
    pub part: &'static str,
    pub why: String,
}

#[derive(Debug, Serialize)]
pub struct OutboxRow {
    /// The database URL, password hidden.
    pub database: String,
    pub account: String,
    pub sequence: u64,
    pub created_at: DateTime<Utc>,
    /// `post` or `revert`.
    pub command: &'static str,
    /// For a revert, the event id of the payout it reverts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverts_event: Option<String>,
    /// SHA-256 of the stored payload bytes (what the relay sends), hex.
    pub payload_sha256: String,
    pub payload_bytes: usize,
    /// The stored payload, byte for byte.
    pub payload: Box<RawValue>,
}

#[derive(Debug, Serialize)]
pub struct Attempt {
    pub attempt: u32,
    /// `accepted`, `replayed`, `rejected` or `failed`.
    pub outcome: &'static str,
    /// The ledger answered a replay: `Idempotency-Hit: true`, the original transaction.
    pub idempotency_hit: bool,
    pub ledger_tx_id: Option<u64>,
    pub error_code: Option<String>,
    pub detail: Option<String>,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
pub struct LedgerSection {
    /// The API root read.
    pub url: String,
    pub ledger: String,
    /// Every transaction carrying this event id, oldest first (one when exactly once).
    pub transactions: Vec<LedgerTx>,
    /// The relay's rejection notice on the account (`outbox_rejected:<id>`): its code.
    pub rejection_notice: Option<RejectionNotice>,
    /// With `--verify-log`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogCheck>,
}

#[derive(Debug, Serialize)]
pub struct LedgerTx {
    pub id: u64,
    pub reference: Option<String>,
    pub timestamp: DateTime<Utc>,
    pub inserted_at: Option<DateTime<Utc>>,
    pub metadata: BTreeMap<String, String>,
    pub postings: Vec<PostingView>,
    pub reverted: bool,
    /// This transaction is itself a revert of that one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverts: Option<u64>,
    /// The transaction that reverted this one, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert: Option<RevertTx>,
}

#[derive(Debug, Serialize)]
pub struct PostingView {
    pub source: String,
    pub destination: String,
    /// Minor units.
    pub amount: u64,
    pub asset: String,
}

#[derive(Debug, Serialize)]
pub struct RevertTx {
    pub id: u64,
    pub timestamp: DateTime<Utc>,
    pub inserted_at: Option<DateTime<Utc>>,
    /// The outbox event that asked for the revert, when it came through an outbox.
    pub event_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct RejectionNotice {
    pub account: String,
    pub code: String,
}

#[derive(Debug, Serialize)]
pub struct LogCheck {
    /// The log entry the event's write left (keyed by its event id), if found.
    pub entry: Option<LogEntry>,
    /// Entries whose hash was recomputed and matched, from the ledger's first.
    pub checked: u64,
    pub through: Option<u64>,
    pub intact: bool,
    /// Where the chain stopped being confirmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LogEntry {
    pub id: u64,
    #[serde(rename = "type")]
    pub kind: String,
    pub date: DateTime<Utc>,
    pub idempotency_key: Option<String>,
    pub hash: Option<String>,
    /// The transaction id in its data (`data.transaction.id`), when it has one.
    pub transaction_id: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Hop2Section {
    pub database: String,
    /// The destinations the fan-out store knows (each saved a cursor).
    pub destinations: Vec<String>,
    /// Oldest first (by fan-out position).
    pub messages: Vec<Hop2Message>,
}

#[derive(Debug, Serialize)]
pub struct Hop2Message {
    pub position: u64,
    /// `committed`, `reverted` or `rejected`.
    pub kind: &'static str,
    pub ledger: String,
    pub ledger_tx_id: Option<u64>,
    pub account: String,
    pub sequence: u64,
    pub received_at: DateTime<Utc>,
    /// Earlier sequences of the account that reached Hop 2 after this message: a
    /// consumer gets it first and has to hold it until they are applied.
    pub overtook: Vec<Overtaken>,
    pub destinations: Vec<DestinationState>,
}

#[derive(Debug, Serialize)]
pub struct Overtaken {
    pub sequence: u64,
    pub position: u64,
}

#[derive(Debug, Serialize)]
pub struct DestinationState {
    pub destination: String,
    pub cursor: u64,
    /// The destination's cursor is at or past the message.
    pub passed: bool,
    /// The destination refused it, or set it aside behind a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetterState>,
}

#[derive(Debug, Serialize)]
pub struct DeadLetterState {
    /// `refused` or `set_aside`.
    pub reason: &'static str,
    pub error: String,
    pub at: DateTime<Utc>,
    /// Re-published by `outbox fanout replay`.
    pub replayed: bool,
}

#[derive(Debug, Serialize)]
pub struct ConsumerSection {
    pub database: String,
    /// Every consumer's processed marker, oldest first.
    pub inbox: Vec<InboxEntry>,
    /// Gap-queue entries still in place (a released one leaves no row).
    pub held: Vec<HeldEntry>,
}

#[derive(Debug, Serialize)]
pub struct InboxEntry {
    pub consumer: String,
    pub kind: &'static str,
    pub sequence: u64,
    pub applied_at: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
pub struct HeldEntry {
    pub consumer: String,
    pub kind: &'static str,
    pub sequence: u64,
    pub held_at: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
pub struct ExceptionEntry {
    /// Which database holds it: `outbox` or `consumer`.
    pub database: &'static str,
    /// Its id there (`outbox exceptions resolve ID`).
    pub id: i64,
    pub source: String,
    pub kind: &'static str,
    pub severity: &'static str,
    pub account: String,
    pub sequence: u64,
    pub detail: String,
    pub detected_at: DateTime<Utc>,
    /// Who resolved it, when and why; `None` while it is open.
    pub resolution: Option<ResolutionEntry>,
}

#[derive(Debug, Serialize)]
pub struct ResolutionEntry {
    pub resolved_by: String,
    pub note: String,
    pub resolved_at: DateTime<Utc>,
}
