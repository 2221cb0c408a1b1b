//! Hop 2: each consumer against the outbox (and its balances against the ledger).

use std::collections::{HashMap, HashSet};

use outbox_core::reconcile::sequences::{AppliedMarker, MarkerKey};
use outbox_core::{Ledger, Result};

use super::{AuditReport, ConsumerView, DiscrepancyKind, Expected, Outcome, PAGE};

/// Every event the ledger answered (posted or refused) reaches a consumer as one
/// message at its outbox sequence, applied exactly once; nothing stays held.
pub(super) async fn compare(
    expected: &[Expected],
    consumer: &ConsumerView<'_>,
    ledger: &dyn Ledger,
    report: &mut AuditReport,
) -> Result<()> {
    let markers = markers_of(consumer).await?;
    report.applied += markers.len();
    let mut by_instruction: HashMap<&str, Vec<&AppliedMarker>> = HashMap::new();
    for marker in &markers {
        by_instruction
            .entry(marker.instruction_id.as_str())
            .or_default()
            .push(marker);
    }
    let start = report.discrepancies.len();
    let mut known = HashSet::new();
    for event in expected {
        known.insert(event.event_id.as_str());
        if event.outcome == Outcome::Undelivered {
            continue;
        }
        let applied = by_instruction
            .get(event.event_id.as_str())
            .map_or(&[][..], Vec::as_slice);
        let at = (
            event.account.as_str(),
            Some(event.sequence),
            Some(event.event_id.as_str()),
        );
        match applied {
            [] => report.push(
                DiscrepancyKind::NotApplied,
                at.0,
                at.1,
                at.2,
                "never applied",
            ),
            [one] if one.sequence != event.sequence || one.account.as_str() != event.account => {
                report.push(
                    DiscrepancyKind::WrongSequence,
                    at.0,
                    at.1,
                    at.2,
                    format!("applied on {} at sequence {}", one.account, one.sequence),
                );
            }
            [_] => {}
            many => report.push(
                DiscrepancyKind::AppliedTwice,
                at.0,
                at.1,
                at.2,
                format!("applied {} times", many.len()),
            ),
        }
    }
    for marker in &markers {
        if !known.contains(marker.instruction_id.as_str()) {
            report.push(
                DiscrepancyKind::UnknownApplied,
                marker.account.as_str(),
                Some(marker.sequence),
                Some(&marker.instruction_id),
                "applied, but the outbox has no such event",
            );
        }
    }
    for held in consumer.inbox.held_gaps().await? {
        if held.consumer == consumer.name {
            report.push(
                DiscrepancyKind::HeldGap,
                held.gap.account.as_str(),
                Some(held.gap.last_applied + 1),
                None,
                format!(
                    "{} message(s) held from sequence {} behind the missing one",
                    held.held, held.gap.lowest_held
                ),
            );
        }
    }
    if let Some(balances) = &consumer.balances {
        for (account, balance) in balances {
            let on_ledger: i128 = ledger.aggregate_balances(account).await?.values().sum();
            if on_ledger != *balance {
                report.push(
                    DiscrepancyKind::BalanceDiffers,
                    account,
                    None,
                    None,
                    format!("consumer {balance}, ledger {on_ledger}"),
                );
            }
        }
    }
    for discrepancy in &mut report.discrepancies[start..] {
        discrepancy.consumer = Some(consumer.name.clone());
    }
    Ok(())
}

/// The consumer's markers, every page.
async fn markers_of(consumer: &ConsumerView<'_>) -> Result<Vec<AppliedMarker>> {
    let mut markers = Vec::new();
    let mut after: Option<MarkerKey> = None;
    loop {
        let page = consumer.inbox.markers_after(after.as_ref(), PAGE).await?;
        let full = page.len() == PAGE;
        if let Some(last) = page.last() {
            after = Some(MarkerKey::of(last));
        }
        markers.extend(page.into_iter().filter(|m| m.consumer == consumer.name));
        if !full {
            return Ok(markers);
        }
    }
}
