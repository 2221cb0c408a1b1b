//! One outbox event checked against what the ledger holds.

use chrono::{DateTime, Utc};

use super::{EventCheck, SOURCE};
use crate::error::Result;
use crate::exception::{ExceptionKind, NewException};
use crate::store::DeliveryOutcome;

pub(super) enum Verdict {
    /// It has its transaction (duplicates and conflicts are the ledger side's), or a
    /// recorded refusal.
    Complete,
    /// No transaction carries it.
    Missing(Box<NewException>),
    /// No transaction yet, and too young to say: the relay may be posting it.
    Unsettled,
}

pub(super) async fn verdict(
    check: &EventCheck,
    ledger: &dyn crate::Ledger,
    settled_before: DateTime<Utc>,
) -> Result<Verdict> {
    let terminal = check.delivery.terminal.as_ref();
    if !check.seen.is_empty() || terminal.is_some_and(|t| t.outcome == DeliveryOutcome::Rejected) {
        return Ok(Verdict::Complete);
    }
    let recorded_accepted = terminal.is_some();
    if !recorded_accepted && check.event.created_at > settled_before {
        return Ok(Verdict::Unsettled);
    }
    // Posted after the ledger side was read? Asked once, for this event only: a
    // missing event is rare, and the check must not report one the relay just sent.
    if ledger
        .transaction_by_event_id(check.event.event_id)
        .await?
        .is_some()
    {
        return Ok(Verdict::Complete);
    }
    let event = &check.event;
    let detail = match terminal {
        Some(record) => format!(
            "the outbox recorded event {} as {} in ledger transaction {}, but no ledger transaction carries it",
            event.event_id,
            record.outcome.as_str(),
            record
                .ledger_tx_id
                .map_or_else(|| "(none recorded)".to_owned(), |id| id.to_string())
        ),
        None => format!(
            "event {} (enqueued {}) has no ledger transaction and no recorded outcome after {} attempt(s)",
            event.event_id,
            event.created_at.to_rfc3339(),
            check.delivery.attempts
        ),
    };
    let mut finding = NewException::new(
        SOURCE,
        ExceptionKind::MissingTransaction,
        event.account.clone(),
        event.sequence,
        detail,
    )
    .with_event_id(event.event_id.to_string());
    if let Some(id) = terminal.and_then(|t| t.ledger_tx_id) {
        finding = finding.with_ledger_tx(id);
    }
    Ok(Verdict::Missing(Box::new(finding)))
}
