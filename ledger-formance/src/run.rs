//! `POST /v2/{ledger}/_bulk?atomic=true`: one account's consecutive events as one
//! ordered, all-or-nothing call ([`outbox_core::Ledger::post_run`]).
//!
//! Without `continueOnFailure` and `parallel`, Formance runs the elements in order
//! and stops at the first failure; with `atomic`, that failure rolls every element
//! back, although the answer (400) still lists the elements before it as created.
//! So a 400 that lists the elements is read as "nothing committed, this element
//! failed", and anything else that is not a 200 listing every element as created is
//! an error: the run's outcome is unknown (all or nothing), which the relay handles
//! by sending the events one by one as possibly posted.

use outbox_core::{BulkItem, Error, ErrorKind, Result, RunOutcome};
use reqwest::StatusCode;
use serde_json::value::RawValue;

use crate::client::{FormanceLedger, Request};
use crate::wire::{BulkElement, BulkResult, Data, TransactionId};

impl FormanceLedger {
    /// The whole of [`outbox_core::Ledger::post_run`].
    pub(crate) async fn post_atomic_run(&self, items: &[BulkItem<'_>]) -> Result<RunOutcome> {
        if items.len() > self.max_bulk {
            return Err(Error::invalid(
                "items",
                format!(
                    "a run of {} elements is longer than the ledger's bulk limit of {}",
                    items.len(),
                    self.max_bulk
                ),
            ));
        }
        let elements = items
            .iter()
            .map(|item| {
                serde_json::from_slice::<&RawValue>(item.body)
                    .map(|data| BulkElement {
                        action: "CREATE_TRANSACTION",
                        ik: item.key.to_string(),
                        data,
                    })
                    .map_err(|e| {
                        Error::invalid("body", format!("the stored body is not JSON: {e}"))
                            .with("event_id", item.key)
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let body = serde_json::to_vec(&elements).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot encode the run request: {e}"),
            )
        })?;
        let mut url = self.url(&["_bulk"]);
        url.query_pairs_mut().append_pair("atomic", "true");
        let request = Request::post(url, &body);
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        let listed = (answer.status.is_success() || answer.status == StatusCode::BAD_REQUEST)
            .then(|| serde_json::from_slice::<Data<Vec<BulkResult>>>(&answer.body).ok())
            .flatten()
            .filter(|Data { data }| data.len() == items.len());
        let Some(Data { data: listed }) = listed else {
            let error = if answer.status.is_success() {
                Error::new(
                    ErrorKind::Ledger,
                    "the run answer does not list one result per element",
                )
                .transient(None)
            } else {
                answer.refusal().into_error()
            };
            return Err(request.fail(error.with("elements", items.len())));
        };
        if let Some((index, failed)) = listed
            .iter()
            .enumerate()
            .find(|(_, r)| r.response_type == "ERROR")
        {
            let reason = format!(
                "{}: {}",
                failed.error_code.as_deref().unwrap_or("no code"),
                failed.error_description.as_deref().unwrap_or("")
            );
            tracing::info!(event_id = %items[index].key, index, %reason, "ledger rolled back a run");
            return Ok(RunOutcome::RolledBack { index, reason });
        }
        if !answer.status.is_success() {
            return Err(request.fail(Error::new(
                ErrorKind::Ledger,
                format!(
                    "the run was answered {} with no failed element",
                    answer.status
                ),
            )));
        }
        listed
            .into_iter()
            .zip(items)
            .map(
                |(result, item)| match (result.response_type.as_str(), result.data) {
                    ("CREATE_TRANSACTION", Some(TransactionId { id })) => Ok(id),
                    (other, _) => Err(request.fail(
                        Error::new(
                            ErrorKind::Ledger,
                            format!(
                                "unexpected run result {other:?} for a CREATE_TRANSACTION element"
                            ),
                        )
                        .with("event_id", item.key),
                    )),
                },
            )
            .collect::<Result<Vec<u64>>>()
            .map(RunOutcome::Committed)
    }
}
