//! Sending one round of heads to the ledger: bulk where it is safe, alone where a
//! replay must be observed or the call is not a plain post.

use futures_util::stream::{self, StreamExt};

use super::config::DispatchConfig;
use super::queues::Pending;
use crate::domain::{LedgerCommand, PayloadKind};
use crate::error::{Error, ErrorKind, Result};
use crate::ledger::{BulkItem, Ledger, PostOutcome};

enum Job {
    Alone(Pending),
    Bulk(Vec<Pending>),
}

/// Sends every head (at most one per account) and returns each with its answer.
pub(crate) async fn send_round(
    ledger: &dyn Ledger,
    heads: Vec<Pending>,
    config: &DispatchConfig,
) -> Vec<(Pending, Result<PostOutcome>)> {
    let max_bulk = config.max_bulk.min(ledger.capabilities().max_bulk);
    let use_bulk = config.bulk && max_bulk > 1;
    let mut jobs = Vec::new();
    let mut bulkable = Vec::new();
    for head in heads {
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
        .map(|job| run_job(ledger, job))
        .buffer_unordered(config.parallel_requests.max(1))
        .flat_map(stream::iter)
        .collect()
        .await
}

async fn run_job(ledger: &dyn Ledger, job: Job) -> Vec<(Pending, Result<PostOutcome>)> {
    match job {
        Job::Alone(head) => {
            let outcome = send_alone(ledger, &head).await;
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
            let answers = match bodies {
                Ok(items) => ledger.post_bulk(&items).await,
                Err(e) => Err(e),
            };
            match answers {
                Ok(answers) if answers.len() == heads.len() => {
                    heads.into_iter().zip(answers).collect()
                }
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

async fn send_alone(ledger: &dyn Ledger, head: &Pending) -> Result<PostOutcome> {
    let event = &head.event;
    match event.payload.split()? {
        (PayloadKind::Post, body) => ledger.post(event.event_id, body).await,
        (PayloadKind::Revert { target }, _) => {
            let LedgerCommand::Revert(revert) = event.payload.command()? else {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "revert payload decoded as a post",
                ));
            };
            match ledger.transaction_by_event_id(target).await? {
                Some(tx) => ledger.revert(event.event_id, tx.id, &revert.metadata).await,
                // The target never reached the ledger (it was refused): nothing to revert.
                None => Ok(PostOutcome::Rejected {
                    code: "REVERT_TARGET_MISSING".into(),
                    message: format!("no ledger transaction carries outbox_event_id {target}"),
                }),
            }
        }
    }
}
