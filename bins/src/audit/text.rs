//! The readable audit report: the sections of [`Report`] in the order the money
//! moves, each oldest first, then what was not seen and the verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};

use super::report::*;

fn at(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn metadata(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The report as text, one section per record.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let w = &mut out;
    let _ = writeln!(
        w,
        "audit of event {} (the Idempotency-Key on Hop 1, the instruction id on Hop 2)",
        report.event_id
    );
    outbox(w, &report.outbox);
    deliveries(w, &report.deliveries);
    if let Some(ledger) = &report.ledger {
        ledger_section(w, ledger);
    }
    if let Some(hop2) = &report.hop2 {
        hop2_section(w, hop2);
    }
    if let Some(consumer) = &report.consumer {
        consumer_section(w, consumer, report.hop2.as_ref());
    }
    exceptions(w, report);
    if !report.not_seen.is_empty() {
        let _ = writeln!(w, "\nnot seen");
        for part in &report.not_seen {
            let _ = writeln!(w, "  {:<9} {}", part.part, part.why);
        }
    }
    let _ = writeln!(w);
    for finding in &report.findings {
        let _ = writeln!(w, "FINDING  {finding}");
    }
    if let Some(log) = report.ledger.as_ref().and_then(|l| l.log.as_ref())
        && let Some(fault) = &log.fault
    {
        let _ = writeln!(w, "FAILED   {fault}");
    }
    let _ = writeln!(
        w,
        "verdict  {}",
        if report.consistent {
            "consistent"
        } else {
            "INCONSISTENT"
        }
    );
    out
}

fn outbox(w: &mut String, row: &OutboxRow) {
    let _ = writeln!(w, "\noutbox row ({})", row.database);
    let _ = writeln!(
        w,
        "  account {}, sequence {}, created {}",
        row.account,
        row.sequence,
        at(&row.created_at)
    );
    match &row.reverts_event {
        Some(target) => {
            let _ = writeln!(w, "  command revert of event {target}");
        }
        None => {
            let _ = writeln!(w, "  command {}", row.command);
        }
    }
    let _ = writeln!(
        w,
        "  payload sha256 {} ({} bytes, as stored and sent)",
        row.payload_sha256, row.payload_bytes
    );
    let _ = writeln!(w, "  {}", row.payload.get());
}

fn deliveries(w: &mut String, attempts: &[Attempt]) {
    let _ = writeln!(w, "\ndelivery attempts");
    if attempts.is_empty() {
        let _ = writeln!(w, "  none recorded yet");
    }
    for a in attempts {
        let mut line = format!("  #{} {} {}", a.attempt, at(&a.at), a.outcome);
        if let Some(tx) = a.ledger_tx_id {
            let _ = write!(line, ", ledger tx {tx}");
        }
        if a.idempotency_hit {
            line.push_str(
                " (Idempotency-Hit: the ledger answered with the original transaction, nothing new was posted)",
            );
        }
        if let Some(code) = &a.error_code {
            let _ = write!(line, ", {code}");
        }
        if let Some(detail) = &a.detail {
            let _ = write!(line, ": {detail}");
        }
        let _ = writeln!(w, "{line}");
    }
}

fn ledger_section(w: &mut String, ledger: &LedgerSection) {
    let _ = writeln!(w, "\nledger {} at {}", ledger.ledger, ledger.url);
    if ledger.transactions.is_empty() {
        let _ = writeln!(w, "  no transaction carries this event id");
    }
    for tx in &ledger.transactions {
        let _ = writeln!(
            w,
            "  transaction {}, timestamp {}{}",
            tx.id,
            at(&tx.timestamp),
            tx.inserted_at
                .map(|i| format!(", inserted {}", at(&i)))
                .unwrap_or_default()
        );
        if let Some(reference) = &tx.reference {
            let _ = writeln!(w, "    reference {reference}");
        }
        for p in &tx.postings {
            let _ = writeln!(
                w,
                "    posting [{} {}] {} -> {}",
                p.asset, p.amount, p.source, p.destination
            );
        }
        let _ = writeln!(w, "    metadata {}", metadata(&tx.metadata));
        if let Some(target) = tx.reverts {
            let _ = writeln!(w, "    reverts transaction {target}");
        }
        match (&tx.revert, tx.reverted) {
            (Some(revert), _) => {
                let _ = writeln!(
                    w,
                    "    reverted by transaction {}, timestamp {}{}",
                    revert.id,
                    at(&revert.timestamp),
                    revert
                        .event_id
                        .as_ref()
                        .map(|e| format!(" (outbox event {e})"))
                        .unwrap_or_default()
                );
            }
            (None, true) => {
                let _ = writeln!(w, "    reverted (the reverting transaction was not found)");
            }
            (None, false) => {
                let _ = writeln!(w, "    not reverted");
            }
        }
    }
    match &ledger.rejection_notice {
        Some(notice) => {
            let _ = writeln!(
                w,
                "  rejection notice on account {}: {}",
                notice.account, notice.code
            );
        }
        None => {
            let _ = writeln!(w, "  no rejection notice");
        }
    }
    if let Some(log) = &ledger.log {
        match &log.entry {
            Some(entry) => {
                let _ = writeln!(
                    w,
                    "  log entry {} {} at {}{}, hash {}",
                    entry.id,
                    entry.kind,
                    at(&entry.date),
                    entry
                        .transaction_id
                        .map(|id| format!(" (transaction {id})"))
                        .unwrap_or_default(),
                    entry.hash.as_deref().unwrap_or("(none)")
                );
            }
            None if log.intact => {
                let _ = writeln!(w, "  no log entry is keyed by this event id");
            }
            None => {}
        }
        let through = log
            .through
            .map_or_else(|| "none".to_owned(), |id| format!("log {id}"));
        match &log.fault {
            None => {
                let _ = writeln!(
                    w,
                    "  log chain intact: {} hashes recomputed from the first log through {through}",
                    log.checked
                );
            }
            Some(fault) => {
                let _ = writeln!(
                    w,
                    "  log chain confirmed through {through} ({} hashes), then {fault}",
                    log.checked
                );
            }
        }
    }
}

fn hop2_section(w: &mut String, hop2: &Hop2Section) {
    let _ = writeln!(w, "\nhop 2 fan-out ({})", hop2.database);
    if hop2.messages.is_empty() {
        let _ = writeln!(w, "  no message stored for this instruction");
    }
    for m in &hop2.messages {
        let _ = writeln!(
            w,
            "  position {} {}, {} #{}, ledger {}{}, received {}",
            m.position,
            m.kind,
            m.account,
            m.sequence,
            m.ledger,
            m.ledger_tx_id
                .map(|tx| format!(" tx {tx}"))
                .unwrap_or_default(),
            at(&m.received_at)
        );
        for o in &m.overtook {
            let _ = writeln!(
                w,
                "    stored before sequence {} (position {}): a consumer gets it first and holds it at least until {} is applied",
                o.sequence, o.position, o.sequence
            );
        }
        if m.destinations.is_empty() {
            let _ = writeln!(w, "    no destination has saved a cursor yet");
        }
        for d in &m.destinations {
            let state = match &d.dead_letter {
                Some(letter) => format!(
                    "dead-lettered ({}) at {}: {}{}",
                    letter.reason,
                    at(&letter.at),
                    letter.error,
                    if letter.replayed {
                        "; replayed"
                    } else {
                        "; not replayed"
                    }
                ),
                None if d.passed => "passed: published".to_owned(),
                None => "not passed yet".to_owned(),
            };
            let _ = writeln!(w, "    {} cursor {}: {state}", d.destination, d.cursor);
        }
    }
}

fn consumer_section(w: &mut String, consumer: &ConsumerSection, hop2: Option<&Hop2Section>) {
    let _ = writeln!(w, "\nconsumer inbox ({})", consumer.database);
    if consumer.inbox.is_empty() && consumer.held.is_empty() {
        let _ = writeln!(w, "  no consumer has received this instruction");
    }
    for marker in &consumer.inbox {
        let _ = writeln!(
            w,
            "  {}: applied as {} (sequence {}) at {}",
            marker.consumer,
            marker.kind,
            marker.sequence,
            at(&marker.applied_at)
        );
    }
    for held in &consumer.held {
        let _ = writeln!(
            w,
            "  {}: HELD in the gap queue as {} (sequence {}) since {}",
            held.consumer,
            held.kind,
            held.sequence,
            at(&held.held_at)
        );
    }
    if consumer.held.is_empty() && !consumer.inbox.is_empty() {
        // The gap queue keeps no history; Hop 2's order says whether it had to hold it.
        let overtaken = hop2
            .into_iter()
            .flat_map(|h| &h.messages)
            .flat_map(|m| &m.overtook)
            .next();
        match overtaken {
            Some(o) => {
                let _ = writeln!(
                    w,
                    "  held, then released: it reached Hop 2 before sequence {} and was applied after it",
                    o.sequence
                );
            }
            None => {
                let _ = writeln!(
                    w,
                    "  not held now (a released message leaves no gap-queue row)"
                );
            }
        }
    }
}

fn exceptions(w: &mut String, report: &Report) {
    let _ = writeln!(
        w,
        "\nexceptions naming {} #{} or the event id",
        report.outbox.account, report.outbox.sequence
    );
    if report.exceptions.is_empty() {
        let _ = writeln!(w, "  none");
    }
    for e in &report.exceptions {
        let status = match &e.resolution {
            None => "open".to_owned(),
            Some(r) => format!(
                "resolved by {} at {}: {}",
                r.resolved_by,
                at(&r.resolved_at),
                r.note
            ),
        };
        let _ = writeln!(
            w,
            "  {} {} ({} database, raised by {}), {} #{}: {}\n    #{} {}, {status}",
            at(&e.detected_at),
            e.kind,
            e.database,
            e.source,
            e.account,
            e.sequence,
            e.detail,
            e.id,
            e.severity
        );
    }
}
