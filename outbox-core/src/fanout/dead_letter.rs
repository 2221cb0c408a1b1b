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
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::SetAside => "set_aside",
        }
    }

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
    pub account: Account,
    pub sequence: u64,
    pub instruction_id: String,
    pub reason: DeadLetterReason,
    /// The destination's answer (refused), or the refusal the message waits behind.
    pub error: String,
}

/// A dead-letter record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Increasing in append order, unique across destinations.
    pub id: u64,
    pub destination: String,
    pub position: u64,
    pub account: Account,
    pub sequence: u64,
    pub instruction_id: String,
    pub reason: DeadLetterReason,
    pub error: String,
    pub dead_lettered_at: DateTime<Utc>,
}

/// Which dead letters to read: `id > after_id`, ascending, at most `limit`, of one
/// destination and account or of all.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetterQuery<'a> {
    pub destination: Option<&'a str>,
    pub account: Option<&'a Account>,
    pub after_id: u64,
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
    pub destination: String,
    pub account: Account,
    /// The account's latest refusal when the request was made (its dead letter's id):
    /// a refusal recorded after the request (the replay refused again) is not covered.
    pub refusal_id: u64,
    pub requested_at: DateTime<Utc>,
}

/// Where an account with dead letters stands at one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterAccount {
    pub account: Account,
    /// The id of the account's latest refusal.
    pub refusal_id: u64,
    /// Sequence and position of that refused message.
    pub refused_sequence: u64,
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
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Parked => "parked",
            Self::Replaying => "replaying",
            Self::Replayed => "replayed",
        }
    }
}

impl DeadLetterAccount {
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
