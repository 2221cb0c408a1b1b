//! One page of ledger transactions checked against the outbox: orphans, conflicts
//! and duplicates.

use std::collections::HashMap;

use super::{CompletenessCheck, CompletenessReport, CompletenessStore, SOURCE, SeenTransaction};
use crate::domain::{
    Account, EventId, LedgerCommand, OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY, OUTBOX_SEQUENCE_KEY,
    OutboxEvent, PostBody,
};
use crate::error::Result;
use crate::exception::{ExceptionKind, NewException};
use crate::ledger::LedgerTransaction;
use crate::store::{DeliveryOutcome, DeliveryState};

/// Checks `page` and returns the transactions to record as seen (those carrying an
/// outbox event id).
pub(super) async fn check(
    run: &CompletenessCheck,
    store: &dyn CompletenessStore,
    page: &[LedgerTransaction],
    report: &mut CompletenessReport,
) -> Result<Vec<SeenTransaction>> {
    let seen: Vec<(&LedgerTransaction, SeenTransaction)> = page
        .iter()
        .filter_map(|tx| {
            let event_id = tx.metadata.get(OUTBOX_EVENT_ID_KEY)?;
            Some((
                tx,
                SeenTransaction {
                    ledger_tx: tx.id,
                    event_id: event_id.clone(),
                    reference: tx.reference.clone(),
                },
            ))
        })
        .collect();
    report.outbox_transactions += seen.len() as u64;
    if seen.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<EventId> = seen
        .iter()
        .filter_map(|(_, s)| EventId::parse(&s.event_id).ok())
        .collect();
    let events = store.events_by_ids(&ids).await?;
    let event_ids: Vec<String> = seen.iter().map(|(_, s)| s.event_id.clone()).collect();
    let references: Vec<String> = seen
        .iter()
        .filter_map(|(_, s)| s.reference.clone())
        .collect();
    // What earlier pages (or runs) recorded, then this page, in id order: the first
    // transaction of an event id or a reference is the original.
    let mut first_by_event: HashMap<String, u64> = HashMap::new();
    let mut first_by_reference: HashMap<String, u64> = HashMap::new();
    for earlier in store
        .seen_matching(&run.name, &event_ids, &references)
        .await?
    {
        keep_lowest(&mut first_by_event, earlier.event_id, earlier.ledger_tx);
        if let Some(reference) = earlier.reference {
            keep_lowest(&mut first_by_reference, reference, earlier.ledger_tx);
        }
    }
    for (tx, s) in &seen {
        keep_lowest(&mut first_by_event, s.event_id.clone(), tx.id);
        if let Some(reference) = &s.reference {
            keep_lowest(&mut first_by_reference, reference.clone(), tx.id);
        }
    }
    for (tx, s) in &seen {
        let known = EventId::parse(&s.event_id)
            .ok()
            .and_then(|id| events.get(&id));
        let findings = &mut report.check.findings;
        let Some((event, delivery)) = known else {
            findings.push(orphan(tx, &s.event_id));
            continue;
        };
        if let Some(detail) = conflict(tx, event, delivery) {
            findings.push(about(
                event,
                ExceptionKind::ConflictingTransaction,
                tx,
                detail,
            ));
        }
        if let Some(&first) = first_by_event.get(&s.event_id).filter(|&&f| f != tx.id) {
            let detail = format!(
                "event {} has two ledger transactions: {first} and {}",
                s.event_id, tx.id
            );
            findings.push(about(
                event,
                ExceptionKind::DuplicateTransaction,
                tx,
                detail,
            ));
        }
        if let Some(reference) = &s.reference
            && let Some(&first) = first_by_reference.get(reference).filter(|&&f| f != tx.id)
        {
            let detail = format!(
                "reference {reference:?} is on two ledger transactions: {first} and {}",
                tx.id
            );
            findings.push(about(
                event,
                ExceptionKind::DuplicateTransaction,
                tx,
                detail,
            ));
        }
    }
    Ok(seen.into_iter().map(|(_, s)| s).collect())
}

fn keep_lowest(map: &mut HashMap<String, u64>, key: String, tx: u64) {
    map.entry(key)
        .and_modify(|first| *first = (*first).min(tx))
        .or_insert(tx);
}

/// What differs between the transaction and the event it names, if anything.
fn conflict(
    tx: &LedgerTransaction,
    event: &OutboxEvent,
    delivery: &DeliveryState,
) -> Option<String> {
    if let Some(terminal) = &delivery.terminal
        && terminal.outcome == DeliveryOutcome::Rejected
    {
        return Some(format!(
            "the outbox recorded event {} as refused ({}), yet ledger transaction {} carries it",
            event.event_id,
            terminal.error_code.as_deref().unwrap_or("no code"),
            tx.id
        ));
    }
    let identity = [
        (OUTBOX_ACCOUNT_KEY, event.account.as_str().to_owned()),
        (OUTBOX_SEQUENCE_KEY, event.sequence.to_string()),
    ];
    for (key, expected) in identity {
        let found = tx.metadata.get(key).map(String::as_str);
        if found != Some(expected.as_str()) {
            return Some(format!(
                "metadata {key} is {found:?} on ledger transaction {}, the outbox row has {expected:?}",
                tx.id
            ));
        }
    }
    let command = match event.payload.command() {
        Ok(command) => command,
        Err(e) => return Some(format!("the stored payload cannot be read: {e}")),
    };
    // A revert's postings are the ledger's inverse of its target, and a script's are
    // computed by the ledger: only fixed postings can be compared with the payload.
    if let LedgerCommand::Post(post) = command {
        if post.reference.is_some() && post.reference != tx.reference {
            return Some(format!(
                "reference {:?} on ledger transaction {}, the payload has {:?}",
                tx.reference, tx.id, post.reference
            ));
        }
        if let PostBody::Postings(postings) = post.body
            && postings != tx.postings
        {
            return Some(format!(
                "postings differ: ledger transaction {} has {}, the payload has {}",
                tx.id,
                describe(&tx.postings),
                describe(&postings)
            ));
        }
    }
    None
}

fn describe(postings: &[crate::domain::Posting]) -> String {
    let parts: Vec<String> = postings
        .iter()
        .map(|p| format!("{} {} {} -> {}", p.asset, p.amount, p.source, p.destination))
        .collect();
    format!("[{}]", parts.join("; "))
}

fn about(
    event: &OutboxEvent,
    kind: ExceptionKind,
    tx: &LedgerTransaction,
    detail: String,
) -> NewException {
    NewException::new(SOURCE, kind, event.account.clone(), event.sequence, detail)
        .with_event_id(event.event_id.to_string())
        .with_ledger_tx(tx.id)
}

fn orphan(tx: &LedgerTransaction, event_id: &str) -> NewException {
    // The account and sequence the transaction claims; an unreadable account falls
    // back to the first posting's destination so the exception still names one.
    let account = tx
        .metadata
        .get(OUTBOX_ACCOUNT_KEY)
        .and_then(|a| Account::parse(a).ok())
        .or_else(|| tx.postings.first().map(|p| p.destination.clone()))
        .unwrap_or_else(|| Account::parse("world").expect("a valid address"));
    let sequence = tx
        .metadata
        .get(OUTBOX_SEQUENCE_KEY)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    NewException::new(
        SOURCE,
        ExceptionKind::OrphanTransaction,
        account,
        sequence,
        format!(
            "ledger transaction {} carries outbox event id {event_id:?}, which this outbox does not hold (posted out of band?)",
            tx.id
        ),
    )
    .with_event_id(event_id)
    .with_ledger_tx(tx.id)
}
