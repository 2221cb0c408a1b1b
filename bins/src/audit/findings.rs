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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Utc;
    use serde_json::value::RawValue;

    use super::*;
    use crate::audit::report::{ConsumerSection, InboxEntry, LedgerSection, LedgerTx, OutboxRow};

    fn attempt(number: u32, outcome: &'static str, tx: Option<u64>) -> Attempt {
        Attempt {
            attempt: number,
            outcome,
            idempotency_hit: outcome == "replayed",
            ledger_tx_id: tx,
            error_code: (outcome == "rejected").then(|| "INSUFFICIENT_FUND".to_owned()),
            detail: None,
            at: Utc::now(),
        }
    }

    fn tx(id: u64) -> LedgerTx {
        LedgerTx {
            id,
            reference: None,
            timestamp: Utc::now(),
            inserted_at: None,
            metadata: BTreeMap::new(),
            postings: Vec::new(),
            reverted: false,
            reverts: None,
            revert: None,
        }
    }

    fn report(deliveries: Vec<Attempt>, ledger: Option<Vec<LedgerTx>>) -> Report {
        Report {
            event_id: "e".into(),
            outbox: OutboxRow {
                database: "sqlite://x".into(),
                account: "merchants:1".into(),
                sequence: 1,
                created_at: Utc::now(),
                command: "post",
                reverts_event: None,
                payload_sha256: String::new(),
                payload_bytes: 2,
                payload: RawValue::from_string("{}".into()).unwrap(),
            },
            deliveries,
            ledger: ledger.map(|transactions| LedgerSection {
                url: "http://ledger".into(),
                ledger: "payouts".into(),
                transactions,
                rejection_notice: None,
                log: None,
            }),
            hop2: None,
            consumer: None,
            exceptions: Vec::new(),
            not_seen: Vec::new(),
            findings: Vec::new(),
            consistent: false,
        }
    }

    #[test]
    fn a_replay_after_a_failure_is_consistent() {
        let r = report(
            vec![attempt(1, "failed", None), attempt(2, "replayed", Some(7))],
            Some(vec![tx(7)]),
        );
        assert_eq!(findings(&r), Vec::<String>::new());
        // Not delivered yet, or the uncertain window after a crash: unfinished, not wrong.
        assert!(findings(&report(vec![], Some(vec![tx(7)]))).is_empty());
        assert!(findings(&report(vec![], None)).is_empty());
    }

    #[test]
    fn two_transactions_for_one_event_or_another_transaction_are_findings() {
        let twice = findings(&report(
            vec![attempt(1, "accepted", Some(7))],
            Some(vec![tx(7), tx(9)]),
        ));
        assert_eq!(twice.len(), 1, "{twice:?}");
        assert!(
            twice[0].contains("2 ledger transactions carry this event id (7, 9)"),
            "{twice:?}"
        );
        let other = findings(&report(
            vec![attempt(1, "accepted", Some(7))],
            Some(vec![tx(8)]),
        ));
        assert!(other[0].contains("recorded ledger transaction 7, but the ledger's transaction carrying the event id is 8"), "{other:?}");
        let missing = findings(&report(vec![attempt(1, "accepted", Some(7))], Some(vec![])));
        assert!(
            missing[0].contains("no ledger transaction carries the event id"),
            "{missing:?}"
        );
    }

    #[test]
    fn a_refusal_committed_later_and_a_consumer_that_disagrees_are_findings() {
        let committed = findings(&report(
            vec![attempt(1, "rejected", None)],
            Some(vec![tx(3)]),
        ));
        assert!(
            committed[0].contains("a refused payout was committed"),
            "{committed:?}"
        );

        let mut r = report(vec![attempt(1, "rejected", None)], None);
        r.consumer = Some(ConsumerSection {
            database: "sqlite://c".into(),
            inbox: vec![InboxEntry {
                consumer: "treasury".into(),
                kind: "committed",
                sequence: 1,
                applied_at: Utc::now(),
            }],
            held: Vec::new(),
        });
        let f = findings(&r);
        assert_eq!(
            f,
            ["consumer treasury applied the event as committed, but it was rejected"]
        );
    }

    #[test]
    fn terminal_records_that_disagree_are_a_finding() {
        let f = findings(&report(
            vec![
                attempt(1, "accepted", Some(7)),
                attempt(2, "rejected", None),
            ],
            None,
        ));
        assert!(f[0].starts_with("delivery records disagree"), "{f:?}");
    }
}
