//! Reading one event from every place it left a record, into a [`Report`].

use std::collections::BTreeMap;

use outbox_core::dispatch::notice::rejection_notice_key;
use outbox_core::fanout::dead_letter::replay_progress_key;
use outbox_core::{
    DeliveryOutcome, Error, ErrorKind, EventId, Exception, Ledger, OUTBOX_EVENT_ID_KEY,
    OutboxEvent, PayloadKind, Result,
};
use outbox_ledger_formance::{FormanceLedger, LedgerLog, REVERTS_METADATA_KEY, TransactionRecord};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::findings::findings;
use super::report::*;
use crate::wiring::AuditStore;

/// One place to read, and how the report names it.
#[derive(Debug)]
pub struct Source<'a, T> {
    pub reader: &'a T,
    pub name: String,
}

/// Everything the audit may read; a part left `None` is reported as not seen.
#[derive(Debug)]
pub struct Sources<'a> {
    pub outbox: Source<'a, AuditStore>,
    pub ledger: Option<Source<'a, FormanceLedger>>,
    pub fanout: Option<Source<'a, AuditStore>>,
    pub consumer: Option<Source<'a, AuditStore>>,
    /// Check the ledger's log hash chain up to the event's entry.
    pub verify_log: bool,
}

/// The audit of `event_id`.
///
/// # Errors
/// `NotFound` when the outbox holds no such event; the error of any store or of the
/// ledger that cannot be read.
pub async fn gather(event_id: EventId, sources: &Sources<'_>) -> Result<Report> {
    let outbox = sources.outbox.reader;
    let in_outbox = reading(&sources.outbox.name);
    let Some(event) = outbox.event(event_id).await.map_err(&in_outbox)? else {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "unknown event id {event_id}: the outbox at {} holds no such event",
                sources.outbox.name
            ),
        ));
    };
    let deliveries = outbox.deliveries(event_id).await.map_err(&in_outbox)?;
    let id_text = event_id.to_string();
    let mut not_seen = Vec::new();

    let ledger = match &sources.ledger {
        Some(source) => Some(
            ledger_section(&event, source, sources.verify_log)
                .await
                .map_err(reading(&source.name))?,
        ),
        None => {
            not_seen.push(NotSeen {
                part: "ledger",
                why: "no --ledger-url: the ledger transaction, its revert and the rejection notice were not read".into(),
            });
            None
        }
    };
    let hop2 = match &sources.fanout {
        Some(source) => Some(
            hop2_section(&event, source)
                .await
                .map_err(reading(&source.name))?,
        ),
        None => {
            not_seen.push(NotSeen {
                part: "hop2",
                why: "no --fanout-database: the Hop 2 messages and the destinations' cursors were not read".into(),
            });
            None
        }
    };
    let consumer = match &sources.consumer {
        Some(source) => Some(
            consumer_section(&id_text, source)
                .await
                .map_err(reading(&source.name))?,
        ),
        None => {
            not_seen.push(NotSeen {
                part: "consumer",
                why: "no --consumer-database: the consumer's inbox, gap queue and exceptions were not read".into(),
            });
            None
        }
    };

    let mut exceptions = entries(
        "outbox",
        outbox
            .exceptions_naming(&event.account, event.sequence, &id_text)
            .await
            .map_err(&in_outbox)?,
    );
    if let Some(source) = &sources.consumer {
        // One database can hold both sides; its exceptions are listed once.
        if source.name != sources.outbox.name {
            exceptions.extend(entries(
                "consumer",
                source
                    .reader
                    .exceptions_naming(&event.account, event.sequence, &id_text)
                    .await
                    .map_err(reading(&source.name))?,
            ));
        }
    }
    exceptions.sort_by_key(|e| e.detected_at);

    let mut report = Report {
        event_id: id_text,
        outbox: outbox_row(&event, &sources.outbox.name)?,
        deliveries: deliveries
            .iter()
            .map(|d| Attempt {
                attempt: d.attempt,
                outcome: d.outcome.as_str(),
                idempotency_hit: d.outcome == DeliveryOutcome::Replayed,
                ledger_tx_id: d.ledger_tx_id,
                error_code: d.error_code.clone(),
                detail: d.detail.clone(),
                at: d.at,
            })
            .collect(),
        ledger,
        hop2,
        consumer,
        exceptions,
        not_seen,
        findings: Vec::new(),
        consistent: false,
    };
    report.findings = findings(&report);
    let chain_ok = report
        .ledger
        .as_ref()
        .and_then(|l| l.log.as_ref())
        .is_none_or(|log| log.intact);
    report.consistent = report.findings.is_empty() && chain_ok;
    Ok(report)
}

/// Names the database or ledger an error came from.
fn reading(name: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| e.with("reading", name)
}

fn outbox_row(event: &OutboxEvent, database: &str) -> Result<OutboxRow> {
    let bytes = event.payload.as_bytes();
    let (kind, _) = event.payload.split()?;
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|e| Error::new(ErrorKind::Internal, format!("outbox_events.payload: {e}")))?;
    let payload = RawValue::from_string(text)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("outbox_events.payload: {e}")))?;
    Ok(OutboxRow {
        database: database.to_owned(),
        account: event.account.to_string(),
        sequence: event.sequence,
        created_at: event.created_at,
        command: match kind {
            PayloadKind::Post => "post",
            PayloadKind::Revert { .. } => "revert",
        },
        reverts_event: match kind {
            PayloadKind::Revert { target } => Some(target.to_string()),
            PayloadKind::Post => None,
        },
        payload_sha256: hex(&Sha256::digest(bytes)),
        payload_bytes: bytes.len(),
        payload,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn ledger_section(
    event: &OutboxEvent,
    source: &Source<'_, FormanceLedger>,
    verify_log: bool,
) -> Result<LedgerSection> {
    let ledger = source.reader;
    let mut transactions = Vec::new();
    for tx in ledger.transactions_carrying_event(event.event_id).await? {
        let revert = if tx.reverted {
            ledger.revert_of(tx.id).await?.map(revert_tx)
        } else {
            None
        };
        transactions.push(ledger_tx(tx, revert));
    }
    let rejection_notice = ledger
        .rejection_notice(&event.account, event.event_id)
        .await?
        .map(|code| RejectionNotice {
            account: event.account.to_string(),
            code,
        });
    let log = if verify_log {
        Some(log_check(ledger, event.event_id).await?)
    } else {
        None
    };
    Ok(LedgerSection {
        url: source.name.clone(),
        ledger: ledger.ledger_name().to_owned(),
        transactions,
        rejection_notice,
        log,
    })
}

fn ledger_tx(tx: TransactionRecord, revert: Option<RevertTx>) -> LedgerTx {
    LedgerTx {
        id: tx.id,
        reverts: tx
            .metadata
            .get(REVERTS_METADATA_KEY)
            .and_then(|id| id.parse().ok()),
        reference: tx.reference,
        timestamp: tx.timestamp,
        inserted_at: tx.inserted_at,
        postings: tx
            .postings
            .iter()
            .map(|p| PostingView {
                source: p.source.to_string(),
                destination: p.destination.to_string(),
                amount: p.amount.minor_units(),
                asset: p.asset.to_string(),
            })
            .collect(),
        metadata: tx.metadata,
        reverted: tx.reverted,
        revert,
    }
}

fn revert_tx(tx: TransactionRecord) -> RevertTx {
    RevertTx {
        id: tx.id,
        timestamp: tx.timestamp,
        inserted_at: tx.inserted_at,
        event_id: tx.metadata.get(OUTBOX_EVENT_ID_KEY).cloned(),
        metadata: tx.metadata,
    }
}

/// The chain from the ledger's first log to the entry the event's write left: the one
/// keyed by its event id (a post or revert), or by its rejection notice's key.
async fn log_check(ledger: &FormanceLedger, event_id: EventId) -> Result<LogCheck> {
    let key = event_id.to_string();
    let notice_key = rejection_notice_key(event_id);
    let report = ledger
        .verify_log_chain(|log| {
            log.idempotency_key
                .as_deref()
                .is_some_and(|k| k == key || k == notice_key)
        })
        .await?;
    Ok(LogCheck {
        entry: report.found.as_ref().map(log_entry),
        checked: report.checked,
        through: report.through,
        intact: report.fault.is_none(),
        broken_at: report.fault.as_ref().map(|f| f.log_id()),
        fault: report.fault.as_ref().map(ToString::to_string),
    })
}

fn log_entry(log: &LedgerLog) -> LogEntry {
    #[derive(Deserialize)]
    struct Data {
        transaction: Option<IdOnly>,
    }
    #[derive(Deserialize)]
    struct IdOnly {
        id: u64,
    }
    let transaction_id = serde_json::from_str::<Data>(log.data.get())
        .ok()
        .and_then(|d| d.transaction)
        .map(|t| t.id);
    LogEntry {
        id: log.id,
        kind: log.kind.clone(),
        date: log.date,
        idempotency_key: log.idempotency_key.clone(),
        hash: log.hash.clone(),
        transaction_id,
    }
}

/// The names in `fanout_cursors` that are destinations (not the ledger-log
/// checkpoint, not a replay's progress).
fn is_destination(name: &str) -> bool {
    !name.starts_with("ledger-log:") && !name.contains("@replayed:")
}

async fn hop2_section(event: &OutboxEvent, source: &Source<'_, AuditStore>) -> Result<Hop2Section> {
    let store = source.reader;
    let id = event.event_id.to_string();
    let stored = store.fanout_messages(&id).await?;
    let cursors: BTreeMap<String, u64> = store.fanout_cursors().await?.into_iter().collect();
    let letters = store.dead_letters(&id).await?;
    let mut destinations: Vec<String> = cursors
        .keys()
        .filter(|name| is_destination(name))
        .cloned()
        .collect();
    for letter in &letters {
        if !destinations.contains(&letter.destination) {
            destinations.push(letter.destination.clone());
        }
    }
    destinations.sort();
    let mut messages = Vec::with_capacity(stored.len());
    for m in stored {
        let overtook = store
            .fanout_overtaken(&m.message.account, m.message.sequence, m.position)
            .await?
            .into_iter()
            .map(|(sequence, position)| Overtaken { sequence, position })
            .collect();
        let states = destinations
            .iter()
            .map(|destination| {
                let cursor = cursors.get(destination).copied().unwrap_or(0);
                let dead_letter = letters
                    .iter()
                    .find(|l| &l.destination == destination && l.position == m.position)
                    .map(|l| DeadLetterState {
                        reason: l.reason.as_str(),
                        error: l.error.clone(),
                        at: l.dead_lettered_at,
                        replayed: cursors
                            .get(&replay_progress_key(destination, &m.message.account))
                            .is_some_and(|done| *done >= m.position),
                    });
                DestinationState {
                    destination: destination.clone(),
                    cursor,
                    passed: cursor >= m.position,
                    dead_letter,
                }
            })
            .collect();
        messages.push(Hop2Message {
            position: m.position,
            kind: m.message.kind.as_str(),
            ledger: m.message.ledger,
            ledger_tx_id: m.message.ledger_tx_id,
            account: m.message.account.to_string(),
            sequence: m.message.sequence,
            received_at: m.received_at,
            overtook,
            destinations: states,
        });
    }
    Ok(Hop2Section {
        database: source.name.clone(),
        destinations,
        messages,
    })
}

async fn consumer_section(id: &str, source: &Source<'_, AuditStore>) -> Result<ConsumerSection> {
    let store = source.reader;
    let inbox = store
        .inbox_markers(id)
        .await?
        .into_iter()
        .map(|m| InboxEntry {
            consumer: m.consumer,
            kind: m.kind.as_str(),
            sequence: m.sequence,
            applied_at: m.applied_at,
        })
        .collect();
    let held = store
        .held(id)
        .await?
        .into_iter()
        .map(|h| HeldEntry {
            consumer: h.consumer,
            kind: h.kind.as_str(),
            sequence: h.sequence,
            held_at: h.held_at,
        })
        .collect();
    Ok(ConsumerSection {
        database: source.name.clone(),
        inbox,
        held,
    })
}

fn entries(database: &'static str, exceptions: Vec<Exception>) -> Vec<ExceptionEntry> {
    exceptions
        .into_iter()
        .map(|e| ExceptionEntry {
            database,
            id: e.id,
            source: e.source,
            kind: e.kind.as_str(),
            severity: e.severity.as_str(),
            account: e.account.to_string(),
            sequence: e.sequence,
            detail: e.detail,
            detected_at: e.detected_at,
            resolution: e.resolution.map(|r| ResolutionEntry {
                resolved_by: r.resolved_by,
                note: r.note,
                resolved_at: r.resolved_at,
            }),
        })
        .collect()
}
