//! `outbox status --json`: one object, timestamps in RFC 3339, ages in seconds.

use chrono::{DateTime, Utc};
use outbox_core::status::Backlog;
use serde_json::{Value, json};

use super::gather::Snapshot;
use crate::commands::exceptions::to_json as exception_json;

fn backlog(backlog: &Backlog, now: DateTime<Utc>) -> Value {
    json!({
        "pending": backlog.pending,
        "oldest_at": backlog.oldest_at.map(|at| at.to_rfc3339()),
        "oldest_age_seconds": backlog.oldest_at.map(|at| (now - at).num_milliseconds().max(0) as f64 / 1000.0),
    })
}

pub fn render(snapshot: &Snapshot, now: DateTime<Utc>) -> Value {
    let relays: Vec<Value> = snapshot
        .outbox
        .relays
        .iter()
        .map(|r| {
            json!({
                "relay": r.relay,
                "cursor_updated_at": r.cursor_updated_at.map(|at| at.to_rfc3339()),
                "backlog": r.backlog.as_ref().map(|b| backlog(b, now)),
            })
        })
        .collect();
    let accounts: Vec<Value> = snapshot
        .outbox
        .accounts
        .iter()
        .map(|a| {
            json!({
                "account": a.account.as_str(),
                "state": a.state,
                "sequence": a.sequence,
                "event_id": a.event_id.map(|id| id.to_string()),
                "attempts": a.attempts,
                "reason": a.reason,
                "since": a.since.to_rfc3339(),
            })
        })
        .collect();
    let destinations: Vec<Value> = snapshot
        .destinations
        .iter()
        .map(|d| {
            json!({
                "destination": d.destination,
                "cursor": d.cursor,
                "cursor_updated_at": d.cursor_updated_at.map(|at| at.to_rfc3339()),
                "backlog": backlog(&d.backlog, now),
                "refused": d.refused,
            })
        })
        .collect();
    let gaps: Vec<Value> = snapshot
        .gaps
        .iter()
        .map(|g| {
            json!({
                "consumer": g.consumer,
                "account": g.account.as_str(),
                "last_applied": g.last_applied,
                "lowest_held": g.lowest_held,
                "missing_from": g.last_applied + 1,
                "held": g.held,
                "oldest_held_at": g.oldest_held_at.to_rfc3339(),
            })
        })
        .collect();
    let exceptions: serde_json::Map<String, Value> = snapshot
        .exceptions
        .iter()
        .map(|(flag, open)| (flag.clone(), open.iter().map(exception_json).collect()))
        .collect();
    json!({
        "at": now.to_rfc3339(),
        "relays": relays,
        "held_accounts": accounts,
        "postgres_horizon": snapshot.outbox.horizon.map(|h| json!({
            "oldest_age_seconds": h.oldest_age.as_secs_f64(),
            "held_back": h.held_back,
        })),
        "destinations": destinations,
        "gaps": gaps,
        "open_exceptions": exceptions,
    })
}
