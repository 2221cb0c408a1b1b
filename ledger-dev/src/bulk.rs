//! `POST /v2/{ledger}/_bulk` (JSON form): elements, options and the response.
//!
//! A malformed request (not an array, an unknown action, `data` that does not
//! decode) is one 400 VALIDATION for the whole call, like Go's decoder failing; more
//! than `bulk_max_size` elements is 413 BULK_SIZE_EXCEEDED. Otherwise each element
//! answers on its own: `{responseType, logID, data?}` or
//! `{responseType: "ERROR", errorCode, errorDescription}`; the status is 200 when
//! every element succeeded, 400 otherwise. A request-level `Idempotency-Key` is
//! ignored: each element carries its own `ik`.

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;

use crate::commands::{
    self, BulkMetadataRequest, BulkRevertRequest, CreateTransaction, MetadataCommand,
    RevertTransaction, TransactionRequest,
};
use crate::errors::{ApiError, ErrorCode};
use crate::log::LogData;
use crate::model::Transaction;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    CreateTransaction,
    AddMetadata,
    RevertTransaction,
    DeleteMetadata,
}

impl Action {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "CREATE_TRANSACTION" => Self::CreateTransaction,
            "ADD_METADATA" => Self::AddMetadata,
            "REVERT_TRANSACTION" => Self::RevertTransaction,
            "DELETE_METADATA" => Self::DeleteMetadata,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::CreateTransaction => "CREATE_TRANSACTION",
            Self::AddMetadata => "ADD_METADATA",
            Self::RevertTransaction => "REVERT_TRANSACTION",
            Self::DeleteMetadata => "DELETE_METADATA",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum BulkOp {
    Create(CreateTransaction),
    Revert(RevertTransaction),
    Metadata(MetadataCommand),
}

/// One decoded element. `op` is an error when the element decoded but is invalid
/// (no postings, bad address…): that element fails, the others still run.
#[derive(Debug, Clone)]
pub(crate) struct BulkElement {
    pub(crate) action: Action,
    pub(crate) ik: Option<String>,
    pub(crate) op: Result<BulkOp, ApiError>,
}

/// Query options of a bulk call.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BulkOptions {
    pub(crate) continue_on_failure: bool,
    pub(crate) atomic: bool,
}

/// What happened to one element.
#[derive(Debug, Clone)]
pub(crate) enum ElementResult {
    Done {
        log_id: u64,
        data: LogData,
    },
    Failed(ApiError),
    /// Not run because an earlier element failed without `continueOnFailure`.
    Canceled,
}

/// Decodes a bulk body, enforcing `max_size`.
pub(crate) fn parse(body: &[u8], max_size: usize) -> Result<Vec<BulkElement>, ApiError> {
    let value = commands::parse_json(body, "bulk")?;
    let Value::Array(items) = value else {
        return Err(ApiError::validation(
            "invalid bulk: the body must be a JSON array of elements",
        ));
    };
    if max_size != 0 && items.len() > max_size {
        return Err(ApiError::new(
            ErrorCode::BulkSizeExceeded,
            format!("bulk size exceeded, max size is {max_size}"),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| element(index, item))
        .collect()
}

fn element(index: usize, item: Value) -> Result<BulkElement, ApiError> {
    let bad =
        |message: String| ApiError::validation(format!("invalid bulk element {index}: {message}"));
    let Value::Object(mut map) = item else {
        return Err(bad("an element is an object {action, ik, data}".into()));
    };
    let action = match map.get("action") {
        Some(Value::String(a)) => Action::parse(a).ok_or_else(|| {
            bad(format!(
                "unknown action {a:?} (CREATE_TRANSACTION, ADD_METADATA, REVERT_TRANSACTION, DELETE_METADATA)"
            ))
        })?,
        _ => return Err(bad("missing action".into())),
    };
    let ik = match map.remove("ik") {
        None | Some(Value::Null) => None,
        Some(Value::String(ik)) => Some(ik),
        Some(other) => return Err(bad(format!("ik must be a string, got {other}"))),
    };
    let data = map.remove("data").unwrap_or(Value::Null);
    let wrap = |e: ApiError| bad(e.message);
    let op = match action {
        Action::CreateTransaction => {
            commands::decode::<TransactionRequest>(data, "transaction request")
                .map_err(wrap)?
                .into_command(false)
                .map(BulkOp::Create)
        }
        Action::RevertTransaction => Ok(BulkOp::Revert(
            commands::decode::<BulkRevertRequest>(data, "revert element")
                .map_err(wrap)?
                .into_command(),
        )),
        Action::AddMetadata | Action::DeleteMetadata => {
            commands::decode::<BulkMetadataRequest>(data, "metadata element")
                .map_err(wrap)?
                .into_command(action == Action::DeleteMetadata)
                .map(BulkOp::Metadata)
        }
    };
    Ok(BulkElement { action, ik, op })
}

/// `V2BulkElementResult`, in Go's field order.
#[derive(Debug, Serialize)]
struct ApiResult<'a> {
    #[serde(rename = "errorCode", skip_serializing_if = "Option::is_none")]
    error_code: Option<&'static str>,
    #[serde(rename = "errorDescription", skip_serializing_if = "Option::is_none")]
    error_description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Transaction>,
    #[serde(rename = "responseType")]
    response_type: &'static str,
    #[serde(rename = "logID")]
    log_id: u64,
}

/// The response body `{"data": [...]}` and its status.
pub(crate) fn render(elements: &[BulkElement], results: &[ElementResult]) -> (StatusCode, String) {
    let mut failed = false;
    let items: Vec<ApiResult<'_>> = elements
        .iter()
        .zip(results)
        .map(|(element, result)| match result {
            ElementResult::Done { log_id, data } => ApiResult {
                error_code: None,
                error_description: None,
                // CREATE answers the new transaction; REVERT answers the original as
                // now reverted (bulker `RevertedTransaction`); metadata answers none.
                data: match data {
                    LogData::NewTransaction { transaction, .. } => Some(transaction),
                    LogData::RevertedTransaction { reverted, .. } => Some(reverted),
                    LogData::SetMetadata { .. } | LogData::DeleteMetadata { .. } => None,
                },
                response_type: element.action.as_str(),
                log_id: *log_id,
            },
            ElementResult::Failed(e) => {
                failed = true;
                ApiResult {
                    error_code: Some(e.code.as_str()),
                    error_description: Some(e.message.clone()),
                    data: None,
                    response_type: "ERROR",
                    log_id: 0,
                }
            }
            ElementResult::Canceled => {
                failed = true;
                ApiResult {
                    error_code: Some(ErrorCode::Internal.as_str()),
                    error_description: Some("context canceled".into()),
                    data: None,
                    response_type: "ERROR",
                    log_id: 0,
                }
            }
        })
        .collect();
    #[derive(Serialize)]
    struct Body<'a> {
        data: Vec<ApiResult<'a>>,
    }
    let body = serde_json::to_string(&Body { data: items }).expect("bulk results serialise");
    let status = if failed {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_requests_fail_whole() {
        let err = parse(br#"{"action":"CREATE_TRANSACTION"}"#, 100).unwrap_err();
        assert_eq!(err.code, ErrorCode::Validation);
        let err = parse(br#"[{"action":"NOPE","data":{}}]"#, 100).unwrap_err();
        assert!(err.message.contains("unknown action"), "{err}");
        let quoted = br#"[{"action":"CREATE_TRANSACTION","data":{"postings":[{"source":"world","destination":"a","amount":"1","asset":"USD"}]}}]"#;
        assert_eq!(parse(quoted, 100).unwrap_err().code, ErrorCode::Validation);
        let err = parse(b"[{}, {}, {}]", 2).unwrap_err();
        assert_eq!(err.code, ErrorCode::BulkSizeExceeded);
        assert_eq!(err.status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn invalid_elements_fail_alone() {
        let elements = parse(
            br#"[{"action":"CREATE_TRANSACTION","ik":"a","data":{}}]"#,
            100,
        )
        .unwrap();
        assert_eq!(elements[0].ik.as_deref(), Some("a"));
        assert_eq!(
            elements[0].op.as_ref().unwrap_err().code,
            ErrorCode::NoPostings
        );
    }
}
