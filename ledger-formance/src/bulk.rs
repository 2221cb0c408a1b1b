//! `POST /v2/{ledger}/_bulk`: many creates per call, chunked to `bulk_max_size`,
//! one result per item, in order.
//!
//! Two properties shape this file:
//! - **No per-element hit flag.** Formance's bulk answer does not say whether an
//!   element was a replay, so a replayed element reads as
//!   [`PostOutcome::Accepted`] (with the original transaction id). A caller that
//!   must tell a replay from a first post — the relay re-sending its uncertain
//!   window after a crash — posts those events one by one.
//! - **Elements are independent.** The request is sent with `continueOnFailure`,
//!   so one refused element (say INSUFFICIENT_FUND) does not cancel the others, and
//!   every chunk is sent. This is safe because the `Ledger::post_bulk` contract
//!   requires independent items: the relay puts at most one event per account in a
//!   bulk (the head of each account), so no element's order depends on another's.

use outbox_core::{BulkItem, Error, ErrorKind, PostOutcome, Result};
use reqwest::StatusCode;
use serde_json::value::RawValue;

use crate::client::{FormanceLedger, Request};
use crate::error::{Refusal, classify_element};
use crate::wire::{BulkElement, BulkResult, Data, TransactionId};

impl FormanceLedger {
    /// The whole of [`outbox_core::Ledger::post_bulk`]: an outer error only when
    /// nothing is known (the first call failed as a whole).
    pub(crate) async fn post_in_chunks(
        &self,
        items: &[BulkItem<'_>],
    ) -> Result<Vec<Result<PostOutcome>>> {
        let mut results = Vec::with_capacity(items.len());
        for chunk in items.chunks(self.max_bulk) {
            match self.post_chunk(chunk).await {
                Ok(chunk_results) => results.extend(chunk_results),
                // Nothing is known yet: let the caller treat the whole call as failed.
                Err(error) if results.is_empty() && chunk.len() == items.len() => {
                    return Err(error);
                }
                Err(error) => results.extend(
                    chunk
                        .iter()
                        .map(|item| Err(error.clone().with("event_id", item.key))),
                ),
            }
        }
        Ok(results)
    }

    /// One `_bulk` call for at most `bulk_max_size` items.
    async fn post_chunk(&self, chunk: &[BulkItem<'_>]) -> Result<Vec<Result<PostOutcome>>> {
        // A body that is not JSON would spoil the whole request: it fails alone.
        let mut elements = Vec::with_capacity(chunk.len());
        let mut sendable = Vec::with_capacity(chunk.len());
        let mut slots: Vec<Option<Result<PostOutcome>>> = Vec::with_capacity(chunk.len());
        for item in chunk {
            match serde_json::from_slice::<&RawValue>(item.body) {
                Ok(data) => {
                    elements.push(BulkElement {
                        action: "CREATE_TRANSACTION",
                        ik: item.key.to_string(),
                        data,
                    });
                    sendable.push(*item);
                    slots.push(None);
                }
                Err(e) => slots.push(Some(Err(Error::invalid(
                    "body",
                    format!("the stored body is not JSON: {e}"),
                )
                .with("event_id", item.key)))),
            }
        }
        let mut sent = if elements.is_empty() {
            Vec::new()
        } else {
            self.send_elements(&sendable, &elements).await?
        }
        .into_iter();
        Ok(slots
            .into_iter()
            .map(|slot| {
                slot.or_else(|| sent.next())
                    .unwrap_or_else(|| Err(Error::new(ErrorKind::Internal, "bulk result missing")))
            })
            .collect())
    }

    async fn send_elements(
        &self,
        items: &[BulkItem<'_>],
        elements: &[BulkElement<'_>],
    ) -> Result<Vec<Result<PostOutcome>>> {
        let body = serde_json::to_vec(elements).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot encode the bulk request: {e}"),
            )
        })?;
        let mut url = self.url(&["_bulk"]);
        url.query_pairs_mut()
            .append_pair("continueOnFailure", "true");
        let request = Request::post(url, &body);
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        // 200 when every element committed, 400 when one failed; both list every element.
        let listed = (answer.status.is_success() || answer.status == StatusCode::BAD_REQUEST)
            .then(|| serde_json::from_slice::<Data<Vec<BulkResult>>>(&answer.body).ok())
            .flatten();
        let Some(Data { data: listed }) = listed else {
            let error = if answer.status.is_success() {
                Error::new(
                    ErrorKind::Ledger,
                    "the bulk answer does not list element results",
                )
            } else {
                answer.refusal().into_error()
            };
            return Err(request.fail(error.with("elements", items.len())));
        };
        if listed.len() != items.len() {
            return Err(request.fail(Error::new(
                ErrorKind::Ledger,
                format!(
                    "the bulk answer lists {} results for {} elements",
                    listed.len(),
                    items.len()
                ),
            )));
        }
        let mut results = Vec::with_capacity(items.len());
        for (item, result) in items.iter().zip(listed) {
            results.push(
                self.element_outcome(item, result)
                    .await
                    .map_err(|e| request.fail(e.with("event_id", item.key))),
            );
        }
        Ok(results)
    }

    async fn element_outcome(
        &self,
        item: &BulkItem<'_>,
        result: BulkResult,
    ) -> Result<PostOutcome> {
        match (result.response_type.as_str(), result.data) {
            // A replayed element reads the same: the bulk answer has no hit flag.
            ("CREATE_TRANSACTION", Some(TransactionId { id })) => {
                Ok(PostOutcome::Accepted { transaction_id: id })
            }
            ("ERROR", _) => {
                let code = result.error_code.unwrap_or_default();
                let description = result.error_description.unwrap_or_default();
                match classify_element(&code, &description) {
                    Refusal::Rejected { code, message } => {
                        tracing::info!(event_id = %item.key, %code, %message, "ledger rejected a bulk element");
                        Ok(PostOutcome::Rejected { code, message })
                    }
                    Refusal::Conflict { message } => {
                        // Element errors go back in the element's result, unlogged.
                        self.resolve_conflict(item.key, item.body, message, |e| e)
                            .await
                    }
                    Refusal::Failed(error) => Err(error),
                }
            }
            (other, _) => Err(Error::new(
                ErrorKind::Ledger,
                format!("unexpected bulk result {other:?} for a CREATE_TRANSACTION element"),
            )),
        }
    }
}
