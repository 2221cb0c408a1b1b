//! Hop 1: the outbox against the ledger.

use std::collections::{BTreeMap, HashMap, HashSet};

use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_core::{
    DeliveryOutcome, Ledger, OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY, OUTBOX_SEQUENCE_KEY, Result,
};

use super::{AuditReport, DiscrepancyKind, Expected, Outcome, PAGE};

/// The name the auditor reads the outbox under: it records nothing, so no
/// transaction is ever "seen" under it.
const READER: &str = "outbox-auditor";

/// Every outbox event in commit order, with the outcome the relay recorded.
pub(super) async fn expected(outbox: &dyn CompletenessStore) -> Result<Vec<Expected>> {
    let mut expected = Vec::new();
    let mut after = None;
    loop {
        let page = outbox.events_to_check(READER, after, PAGE).await?;
        let full = page.len() == PAGE;
        for check in page {
            after = Some(check.event.position);
            let outcome = match check.delivery.terminal.as_ref().map(|r| &r.outcome) {
                Some(DeliveryOutcome::Rejected) => Outcome::Refused,
                Some(_) => Outcome::Posted,
                None => Outcome::Undelivered,
            };
            expected.push(Expected {
                event_id: check.event.event_id.to_string(),
                account: check.event.account.to_string(),
                sequence: check.event.sequence,
                outcome,
            });
        }
        if !full {
            return Ok(expected);
        }
    }
}

/// A ledger transaction carrying outbox metadata.
struct Posted {
    tx: u64,
    account: String,
    sequence: Option<u64>,
}

/// Compares `expected` with every transaction of the ledger.
pub(super) async fn compare(
    expected: &[Expected],
    ledger: &dyn Ledger,
    report: &mut AuditReport,
) -> Result<()> {
    let mut on_ledger: HashMap<String, Vec<Posted>> = HashMap::new();
    let mut after = None;
    loop {
        let page = ledger.transactions_after(after, PAGE).await?;
        let full = page.len() == PAGE;
        for tx in page {
            after = Some(tx.id);
            report.ledger_transactions += 1;
            let Some(event_id) = tx.metadata.get(OUTBOX_EVENT_ID_KEY) else {
                continue;
            };
            on_ledger.entry(event_id.clone()).or_default().push(Posted {
                tx: tx.id,
                account: tx
                    .metadata
                    .get(OUTBOX_ACCOUNT_KEY)
                    .cloned()
                    .unwrap_or_default(),
                sequence: tx
                    .metadata
                    .get(OUTBOX_SEQUENCE_KEY)
                    .and_then(|s| s.parse().ok()),
            });
        }
        if !full {
            break;
        }
    }

    let known: HashSet<&str> = expected.iter().map(|e| e.event_id.as_str()).collect();
    let mut per_account: BTreeMap<&str, Vec<(u64, u64, &str)>> = BTreeMap::new();
    for event in expected {
        let txs = on_ledger
            .get(&event.event_id)
            .map_or(&[][..], Vec::as_slice);
        let at = (
            event.account.as_str(),
            Some(event.sequence),
            Some(event.event_id.as_str()),
        );
        let ids = || {
            txs.iter()
                .map(|p| p.tx.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match (event.outcome, txs.len()) {
            (Outcome::Posted, 0) => report.push(
                DiscrepancyKind::MissingOnLedger,
                at.0,
                at.1,
                at.2,
                "recorded as posted, but no ledger transaction carries its event id",
            ),
            (Outcome::Refused, n) if n > 0 => report.push(
                DiscrepancyKind::RefusedButPosted,
                at.0,
                at.1,
                at.2,
                format!(
                    "recorded as refused, yet ledger transaction(s) {} carry it",
                    ids()
                ),
            ),
            (Outcome::Undelivered, n) => report.push(
                DiscrepancyKind::Undelivered,
                at.0,
                at.1,
                at.2,
                format!("no terminal delivery record ({n} ledger transaction(s))"),
            ),
            _ => {}
        }
        if txs.len() > 1 {
            report.push(
                DiscrepancyKind::DoubledOnLedger,
                at.0,
                at.1,
                at.2,
                format!("{} ledger transactions carry it: {}", txs.len(), ids()),
            );
        }
        match event.outcome {
            Outcome::Posted => report.posted += 1,
            Outcome::Refused => report.refused += 1,
            Outcome::Undelivered => {}
        }
        if let Some(first) = txs.first() {
            per_account
                .entry(event.account.as_str())
                .or_default()
                .push((event.sequence, first.tx, event.event_id.as_str()));
        }
    }

    // Per account, ledger order is sequence order.
    for (account, mut posted) in per_account {
        posted.sort_unstable();
        for pair in posted.windows(2) {
            let ((_, earlier_tx, _), (sequence, tx, event_id)) = (pair[0], pair[1]);
            if tx < earlier_tx {
                report.push(
                    DiscrepancyKind::OutOfOrder,
                    account,
                    Some(sequence),
                    Some(event_id),
                    format!(
                        "ledger transaction {tx} comes before {earlier_tx} of sequence {}",
                        pair[0].0
                    ),
                );
            }
        }
    }

    // What the ledger holds that the outbox never sent.
    let mut orphans: Vec<(&String, &Vec<Posted>)> = on_ledger
        .iter()
        .filter(|(id, _)| !known.contains(id.as_str()))
        .collect();
    orphans.sort_by_key(|(id, _)| id.as_str());
    for (event_id, txs) in orphans {
        for posted in txs {
            report.push(
                DiscrepancyKind::Orphan,
                &posted.account,
                posted.sequence,
                Some(event_id),
                format!(
                    "ledger transaction {} carries an event id the outbox does not know",
                    posted.tx
                ),
            );
        }
    }
    Ok(())
}
