//! Sending one round to the ledger: an account's run of consecutive posts as one
//! ordered, atomic call (a hot account), the other heads in bulk where it is safe,
//! alone where a replay must be observed or the call is not a plain post, and the
//! rejection notice of a head the ledger already refused.

use std::time::Instant;

use futures_util::stream::{self, StreamExt};
use tracing::Instrument;

use super::config::DispatchConfig;
use super::notice::notify_rejection;
use super::queues::Pending;
use crate::domain::{EventId, LedgerCommand, Metadata, OutboxEvent, PayloadKind, Position};
use crate::error::{Error, ErrorKind, Result};
use crate::ledger::{BulkItem, Ledger, PostOutcome, RunOutcome};
use crate::metrics;
use crate::store::{DeliveryOutcome, Store};
use crate::trace::relay_post_span;

/// What sending a head (or the run it leads) produced.
#[derive(Debug, Clone)]
pub(crate) enum Sent {
    /// The ledger's answer to the post or revert.
    Posted(PostOutcome),
    /// The rejection notice of a refused head was written.
    Notified,
    /// An uncertain event's rejection notice is already on the ledger: it was
    /// refused before the crash, and is not posted again.
    AlreadyRefused { code: String },
    /// The ledger rolled back the run this head leads: element `through` failed and
    /// nothing committed. The account's events go one by one through it.
    RolledBack { through: Position, reason: String },
    /// The run this head leads failed as a whole: every element up to `through` may
    /// have committed, or none (a run is all or nothing). They go alone, as possibly
    /// posted, so a committed one answers as a replay.
    RunUnknown { through: Position, error: Error },
}

enum Job {
    Alone(Pending),
    Bulk(Vec<Pending>),
    /// One account's consecutive posts, in sequence order, as one atomic call.
    Run(Vec<Pending>),
    Notice(Pending),
}

/// Most events of one account sent in one call this round: the bulk size when bulk
/// is on and the ledger posts ordered runs, else 1 (the head alone).
pub(crate) fn max_run(ledger: &dyn Ledger, config: &DispatchConfig) -> usize {
    let capabilities = ledger.capabilities();
    let max_bulk = config.max_bulk.min(capabilities.max_bulk);
    if config.bulk && capabilities.ordered_runs && max_bulk > 1 {
        max_bulk
    } else {
        1
    }
}

/// Sends every run (a head, and at most [`max_run`] of its account's events in all)
/// and returns each event sent with its answer; a failed run answers for its head.
pub(crate) async fn send_round(
    ledger: &dyn Ledger,
    store: &dyn Store,
    runs: Vec<Vec<Pending>>,
    config: &DispatchConfig,
    relay: &str,
) -> Vec<(Pending, Result<Sent>)> {
    let max_bulk = config.max_bulk.min(ledger.capabilities().max_bulk);
    let use_bulk = config.bulk && max_bulk > 1;
    let mut jobs = Vec::new();
    let mut bulkable = Vec::new();
    for mut run in runs {
        if run.len() > 1 {
            jobs.push(Job::Run(run));
            continue;
        }
        let Some(head) = run.pop() else { continue };
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
        Job::Run(run) => send_run(ledger, run, relay).await,
        Job::Bulk(heads) => {
            let bodies = bulk_items(&heads);
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

/// Each event's key and stored body, as bulk elements.
fn bulk_items(events: &[Pending]) -> Result<Vec<BulkItem<'_>>> {
    events
        .iter()
        .map(|p| {
            p.event.payload.split().map(|(_, body)| BulkItem {
                key: p.event.event_id,
                body,
            })
        })
        .collect()
}

/// Posts one account's run in one ordered, atomic call. Committed: every event is
/// accepted, in order. Otherwise only the head answers, for the whole run.
async fn send_run(
    ledger: &dyn Ledger,
    run: Vec<Pending>,
    relay: &str,
) -> Vec<(Pending, Result<Sent>)> {
    let through = run.last().map(|p| p.event.position);
    let answer = match bulk_items(&run) {
        Ok(items) => {
            let spans: Vec<_> = run.iter().map(|p| relay_post_span(&p.event)).collect();
            metrics::relay_bulk(relay, items.len());
            let started = Instant::now();
            let answer = ledger.post_run(&items).await;
            metrics::relay_call(relay, "run", started.elapsed());
            drop(spans);
            answer
        }
        Err(e) => Err(e),
    };
    let unknown = |error: Error| Sent::RunUnknown {
        through: through.expect("a run is never empty"),
        error,
    };
    let head_answer = match answer {
        Ok(RunOutcome::Committed(ids)) if ids.len() == run.len() => {
            return run
                .into_iter()
                .zip(ids)
                .map(|(p, transaction_id)| {
                    (
                        p,
                        Ok(Sent::Posted(PostOutcome::Accepted { transaction_id })),
                    )
                })
                .collect();
        }
        Ok(RunOutcome::Committed(ids)) => unknown(
            Error::new(
                ErrorKind::Ledger,
                format!(
                    "the run answered {} ids for {} elements",
                    ids.len(),
                    run.len()
                ),
            )
            .transient(None),
        ),
        Ok(RunOutcome::RolledBack { index, reason }) => match run.get(index) {
            Some(failed) => Sent::RolledBack {
                through: failed.event.position,
                reason,
            },
            None => unknown(Error::new(
                ErrorKind::Ledger,
                format!("the run names element {index} of {} as failed", run.len()),
            )),
        },
        Err(error) => unknown(error),
    };
    let head = run.into_iter().next().expect("a run is never empty");
    vec![(head, Ok(head_answer))]
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
