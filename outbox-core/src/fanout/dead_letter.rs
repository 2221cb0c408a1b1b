//! Dead letters: the messages a destination refused for good, the later messages of
//! the same account set aside behind them, and the replay requests that release them.
//!
//! A permanent refusal parks its account at that destination. Its later messages are
//! recorded behind the refusal, in position order, so the destination's cursor can
//! pass them and the rest of the destination keeps flowing; nothing of the account is
//! sent until a replay request releases it. The running fan-out loop then re-publishes
//! the account's recorded messages in position order (its sequence order) before
//! anything newer of that account. All three records are append-only; the replay's
//! progress is a forward-only position per account, like a cursor.

use chrono::{DateTime, Utc};

use crate::domain::Account;

/// Why a message is in the dead-letter record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// The destination refused this message permanently.
    Refused,
    /// A later message of a parked account, waiting behind its refusal.
    SetAside,
}

impl DeadLetterReason {
    /// The stable name stored in the `fanout_dead_letters.reason` column and shown by
    /// `outbox fanout dead-letters`: `refused` or `set_aside`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::SetAside => "set_aside",
        }
    }

    /// The reason named `text` by [`as_str`](Self::as_str); `None` for any other text
    /// (a store reads that as corrupt data).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "refused" => Some(Self::Refused),
            "set_aside" => Some(Self::SetAside),
            _ => None,
        }
    }
}

/// A dead-letter record to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDeadLetter {
    /// The destination (the publisher's name, which also names its cursor).
    pub destination: String,
    /// The message's position in the fan-out store.
    pub position: u64,
    /// The account the message belongs to: the one parked at this destination.
    pub account: Account,
    /// The message's per-account sequence (`outbox_sequence`).
    pub sequence: u64,
    /// The message's instruction id (the outbox event id), so an operator can find it
    /// in the outbox and in the consumer's inbox.
    pub instruction_id: String,
    /// Whether the destination refused this message or it waits behind a refusal.
    pub reason: DeadLetterReason,
    /// The destination's answer (refused), or the refusal the message waits behind.
    pub error: String,
}

/// A dead-letter record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Increasing in append order, unique across destinations.
    pub id: u64,
    /// The destination (the publisher's name), as in [`NewDeadLetter::destination`].
    pub destination: String,
    /// The message's position in the fan-out store, where the message itself stays
    /// (see [`super::FanoutStore::read_set_aside`]).
    pub position: u64,
    /// The account the message belongs to.
    pub account: Account,
    /// The message's per-account sequence.
    pub sequence: u64,
    /// The message's instruction id (the outbox event id).
    pub instruction_id: String,
    /// Refused by the destination, or set aside behind a refusal.
    pub reason: DeadLetterReason,
    /// The destination's answer (refused), or the refusal the message waits behind.
    pub error: String,
    /// When the store appended the record.
    pub dead_lettered_at: DateTime<Utc>,
}

/// Which dead letters to read: `id > after_id`, ascending, at most `limit`, of one
/// destination and account or of all.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetterQuery<'a> {
    /// Only this destination's records (a publisher's name); `None`: every destination.
    pub destination: Option<&'a str>,
    /// Only this account's records; `None`: every account.
    pub account: Option<&'a Account>,
    /// Records with an id above this one: 0 (the default) from the first, the last
    /// id of the previous page to read the next.
    pub after_id: u64,
    /// Most records returned (1000 by default).
    pub limit: usize,
}

impl Default for DeadLetterQuery<'_> {
    fn default() -> Self {
        Self {
            destination: None,
            account: None,
            after_id: 0,
            limit: 1000,
        }
    }
}

/// An operator's request to re-publish an account's dead letters at a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRequest {
    /// Increasing in request order.
    pub id: u64,
    /// The destination (the publisher's name) whose loop replays.
    pub destination: String,
    /// The account whose dead letters are re-published.
    pub account: Account,
    /// The account's latest refusal when the request was made (its dead letter's id):
    /// a refusal recorded after the request (the replay refused again) is not covered.
    pub refusal_id: u64,
    /// When the store appended the request.
    pub requested_at: DateTime<Utc>,
}

/// Where an account with dead letters stands at one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterAccount {
    /// The account with dead letters at the destination.
    pub account: Account,
    /// The id of the account's latest refusal.
    pub refusal_id: u64,
    /// The per-account sequence of that refused message.
    pub refused_sequence: u64,
    /// The fan-out store position of that refused message.
    pub refused_position: u64,
    /// The highest position recorded for the account (refused or set aside).
    pub last_position: u64,
    /// The highest position a replay re-published (0: none yet).
    pub replayed_through: u64,
    /// Whether a replay request covers the latest refusal.
    pub released: bool,
    /// Dead-letter records of the account (a message refused again counts again).
    pub records: u64,
}

/// The state an account's dead letters are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterState {
    /// Parked: nothing of the account is sent until a replay request.
    Parked,
    /// Released: the loop re-publishes the recorded messages, in order.
    Replaying,
    /// Every recorded message was re-published and confirmed.
    Replayed,
}

impl DeadLetterState {
    /// The name `outbox fanout dead-letters` shows: `parked`, `replaying` or `replayed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Parked => "parked",
            Self::Replaying => "replaying",
            Self::Replayed => "replayed",
        }
    }
}

impl DeadLetterAccount {
    /// Where the account stands: parked until a replay request covers its latest
    /// refusal, replaying while a recorded position is above `replayed_through`,
    /// replayed once every recorded message was re-published and confirmed.
    pub fn state(&self) -> DeadLetterState {
        if !self.released {
            DeadLetterState::Parked
        } else if self.last_position > self.replayed_through {
            DeadLetterState::Replaying
        } else {
            DeadLetterState::Replayed
        }
    }
}

/// The cursor name under which the default [`super::FanoutStore`] methods keep an
/// account's replay progress at a destination.
pub fn replay_progress_key(destination: &str, account: &Account) -> String {
    format!("{destination}@replayed:{}", account.as_str())
}
