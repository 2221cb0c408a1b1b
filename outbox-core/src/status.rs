//! What a deployment's databases say about its progress right now: relay cursors
//! and backlogs, accounts whose head keeps failing, fan-out destinations and their
//! backlogs, gaps in consumers' inboxes, open exceptions.
//!
//! A [`StatusReader`] only reads. Both faces of this state use it: `outbox status`
//! (a report for a person) and the long-running commands' metrics sampler (gauges),
//! so the two never disagree about what "pending" means.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{Account, EventId};
use crate::error::Result;
use crate::exception::Exception;

/// Work not yet done behind a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Backlog {
    /// Records after the cursor.
    pub pending: u64,
    /// When the oldest of them was written (`None` when nothing is pending).
    pub oldest_at: Option<DateTime<Utc>>,
}

/// One relay cursor and what committed after it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RelayStatus {
    /// The relay name (or a fleet partition's cursor name, `<relay>:g<G>:p<K>`).
    pub relay: String,
    /// When the cursor last moved; `None` for a relay that never saved one.
    pub cursor_updated_at: Option<DateTime<Utc>>,
    /// Committed events after the cursor. `None` for a fleet partition's cursor,
    /// which orders only its own accounts: the events after it are not its backlog.
    pub backlog: Option<Backlog>,
}

/// An event with failed delivery attempts and no terminal outcome: the head of an
/// account the relay parked (retrying) or stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FailingEvent {
    /// The account whose head it is.
    pub account: Account,
    /// Its sequence in the account.
    pub sequence: u64,
    /// The outbox event.
    pub event_id: EventId,
    /// Failed attempts recorded.
    pub attempts: u64,
    /// The last attempt's error code.
    pub error_code: Option<String>,
    /// The last attempt's detail.
    pub detail: Option<String>,
    /// When the last attempt was recorded.
    pub last_attempt_at: DateTime<Utc>,
}

/// One fan-out destination's cursor and backlog.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DestinationStatus {
    /// The destination's identity (its cursor's name).
    pub destination: String,
    /// Its saved cursor: every message up to it was confirmed or dead-lettered.
    pub cursor: u64,
    /// When the cursor last moved; `None` before its first save.
    pub cursor_updated_at: Option<DateTime<Utc>>,
    /// Stored messages after the cursor.
    pub backlog: Backlog,
    /// Messages the destination refused for good (dead letters of reason `refused`).
    pub refused: u64,
}

/// One account of a consumer with messages held behind a missing sequence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GapStatus {
    /// The consumer (inbox) name.
    pub consumer: String,
    /// The account waiting.
    pub account: Account,
    /// The account's last applied sequence (0 when none was).
    pub last_applied: u64,
    /// The lowest sequence held: everything between `last_applied` and it is missing.
    pub lowest_held: u64,
    /// Messages held for the account.
    pub held: u64,
    /// When the oldest of them was held.
    pub oldest_held_at: DateTime<Utc>,
}

/// The PostgreSQL snapshot horizon's holder (see `store-postgres`'s horizon).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HorizonReading {
    /// How long the oldest transaction holding an xid has been open.
    pub oldest_age: Duration,
    /// Committed outbox rows it holds back from the polling reader.
    pub held_back: u64,
}

/// Read-only views of an outbox, fan-out or consumer database (a database may hold
/// all three; the tables it does not use are empty).
#[async_trait]
pub trait StatusReader: Send + Sync {
    /// Every relay cursor's name (read horizons and handover markers left out).
    async fn relay_names(&self) -> Result<Vec<String>>;

    /// One relay's cursor and backlog (everything, for a relay with no cursor yet).
    async fn relay(&self, relay: &str) -> Result<RelayStatus>;

    /// Every event that has failed attempts and no terminal outcome, by account
    /// and sequence.
    async fn failing_events(&self) -> Result<Vec<FailingEvent>>;

    /// Every fan-out destination with a saved cursor.
    async fn destination_names(&self) -> Result<Vec<String>>;

    /// One destination's cursor and backlog (from position 0 without a cursor).
    async fn destination(&self, destination: &str) -> Result<DestinationStatus>;

    /// Every account of every consumer that holds messages, by consumer and account.
    async fn gaps(&self) -> Result<Vec<GapStatus>>;

    /// Every exception without a resolution, oldest first.
    async fn open_exceptions(&self) -> Result<Vec<Exception>>;

    /// The snapshot horizon, on a store that has one (PostgreSQL).
    async fn horizon(&self) -> Result<Option<HorizonReading>> {
        Ok(None)
    }

    /// WAL a replication slot retains, on a store that has slots (PostgreSQL);
    /// `None` when there is no such slot.
    async fn slot_retained_wal_bytes(&self, slot: &str) -> Result<Option<u64>> {
        let _ = slot;
        Ok(None)
    }
}

/// Whether a relay cursor name is a fleet partition's (`<relay>:g<G>:p<K>`).
pub fn is_partition_cursor(name: &str) -> bool {
    name.rsplit_once(":p").is_some_and(|(head, partition)| {
        partition.chars().all(|c| c.is_ascii_digit())
            && head
                .rsplit_once(":g")
                .is_some_and(|(_, generation)| generation.chars().all(|c| c.is_ascii_digit()))
    })
}

/// Whether a relay cursor name is a relay's own cursor, not a read horizon
/// (`@attempted`) or a CDC handover marker.
pub fn is_relay_cursor(name: &str) -> bool {
    !name.contains('@')
}

/// Whether a fan-out cursor name is a destination's, not the catch-up checkpoint
/// (`ledger-log:`) or a replay's progress (`@replayed:`).
pub fn is_destination_cursor(name: &str) -> bool {
    !name.starts_with("ledger-log:") && !name.contains("@replayed:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_names_are_told_apart() {
        assert!(is_partition_cursor("relay:g1:p3"));
        assert!(!is_partition_cursor("relay"));
        assert!(!is_partition_cursor("my:pretty:relay"));
        assert!(is_relay_cursor("relay"));
        assert!(!is_relay_cursor("relay@attempted"));
        assert!(!is_relay_cursor("relay@cdc-handover"));
        assert!(is_destination_cursor("http://127.0.0.1:9000/hook"));
        assert!(!is_destination_cursor("ledger-log:payouts"));
        assert!(!is_destination_cursor(
            "kafka://b:9092/t@replayed:merchants:1"
        ));
    }
}
