//! `outbox status` as text: one section per part, a line per item, ages next to
//! timestamps so the reader at 02:14 does not do arithmetic.

use std::fmt::Write;

use chrono::{DateTime, Utc};
use outbox_core::status::Backlog;

use super::gather::{AccountHold, Snapshot};

fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let age = (now - at).num_seconds().max(0);
    format!(
        "{} ({} ago)",
        at.format("%Y-%m-%dT%H:%M:%SZ"),
        age_text(age)
    )
}

fn age_text(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn backlog(backlog: &Backlog, now: DateTime<Utc>) -> String {
    match backlog.oldest_at {
        Some(at) => format!("pending {}, oldest {}", backlog.pending, when(at, now)),
        None => format!("pending {}", backlog.pending),
    }
}

pub fn render(snapshot: &Snapshot, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let outbox = &snapshot.outbox;
    let _ = writeln!(out, "relays ({})", outbox.relays.len());
    for relay in &outbox.relays {
        let moved = relay.cursor_updated_at.map_or_else(
            || "no cursor yet".to_owned(),
            |at| format!("cursor moved {}", when(at, now)),
        );
        let pending = relay.backlog.as_ref().map_or_else(
            || "a fleet partition: see the relay's total".to_owned(),
            |b| backlog(b, now),
        );
        let _ = writeln!(out, "  {}: {pending}; {moved}", relay.relay);
    }
    if let Some(horizon) = &outbox.horizon {
        let _ = writeln!(
            out,
            "postgres horizon: oldest xid holder open {}, holding back {} committed events",
            age_text(horizon.oldest_age.as_secs() as i64),
            horizon.held_back
        );
    }
    let _ = writeln!(out, "held accounts ({})", outbox.accounts.len());
    for account in &outbox.accounts {
        let state = match account.state {
            AccountHold::Retrying => "retrying",
            AccountHold::Stopped => "STOPPED",
        };
        let event = account
            .event_id
            .map_or_else(String::new, |id| format!(" event {id}"));
        let _ = writeln!(
            out,
            "  {} #{} {state}{event}, {} failed attempts, since {}: {}",
            account.account.as_str(),
            account.sequence,
            account.attempts,
            when(account.since, now),
            account.reason.replace('\n', " ")
        );
    }
    let _ = writeln!(
        out,
        "fan-out destinations ({})",
        snapshot.destinations.len()
    );
    for destination in &snapshot.destinations {
        let _ = writeln!(
            out,
            "  {}: cursor {}, {}, refused for good {}",
            destination.destination,
            destination.cursor,
            backlog(&destination.backlog, now),
            destination.refused
        );
    }
    let _ = writeln!(out, "open gaps ({})", snapshot.gaps.len());
    for gap in &snapshot.gaps {
        let _ = writeln!(
            out,
            "  {} {}: applied through #{}, missing #{}, {} held since {}",
            gap.consumer,
            gap.account.as_str(),
            gap.last_applied,
            gap.last_applied + 1,
            gap.held,
            when(gap.oldest_held_at, now)
        );
    }
    for (flag, open) in &snapshot.exceptions {
        let _ = writeln!(out, "open exceptions in --{flag} ({})", open.len());
        for e in open {
            let _ = writeln!(
                out,
                "  #{} {} {} {} #{} (source {}, {}): {}",
                e.id,
                e.severity.as_str(),
                e.kind.as_str(),
                e.account.as_str(),
                e.sequence,
                e.source,
                when(e.detected_at, now),
                e.detail.replace('\n', " ")
            );
        }
    }
    out
}
