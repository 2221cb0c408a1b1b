//! Reading the deployment's state: the one place both `outbox status` and the
//! admin sampler's gauges come from.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use outbox_core::status::{
    DestinationStatus, FailingEvent, GapStatus, HorizonReading, RelayStatus, StatusReader,
    is_partition_cursor,
};
use outbox_core::{Account, EventId, Exception, ExceptionKind, Result};

/// Why an account's events do not go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountHold {
    /// Parked after transient failures: the relay retries it.
    Retrying,
    /// Stopped by a permanent failure: an operator must act (an open exception says why).
    Stopped,
}

/// An account the relay does not move past, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldAccount {
    pub account: Account,
    pub state: AccountHold,
    /// The head event and its sequence, when it has failed attempts recorded.
    pub sequence: u64,
    pub event_id: Option<EventId>,
    pub attempts: u64,
    /// The last error (`CODE: detail`) or the stopping exception's detail.
    pub reason: String,
    pub since: DateTime<Utc>,
}

/// What the outbox database says.
#[derive(Debug, Clone)]
pub struct OutboxPart {
    pub relays: Vec<RelayStatus>,
    pub accounts: Vec<HeldAccount>,
    pub horizon: Option<HorizonReading>,
}

/// Everything `outbox status` shows.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub outbox: OutboxPart,
    pub destinations: Vec<DestinationStatus>,
    pub gaps: Vec<GapStatus>,
    /// Open exceptions of each database read, by the flag that named it.
    pub exceptions: BTreeMap<String, Vec<Exception>>,
}

/// `outbox relay`'s default `--name`.
const DEFAULT_RELAY: &str = "relay";

/// The exception kinds that stop an account in the relay.
fn stops_an_account(kind: ExceptionKind) -> bool {
    matches!(
        kind,
        ExceptionKind::Stopped | ExceptionKind::IdempotencyMismatch
    )
}

/// The accounts the relay holds: each account's lowest failing event, stopped when
/// an open relay exception stopped it, retrying otherwise; plus stopped accounts
/// without failed attempts (a rejection notice that could not be written).
pub fn held_accounts(failing: &[FailingEvent], open: &[Exception]) -> Vec<HeldAccount> {
    let mut stopped: BTreeMap<&Account, &Exception> = BTreeMap::new();
    for exception in open.iter().filter(|e| stops_an_account(e.kind)) {
        stopped.entry(&exception.account).or_insert(exception);
    }
    let mut held = Vec::new();
    let mut seen = BTreeSet::new();
    for event in failing {
        if !seen.insert(&event.account) {
            continue; // a later event of an account already listed: not its head
        }
        let last_error = match (&event.error_code, &event.detail) {
            (Some(code), Some(detail)) => format!("{code}: {detail}"),
            (Some(code), None) => code.clone(),
            (None, Some(detail)) => detail.clone(),
            (None, None) => "failed".to_owned(),
        };
        let (state, reason) = match stopped.get(&event.account) {
            Some(exception) => (AccountHold::Stopped, exception.detail.clone()),
            None => (AccountHold::Retrying, last_error),
        };
        held.push(HeldAccount {
            account: event.account.clone(),
            state,
            sequence: event.sequence,
            event_id: Some(event.event_id),
            attempts: event.attempts,
            reason,
            since: event.last_attempt_at,
        });
    }
    for (account, exception) in stopped {
        if seen.contains(account) {
            continue;
        }
        held.push(HeldAccount {
            account: account.clone(),
            state: AccountHold::Stopped,
            sequence: exception.sequence,
            event_id: exception
                .event_id
                .as_deref()
                .and_then(|id| EventId::parse(id).ok()),
            attempts: 0,
            reason: exception.detail.clone(),
            since: exception.detected_at,
        });
    }
    held.sort_by(|a, b| a.account.cmp(&b.account));
    held
}

/// Every relay cursor's status, or only `relay`'s.
pub async fn relays(reader: &dyn StatusReader, relay: Option<&str>) -> Result<Vec<RelayStatus>> {
    let names = match relay {
        Some(name) => vec![name.to_owned()],
        None => reader.relay_names().await?,
    };
    let mut relays = Vec::with_capacity(names.len());
    for name in names {
        relays.push(reader.relay(&name).await?);
    }
    Ok(relays)
}

/// Every destination with a cursor, or only the named ones (with or without one).
pub async fn destinations(
    reader: &dyn StatusReader,
    names: Option<&[String]>,
) -> Result<Vec<DestinationStatus>> {
    let names = match names {
        Some(names) => names.to_vec(),
        None => reader.destination_names().await?,
    };
    let mut destinations = Vec::with_capacity(names.len());
    for name in names {
        destinations.push(reader.destination(&name).await?);
    }
    Ok(destinations)
}

/// A consumer's gap queue in two figures: accounts waiting and the oldest hold.
pub fn gap_summary(gaps: &[GapStatus], consumer: &str) -> (u64, Option<DateTime<Utc>>) {
    let mine = gaps.iter().filter(|g| g.consumer == consumer);
    let accounts = mine.clone().count() as u64;
    (accounts, mine.map(|g| g.oldest_held_at).min())
}

/// Open exceptions counted by kind and severity.
pub fn exception_counts(open: &[Exception]) -> BTreeMap<(&'static str, &'static str), u64> {
    let mut counts = BTreeMap::new();
    for exception in open {
        *counts
            .entry((exception.kind.as_str(), exception.severity.as_str()))
            .or_insert(0) += 1;
    }
    counts
}

/// Whether any relay cursor belongs to a fleet (its backlog is not per partition).
pub fn has_fleet(relays: &[RelayStatus]) -> bool {
    relays.iter().any(|r| is_partition_cursor(&r.relay))
}

/// The readers `outbox status` was given, each with the flag that named it.
#[derive(Clone, Copy)]
pub struct Readers<'a> {
    pub outbox: (&'a str, &'a dyn StatusReader),
    pub fanout: Option<(&'a str, &'a dyn StatusReader)>,
    pub consumer: Option<(&'a str, &'a dyn StatusReader)>,
}

impl std::fmt::Debug for Readers<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("outbox", &self.outbox.0)
            .field("fanout", &self.fanout.map(|(flag, _)| flag))
            .field("consumer", &self.consumer.map(|(flag, _)| flag))
            .finish()
    }
}

/// Reads everything `outbox status` shows. The fan-out and consumer parts come
/// from their own databases when given, else from the outbox database (one
/// database may hold all three).
pub async fn snapshot(readers: Readers<'_>) -> Result<Snapshot> {
    let (outbox_flag, outbox) = readers.outbox;
    let mut exceptions = BTreeMap::new();
    let open = outbox.open_exceptions().await?;
    let failing = outbox.failing_events().await?;
    let mut all_relays = relays(outbox, None).await?;
    if all_relays.is_empty() {
        // No relay ran yet: everything committed waits for the default one.
        all_relays = relays(outbox, Some(DEFAULT_RELAY)).await?;
    }
    let outbox_part = OutboxPart {
        relays: all_relays,
        accounts: held_accounts(&failing, &open),
        horizon: outbox.horizon().await?,
    };
    exceptions.insert(outbox_flag.to_owned(), open);
    let (fanout_flag, fanout) = readers.fanout.unwrap_or(readers.outbox);
    let destinations = destinations(fanout, None).await?;
    let (consumer_flag, consumer) = readers.consumer.unwrap_or(readers.outbox);
    let gaps = consumer.gaps().await?;
    for (flag, reader) in [(fanout_flag, fanout), (consumer_flag, consumer)] {
        if !exceptions.contains_key(flag) {
            exceptions.insert(flag.to_owned(), reader.open_exceptions().await?);
        }
    }
    Ok(Snapshot {
        outbox: outbox_part,
        destinations,
        gaps,
        exceptions,
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use outbox_core::NewException;

    use super::*;

    fn account(text: &str) -> Account {
        Account::parse(text).unwrap()
    }

    fn failing(merchant: &str, sequence: u64, code: &str) -> FailingEvent {
        FailingEvent {
            account: account(merchant),
            sequence,
            event_id: EventId::new(),
            attempts: 3,
            error_code: Some(code.to_owned()),
            detail: Some("connection refused".to_owned()),
            last_attempt_at: Utc.timestamp_opt(100, 0).unwrap(),
        }
    }

    fn open(kind: ExceptionKind, merchant: &str, sequence: u64, detail: &str) -> Exception {
        let finding = NewException::new("relay", kind, account(merchant), sequence, detail);
        Exception {
            id: 1,
            source: finding.source,
            kind,
            severity: finding.severity,
            account: finding.account,
            sequence,
            event_id: None,
            ledger_tx: None,
            asset: None,
            ledger_amount: None,
            provider_amount: None,
            detail: finding.detail,
            detected_at: Utc.timestamp_opt(200, 0).unwrap(),
            resolution: None,
        }
    }

    #[test]
    fn the_head_is_listed_once_stopped_when_an_exception_stopped_it() {
        let failing = [
            failing("merchants:1", 2, "TRANSPORT"),
            failing("merchants:1", 3, "TRANSPORT"),
            failing("merchants:2", 1, "IDEMPOTENCY_MISMATCH"),
        ];
        let open = [
            open(
                ExceptionKind::IdempotencyMismatch,
                "merchants:2",
                1,
                "another body",
            ),
            open(
                ExceptionKind::Stopped,
                "merchants:3",
                4,
                "the notice failed for good",
            ),
            open(
                ExceptionKind::Rejected,
                "merchants:4",
                1,
                "INSUFFICIENT_FUND",
            ),
        ];
        let held = held_accounts(&failing, &open);
        let summary: Vec<_> = held
            .iter()
            .map(|h| (h.account.as_str(), h.sequence, h.state, h.reason.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "merchants:1",
                    2,
                    AccountHold::Retrying,
                    "TRANSPORT: connection refused"
                ),
                ("merchants:2", 1, AccountHold::Stopped, "another body"),
                (
                    "merchants:3",
                    4,
                    AccountHold::Stopped,
                    "the notice failed for good"
                ),
            ],
            "a refusal holds nothing back"
        );
        assert_eq!(held[2].attempts, 0);
    }

    #[test]
    fn exceptions_are_counted_by_kind_and_severity_and_gaps_by_consumer() {
        let open = [
            open(ExceptionKind::Rejected, "merchants:4", 1, "a"),
            open(ExceptionKind::Rejected, "merchants:5", 1, "b"),
            open(ExceptionKind::Stopped, "merchants:3", 4, "c"),
        ];
        let counts = exception_counts(&open);
        let rejected = ExceptionKind::Rejected;
        let stopped = ExceptionKind::Stopped;
        assert_eq!(
            counts.get(&(rejected.as_str(), rejected.default_severity().as_str())),
            Some(&2)
        );
        assert_eq!(
            counts.get(&(stopped.as_str(), stopped.default_severity().as_str())),
            Some(&1)
        );
        let gap = |consumer: &str, merchant: &str, at: i64| GapStatus {
            consumer: consumer.to_owned(),
            account: account(merchant),
            last_applied: 1,
            lowest_held: 3,
            held: 1,
            oldest_held_at: Utc.timestamp_opt(at, 0).unwrap(),
        };
        let gaps = [
            gap("treasury", "merchants:1", 50),
            gap("treasury", "merchants:2", 20),
            gap("audit", "merchants:1", 10),
        ];
        assert_eq!(
            gap_summary(&gaps, "treasury"),
            (2, Some(Utc.timestamp_opt(20, 0).unwrap()))
        );
        assert_eq!(gap_summary(&gaps, "nobody"), (0, None));
    }
}
