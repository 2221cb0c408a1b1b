//! The metrics the engines record, through the [`metrics`](https://docs.rs/metrics)
//! facade: nothing is recorded until the process installs a recorder (the `outbox`
//! binary installs a Prometheus one), so a library user pays nothing by default.
//!
//! One prefix (`outbox_`), base units (seconds, bytes), `_total` counters, and no
//! label that grows with the data: a relay, destination or consumer name, an
//! exception kind, never an account or an event. Every name is listed in [`NAMES`]
//! with its help text, and documented in `docs/METRICS.md`.
//!
//! Counters and the relay's and loops' own gauges are recorded here, where the events
//! happen; the gauges read from the databases (pending events, gaps, open
//! exceptions, the PostgreSQL horizon…) are set by the process's sampler with the
//! `set_*` functions below, so their names live in one place too.

use std::time::Duration;

use ::metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

use crate::inbox::Accepted;

/// Events enqueued (counted when `enqueue` returns, in the enqueuing process).
pub const EVENTS_ENQUEUED: &str = "outbox_events_enqueued_total";
/// Events the ledger accepted as new transactions.
pub const RELAY_POSTED: &str = "outbox_relay_events_posted_total";
/// Events the ledger answered with `Idempotency-Hit` (a replay of the original).
pub const RELAY_REPLAYED: &str = "outbox_relay_events_replayed_total";
/// Events the ledger refused (business refusals: each raises an exception).
pub const RELAY_REJECTED: &str = "outbox_relay_events_rejected_total";
/// Failed delivery attempts (transient or permanent).
pub const RELAY_FAILED: &str = "outbox_relay_events_failed_total";
/// Ledger call latency.
pub const RELAY_POST_DURATION: &str = "outbox_relay_post_duration_seconds";
/// Events per bulk request.
pub const RELAY_BULK_SIZE: &str = "outbox_relay_bulk_size";
/// Accounts parked after a transient failure (waiting for their retry).
pub const RELAY_PARKED: &str = "outbox_relay_parked_accounts";
/// Accounts stopped by a permanent failure (waiting for an operator).
pub const RELAY_STOPPED: &str = "outbox_relay_stopped_accounts";
/// Committed events after the relay's saved cursor (sampled).
pub const RELAY_PENDING: &str = "outbox_relay_pending_events";
/// When the oldest of them was enqueued (unix seconds; 0 when none is pending).
pub const RELAY_OLDEST_PENDING: &str = "outbox_relay_oldest_pending_timestamp_seconds";
/// Age of the oldest transaction holding an xid on the PostgreSQL server.
pub const PG_HORIZON_AGE: &str = "outbox_postgres_horizon_age_seconds";
/// Committed outbox rows the PostgreSQL horizon holds back from the reader.
pub const PG_HORIZON_HELD_BACK: &str = "outbox_postgres_horizon_held_back_events";
/// WAL the CDC replication slot keeps on the server.
pub const CDC_SLOT_RETAINED_WAL: &str = "outbox_cdc_slot_retained_wal_bytes";
/// Messages a fan-out destination confirmed.
pub const FANOUT_PUBLISHED: &str = "outbox_fanout_messages_published_total";
/// Messages a fan-out destination refused for good (dead letters).
pub const FANOUT_DEAD_LETTERED: &str = "outbox_fanout_messages_dead_lettered_total";
/// Accounts a fan-out destination does not publish now (`reason`: `retrying` after a
/// transient failure, `dead_letter` behind a refusal until a replay).
pub const FANOUT_PARKED: &str = "outbox_fanout_parked_accounts";
/// 1 while the destination's loop runs, 0 once it ended.
pub const FANOUT_LOOP_ALIVE: &str = "outbox_fanout_loop_alive";
/// Stored messages after the destination's saved cursor (sampled).
pub const FANOUT_PENDING: &str = "outbox_fanout_pending_messages";
/// When the oldest of them was stored (unix seconds; 0 when none is pending).
pub const FANOUT_OLDEST_PENDING: &str = "outbox_fanout_oldest_pending_timestamp_seconds";
/// Messages the inbox applied (a released held message counts when applied).
pub const INBOX_APPLIED: &str = "outbox_inbox_messages_applied_total";
/// Messages the inbox had already applied (redeliveries).
pub const INBOX_DUPLICATES: &str = "outbox_inbox_messages_duplicate_total";
/// Messages held in the gap queue because they skipped a sequence number.
pub const INBOX_HELD: &str = "outbox_inbox_messages_held_total";
/// Messages below the account's applied sequence with a new instruction id.
pub const INBOX_STALE: &str = "outbox_inbox_messages_stale_total";
/// Conflicting sequences or outcomes (each raises an exception).
pub const INBOX_CONFLICTS: &str = "outbox_inbox_conflicts_total";
/// Accounts with a message held behind a missing sequence (sampled).
pub const INBOX_GAPS: &str = "outbox_inbox_gaps";
/// When the oldest held message was held (unix seconds; 0 when none is).
pub const INBOX_OLDEST_GAP: &str = "outbox_inbox_oldest_gap_timestamp_seconds";
/// Open exceptions, by `kind` and `severity` (sampled).
pub const EXCEPTIONS_OPEN: &str = "outbox_exceptions_open";
/// 1 while the last read of the process's database succeeded, else 0 (sampled).
pub const STORE_UP: &str = "outbox_store_up";
/// Always 1; `version` and `config` (a short hash of the effective settings) labels.
pub const INFO: &str = "outbox_info";

/// Every metric name this crate and the `outbox` binary record, with its kind, unit
/// and help text.
pub const NAMES: &[(&str, Kind, &str)] = &[
    (
        EVENTS_ENQUEUED,
        Kind::Counter,
        "Events enqueued (counted by the enqueuing process when enqueue returns).",
    ),
    (
        RELAY_POSTED,
        Kind::Counter,
        "Events the ledger accepted as new transactions.",
    ),
    (
        RELAY_REPLAYED,
        Kind::Counter,
        "Events the ledger answered with Idempotency-Hit: a replay of the original transaction.",
    ),
    (
        RELAY_REJECTED,
        Kind::Counter,
        "Events the ledger refused (each raises a rejected exception).",
    ),
    (
        RELAY_FAILED,
        Kind::Counter,
        "Failed delivery attempts, transient or permanent.",
    ),
    (
        RELAY_POST_DURATION,
        Kind::Histogram,
        "Duration of one ledger call (label call: post, bulk, revert).",
    ),
    (RELAY_BULK_SIZE, Kind::Histogram, "Events per bulk request."),
    (
        RELAY_PARKED,
        Kind::Gauge,
        "Accounts parked after a transient failure, waiting for their retry.",
    ),
    (
        RELAY_STOPPED,
        Kind::Gauge,
        "Accounts stopped by a permanent failure, waiting for an operator.",
    ),
    (
        RELAY_PENDING,
        Kind::Gauge,
        "Committed outbox events after the relay's saved cursor.",
    ),
    (
        RELAY_OLDEST_PENDING,
        Kind::Gauge,
        "Unix time the oldest pending event was enqueued; 0 when none is pending.",
    ),
    (
        PG_HORIZON_AGE,
        Kind::Gauge,
        "Age of the oldest transaction holding an xid on the PostgreSQL server (0 when none).",
    ),
    (
        PG_HORIZON_HELD_BACK,
        Kind::Gauge,
        "Committed outbox rows the PostgreSQL horizon holds back from the polling reader.",
    ),
    (
        CDC_SLOT_RETAINED_WAL,
        Kind::Gauge,
        "WAL the CDC relay's replication slot keeps on the server.",
    ),
    (
        FANOUT_PUBLISHED,
        Kind::Counter,
        "Messages the destination confirmed.",
    ),
    (
        FANOUT_DEAD_LETTERED,
        Kind::Counter,
        "Messages the destination refused for good (dead letters).",
    ),
    (
        FANOUT_PARKED,
        Kind::Gauge,
        "Accounts the destination does not publish now (reason: retrying, dead_letter).",
    ),
    (
        FANOUT_LOOP_ALIVE,
        Kind::Gauge,
        "1 while the destination's fan-out loop runs, 0 once it ended.",
    ),
    (
        FANOUT_PENDING,
        Kind::Gauge,
        "Stored fan-out messages after the destination's saved cursor.",
    ),
    (
        FANOUT_OLDEST_PENDING,
        Kind::Gauge,
        "Unix time the oldest pending message was stored; 0 when none is pending.",
    ),
    (
        INBOX_APPLIED,
        Kind::Counter,
        "Messages the consumer's inbox applied (released held messages included).",
    ),
    (
        INBOX_DUPLICATES,
        Kind::Counter,
        "Redelivered messages the inbox had already applied.",
    ),
    (
        INBOX_HELD,
        Kind::Counter,
        "Messages held in the gap queue behind a missing sequence.",
    ),
    (
        INBOX_STALE,
        Kind::Counter,
        "Messages below the applied sequence with a new instruction id (each raises an exception).",
    ),
    (
        INBOX_CONFLICTS,
        Kind::Counter,
        "Conflicting sequences or outcomes (each raises an exception).",
    ),
    (
        INBOX_GAPS,
        Kind::Gauge,
        "Accounts with a message held behind a missing sequence.",
    ),
    (
        INBOX_OLDEST_GAP,
        Kind::Gauge,
        "Unix time the oldest held message was held; 0 when none is.",
    ),
    (
        EXCEPTIONS_OPEN,
        Kind::Gauge,
        "Open exceptions in the process's database, by kind and severity.",
    ),
    (
        STORE_UP,
        Kind::Gauge,
        "1 while the last read of the process's database succeeded, else 0.",
    ),
    (
        INFO,
        Kind::Gauge,
        "Always 1; labels version and config (a short hash of the effective settings).",
    ),
];

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down, or is set from a reading.
    Gauge,
    /// A distribution (`_bucket`, `_sum`, `_count` series).
    Histogram,
}

/// Registers the help text (and unit) of every name with the installed recorder, so
/// the exposition carries `# HELP` lines. Call once after installing it.
pub fn describe() {
    for &(name, kind, help) in NAMES {
        let unit = if name.ends_with("_seconds") {
            Some(Unit::Seconds)
        } else if name.ends_with("_bytes") {
            Some(Unit::Bytes)
        } else {
            None
        };
        match (kind, unit) {
            (Kind::Counter, _) => describe_counter!(name, help),
            (Kind::Gauge, Some(unit)) => describe_gauge!(name, unit, help),
            (Kind::Gauge, None) => describe_gauge!(name, help),
            (Kind::Histogram, Some(unit)) => describe_histogram!(name, unit, help),
            (Kind::Histogram, None) => describe_histogram!(name, help),
        }
    }
}

/// Seconds since the epoch of a moment, for the `*_timestamp_seconds` gauges.
pub fn unix_seconds(at: chrono::DateTime<chrono::Utc>) -> f64 {
    at.timestamp_micros() as f64 / 1e6
}

/// Counts one event enqueued; the store crates call it when `enqueue` succeeds
/// (a transaction the caller rolls back afterwards was counted too).
pub fn event_enqueued() {
    counter!(EVENTS_ENQUEUED).increment(1);
}

/// What the relay's ledger answered for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelayOutcome {
    Posted,
    Replayed,
    Rejected,
    Failed,
}

pub(crate) fn relay_outcome(relay: &str, outcome: RelayOutcome) {
    let name = match outcome {
        RelayOutcome::Posted => RELAY_POSTED,
        RelayOutcome::Replayed => RELAY_REPLAYED,
        RelayOutcome::Rejected => RELAY_REJECTED,
        RelayOutcome::Failed => RELAY_FAILED,
    };
    counter!(name, "relay" => relay.to_owned()).increment(1);
}

/// One ledger call (`call`: post, bulk, revert) took `elapsed`.
pub(crate) fn relay_call(relay: &str, call: &'static str, elapsed: Duration) {
    histogram!(RELAY_POST_DURATION, "relay" => relay.to_owned(), "call" => call)
        .record(elapsed.as_secs_f64());
}

pub(crate) fn relay_bulk(relay: &str, size: usize) {
    histogram!(RELAY_BULK_SIZE, "relay" => relay.to_owned()).record(size as f64);
}

pub(crate) fn relay_accounts(relay: &str, parked: usize, stopped: usize) {
    gauge!(RELAY_PARKED, "relay" => relay.to_owned()).set(parked as f64);
    gauge!(RELAY_STOPPED, "relay" => relay.to_owned()).set(stopped as f64);
}

/// The sampled backlog of a relay: pending events and when the oldest was enqueued.
pub fn set_relay_backlog(relay: &str, pending: u64, oldest: Option<chrono::DateTime<chrono::Utc>>) {
    gauge!(RELAY_PENDING, "relay" => relay.to_owned()).set(pending as f64);
    gauge!(RELAY_OLDEST_PENDING, "relay" => relay.to_owned()).set(oldest.map_or(0.0, unix_seconds));
}

/// The sampled PostgreSQL horizon: its oldest holder's age and the rows it holds back.
pub fn set_postgres_horizon(age: Duration, held_back: u64) {
    gauge!(PG_HORIZON_AGE).set(age.as_secs_f64());
    gauge!(PG_HORIZON_HELD_BACK).set(held_back as f64);
}

/// The sampled WAL a CDC slot retains.
pub fn set_cdc_slot_wal(slot: &str, retained_bytes: u64) {
    gauge!(CDC_SLOT_RETAINED_WAL, "slot" => slot.to_owned()).set(retained_bytes as f64);
}

pub(crate) fn fanout_published(destination: &str, count: u64) {
    counter!(FANOUT_PUBLISHED, "destination" => destination.to_owned()).increment(count);
}

pub(crate) fn fanout_dead_lettered(destination: &str, count: u64) {
    counter!(FANOUT_DEAD_LETTERED, "destination" => destination.to_owned()).increment(count);
}

pub(crate) fn fanout_parked(destination: &str, retrying: usize, dead_letter: usize) {
    gauge!(FANOUT_PARKED, "destination" => destination.to_owned(), "reason" => "retrying")
        .set(retrying as f64);
    gauge!(FANOUT_PARKED, "destination" => destination.to_owned(), "reason" => "dead_letter")
        .set(dead_letter as f64);
}

/// Marks a destination's loop alive or ended.
pub fn set_fanout_loop_alive(destination: &str, alive: bool) {
    gauge!(FANOUT_LOOP_ALIVE, "destination" => destination.to_owned()).set(if alive {
        1.0
    } else {
        0.0
    });
}

/// The sampled backlog of a destination.
pub fn set_fanout_backlog(
    destination: &str,
    pending: u64,
    oldest: Option<chrono::DateTime<chrono::Utc>>,
) {
    gauge!(FANOUT_PENDING, "destination" => destination.to_owned()).set(pending as f64);
    gauge!(FANOUT_OLDEST_PENDING, "destination" => destination.to_owned())
        .set(oldest.map_or(0.0, unix_seconds));
}

/// Counts one inbox decision of `consumer`, once its transaction committed (an
/// applied message counts the held ones it released).
pub fn inbox_accepted(consumer: &str, accepted: &Accepted) {
    let consumer = consumer.to_owned();
    match accepted {
        Accepted::Applied { released } => {
            counter!(INBOX_APPLIED, "consumer" => consumer).increment(1 + released.len() as u64);
        }
        Accepted::Duplicate => counter!(INBOX_DUPLICATES, "consumer" => consumer).increment(1),
        Accepted::Stale { .. } => counter!(INBOX_STALE, "consumer" => consumer).increment(1),
        Accepted::Held { .. } => counter!(INBOX_HELD, "consumer" => consumer).increment(1),
        Accepted::Conflict { .. } | Accepted::ConflictingOutcome { .. } => {
            counter!(INBOX_CONFLICTS, "consumer" => consumer).increment(1);
        }
    }
}

/// The sampled gap queue of a consumer: accounts waiting and the oldest hold.
pub fn set_inbox_gaps(
    consumer: &str,
    accounts: u64,
    oldest: Option<chrono::DateTime<chrono::Utc>>,
) {
    gauge!(INBOX_GAPS, "consumer" => consumer.to_owned()).set(accounts as f64);
    gauge!(INBOX_OLDEST_GAP, "consumer" => consumer.to_owned())
        .set(oldest.map_or(0.0, unix_seconds));
}

/// The sampled count of open exceptions of one kind and severity.
pub fn set_open_exceptions(kind: &str, severity: &str, count: u64) {
    gauge!(EXCEPTIONS_OPEN, "kind" => kind.to_owned(), "severity" => severity.to_owned())
        .set(count as f64);
}

/// Whether the sampler's last read of the database succeeded.
pub fn set_store_up(up: bool) {
    gauge!(STORE_UP).set(if up { 1.0 } else { 0.0 });
}

/// The `outbox_info` series: the running version and configuration identity.
pub fn set_info(version: &str, config: &str) {
    gauge!(INFO, "version" => version.to_owned(), "config" => config.to_owned()).set(1.0);
}
