//! The contradictions an audit looks for between the records of one event. Each is a
//! pair of facts that cannot both hold if the event moved exactly once; a state that
//! is only unfinished (a delivery still to come, a notice not yet written, a consumer
//! behind) is not one.

use super::report::{Attempt, Report};

/// Every contradiction in `report`, in the order the money moves.
pub fn findings(report: &Report) -> Vec<String> {
    let mut found = Vec::new();
    let terminal: Vec<&Attempt> = report
        .deliveries
        .iter()
        .filter(|d| d.outcome != "failed")
        .collect();
    if let Some(first) = terminal.first() {
        for later in &terminal[1..] {
            let refused = |a: &Attempt| a.outcome == "rejected";
            if refused(first) != refused(later) || first.ledger_tx_id != later.ledger_tx_id {
                found.push(format!(
                    "delivery records disagree: attempt {} {} (ledger tx {}), attempt {} {} (ledger tx {})",
                    first.attempt,
                    first.outcome,
                    tx_text(first.ledger_tx_id),
                    later.attempt,
                    later.outcome,
                    tx_text(later.ledger_tx_id)
                ));
            }
        }
    }
    let first = terminal.first().copied();
    let refusal = first.filter(|a| a.outcome == "rejected");
    let recorded_tx = first
        .filter(|a| a.outcome != "rejected")
        .and_then(|a| a.ledger_tx_id);

    let mut ledger_committed = false;
    if let Some(ledger) = &report.ledger {
        let ids: Vec<u64> = ledger.transactions.iter().map(|tx| tx.id).collect();
        ledger_committed = !ids.is_empty();
        if ids.len() > 1 {
            found.push(format!(
                "{} ledger transactions carry this event id ({}): it was posted more than once",
                ids.len(),
                list(&ids)
            ));
        }
        match (recorded_tx, ids.first()) {
            (Some(recorded), None) => found.push(format!(
                "the outbox recorded ledger transaction {recorded}, but no ledger transaction carries the event id"
            )),
            (Some(recorded), Some(&on_ledger)) if recorded != on_ledger => found.push(format!(
                "the outbox recorded ledger transaction {recorded}, but the ledger's transaction carrying the event id is {on_ledger}"
            )),
            _ => {}
        }
        if let (Some(refusal), Some(on_ledger)) = (refusal, ids.first()) {
            found.push(format!(
                "the outbox recorded a refusal ({}), yet ledger transaction {on_ledger} carries the event id: a refused payout was committed",
                refusal.error_code.as_deref().unwrap_or("no code")
            ));
        }
        if let Some(log) = ledger.log.as_ref().filter(|log| log.intact) {
            match (&log.entry, ids.first()) {
                (None, Some(on_ledger)) => found.push(format!(
                    "the ledger's log holds no entry keyed by the event id (checked through log {}), yet transaction {on_ledger} carries it",
                    log.through.map_or_else(|| "none".to_owned(), |id| id.to_string())
                )),
                (Some(entry), Some(&on_ledger))
                    if entry.transaction_id.is_some_and(|id| id != on_ledger) =>
                {
                    found.push(format!(
                        "log entry {} (keyed by the event id) records transaction {}, not {on_ledger}",
                        entry.id,
                        tx_text(entry.transaction_id)
                    ));
                }
                _ => {}
            }
        }
    }

    // What Hop 2 and the consumer must report: the outbox's terminal outcome, or the
    // ledger's transaction when the outbox has not recorded one yet.
    let posted_kind = if report.outbox.command == "revert" {
        "reverted"
    } else {
        "committed"
    };
    let expected = match (first, ledger_committed) {
        (Some(a), _) if a.outcome == "rejected" => Some("rejected"),
        (Some(_), _) | (None, true) => Some(posted_kind),
        (None, false) => None,
    };
    if let Some(hop2) = &report.hop2 {
        for m in &hop2.messages {
            if let Some(expected) = expected.filter(|e| *e != m.kind) {
                found.push(format!(
                    "the Hop 2 message at position {} reports the event as {}, but it was {expected}",
                    m.position, m.kind
                ));
            }
        }
    }
    if let Some(consumer) = &report.consumer {
        for marker in &consumer.inbox {
            if let Some(expected) = expected.filter(|e| *e != marker.kind) {
                found.push(format!(
                    "consumer {} applied the event as {}, but it was {expected}",
                    marker.consumer, marker.kind
                ));
            }
        }
    }
    found
}

fn tx_text(id: Option<u64>) -> String {
    id.map_or_else(|| "none".to_owned(), |id| id.to_string())
}

fn list(ids: &[u64]) -> String {
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
