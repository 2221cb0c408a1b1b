//! Sending one round of heads to the ledger: bulk where it is safe, alone where a
//! replay must be observed or the call is not a plain post, and the rejection notice
//! of a head the ledger already refused.

use std::time::Instant;

use futures_util::stream::{self, StreamExt};
use tracing::Instrument;

use super::config::DispatchConfig;
use super::notice::notify_rejection;
use super::queues::Pending;
use crate::domain::{EventId, LedgerCommand, Metadata, OutboxEvent, PayloadKind};
use crate::error::{Error, ErrorKind, Result};
use crate::ledger::{BulkItem, Ledger, PostOutcome};
use crate::metrics;
use crate::store::{DeliveryOutcome, Store};
use crate::trace::relay_post_span;

/// What sending a head produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The ledger's answer to the post or revert.
    Posted(PostOutcome),
    /// The rejection notice of a refused head was written.
    Notified,
    /// An uncertain event's rejection notice is already on the ledger: it was
    /// refused before the crash, and is not posted again.
    AlreadyRefused { code: String },
}

enum Job {
    Alone(Pending),
    Bulk(Vec<Pending>),
    Notice(Pending),
}

/// Sends every head (at most one per account) and returns each with its answer.
pub(crate) async fn send_round(
    ledger: &dyn Ledger,
    store: &dyn Store,
    heads: Vec<Pending>,
    config: &DispatchConfig,
    relay: &str,
) -> Vec<(Pending, Result<Sent>)> {
    let max_bulk = config.max_bulk.min(ledger.capabilities().max_bulk);
    let use_bulk = config.bulk && max_bulk > 1;
    let mut jobs = Vec::new();
    let mut bulkable = Vec::new();
    for head in heads {
        if head.refused.is_some() {
            jobs.push(Job::Notice(head));
            continue;
        }
        // Bulk answers carry no hit flag, so an event that may already be in the ledger
        // is sent alone: its replay is then seen as Idempotency-Hit and recorded so.
        if use_bulk && head.post && !head.uncertain {
            bulkable.push(head);
        } else {
            jobs.push(Job::Alone(head));
        }
    }
    while !bulkable.is_empty() {
        let rest = bulkable.split_off(bulkable.len().min(max_bulk));
        jobs.push(Job::Bulk(std::mem::replace(&mut bulkable, rest)));
    }
    stream::iter(jobs)
        .map(|job| run_job(ledger, store, job, relay))
        .buffer_unordered(config.parallel_requests.max(1))
        .flat_map(stream::iter)
        .collect()
        .await
}

async fn run_job(
    ledger: &dyn Ledger,
    store: &dyn Store,
    job: Job,
    relay: &str,
) -> Vec<(Pending, Result<Sent>)> {
    match job {
        Job::Notice(head) => {
            let code = head.refused.as_ref().map_or("", |r| r.code.as_str());
            let outcome = notify_rejection(ledger, &head.event, code)
                .instrument(relay_post_span(&head.event))
                .await
                .map(|()| Sent::Notified);
            vec![(head, outcome)]
        }
        Job::Alone(head) => {
            let outcome = send_alone(ledger, store, &head, relay)
                .instrument(relay_post_span(&head.event))
                .await;
            vec![(head, outcome)]
        }
        Job::Bulk(heads) => {
            let bodies: Result<Vec<BulkItem<'_>>> = heads
                .iter()
                .map(|h| {
                    h.event.payload.split().map(|(_, body)| BulkItem {
                        key: h.event.event_id,
                        body,
                    })
                })
                .collect();
            // One span per event, each in its own event's trace, open for the bulk call.
            let spans: Vec<_> = heads.iter().map(|h| relay_post_span(&h.event)).collect();
            let answers = match bodies {
                Ok(items) => {
                    metrics::relay_bulk(relay, items.len());
                    let started = Instant::now();
                    let answers = ledger.post_bulk(&items).await;
                    metrics::relay_call(relay, "bulk", started.elapsed());
                    answers
                }
                Err(e) => Err(e),
            };
            drop(spans);
            match answers {
                Ok(answers) if answers.len() == heads.len() => heads
                    .into_iter()
                    .zip(answers)
                    .map(|(h, a)| (h, a.map(Sent::Posted)))
                    .collect(),
                Ok(answers) => {
                    let err = Error::new(
                        ErrorKind::Ledger,
                        format!(
                            "bulk answered {} results for {} elements",
                            answers.len(),
                            heads.len()
                        ),
                    )
                    .transient(None);
                    heads.into_iter().map(|h| (h, Err(err.clone()))).collect()
                }
                Err(err) => heads.into_iter().map(|h| (h, Err(err.clone()))).collect(),
            }
        }
    }
}

async fn send_alone(
    ledger: &dyn Ledger,
    store: &dyn Store,
    head: &Pending,
    relay: &str,
) -> Result<Sent> {
    let event = &head.event;
    if head.uncertain
        && let Some(code) = ledger
            .rejection_notice(&event.account, event.event_id)
            .await?
    {
        return Ok(Sent::AlreadyRefused { code });
    }
    let started = Instant::now();
    let outcome = match event.payload.split()? {
        (PayloadKind::Post, body) => {
            let outcome = ledger.post(event.event_id, body).await;
            metrics::relay_call(relay, "post", started.elapsed());
            outcome?
        }
        (PayloadKind::Revert { target }, _) => {
            let LedgerCommand::Revert(revert) = event.payload.command()? else {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "revert payload decoded as a post",
                ));
            };
            let outcome = send_revert(ledger, store, event, target, &revert.metadata).await;
            metrics::relay_call(relay, "revert", started.elapsed());
            outcome?
        }
    };
    Ok(Sent::Posted(outcome))
}

/// Reverts the ledger transaction of `target`, found through the target's own
/// delivery record (or, for a record without a transaction id, the ledger).
///
/// A target that has no outcome yet is waited for (a transient error parks the
/// account): refusing the revert for good would lose it. Enqueue keeps a revert on
/// its target's account, behind it in sequence order, so the wait is a safety net
/// for data written before that rule. Only a target the ledger refused makes the
/// revert a refusal too: there is nothing to revert.
async fn send_revert(
    ledger: &dyn Ledger,
    store: &dyn Store,
    event: &OutboxEvent,
    target: EventId,
    metadata: &Metadata,
) -> Result<PostOutcome> {
    let terminal = store
        .delivery_states(&[target])
        .await?
        .remove(&target)
        .and_then(|state| state.terminal);
    let recorded_tx = match terminal {
        Some(record) if record.outcome == DeliveryOutcome::Rejected => {
            return Ok(PostOutcome::Rejected {
                code: "REVERT_TARGET_MISSING".into(),
                message: format!(
                    "the target {target} was refused by the ledger ({}): there is nothing to revert",
                    record.error_code.as_deref().unwrap_or("no code")
                ),
            });
        }
        Some(record) => record.ledger_tx_id,
        None => None,
    };
    let transaction_id = match recorded_tx {
        Some(id) => id,
        None => match ledger.transaction_by_event_id(target).await? {
            Some(tx) => tx.id,
            None => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "revert target {target} has no ledger transaction yet: the revert waits for it"
                    ),
                )
                .with("revert", target)
                .transient(None));
            }
        },
    };
    ledger
        .revert(event.event_id, transaction_id, metadata)
        .await
}
