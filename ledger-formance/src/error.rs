//! Classification of Formance answers and transport failures: which are business
//! refusals, which are idempotency mismatches, which may pass on a retry. No I/O here;
//! the client adds context (event id, endpoint) to what this returns.

use chrono::{DateTime, Utc};
use outbox_core::http_answer::{Answerer, is_transient_status};
use outbox_core::{Error, ErrorKind};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::Deserialize;

use crate::http_answer::{self, retry_after};

/// Refusals that no retry can change: the ledger understood the request and said no.
/// `INTERPRETER_*` are the experimental interpreter's counterparts of `COMPILATION_FAILED`.
const BUSINESS_CODES: [&str; 7] = [
    "INSUFFICIENT_FUND",
    "COMPILATION_FAILED",
    "METADATA_OVERRIDE",
    "NO_POSTINGS",
    "ALREADY_REVERT",
    "INTERPRETER_PARSE",
    "INTERPRETER_RUNTIME",
];

/// Formance answers an idempotency key reused with another body with a plain
/// 400 `VALIDATION`; only the message tells it apart from a malformed request
/// (`invalid idempotency hash when using idempotency key '…'`, docs/LEDGER.md#idempotency-keys).
const MISMATCH_MARKER: &str = "invalid idempotency hash";

/// The ledger as error messages name it, for an answer without a Formance error
/// envelope (a proxy's HTML page, an empty 503).
const LEDGER: Answerer = Answerer {
    name: "the ledger",
    blank_body: " with no error body",
    snippet_limit: 200,
};

/// Formance's error envelope (`V2ErrorResponse`).
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(rename = "errorCode", default)]
    code: String,
    #[serde(rename = "errorMessage", default)]
    message: String,
}

/// What a non-2xx answer (or a failed bulk element) means for the caller.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A business refusal: `Ok(PostOutcome::Rejected)`.
    Rejected { code: String, message: String },
    /// 409 `CONFLICT`: a duplicate reference, or a concurrent duplicate key. Only the
    /// caller knows the request's reference, so only it can tell which.
    Conflict { message: String },
    /// Everything else, already classified transient or permanent.
    Failed(Error),
}

impl Refusal {
    /// For endpoints where neither a business refusal nor a conflict is an outcome
    /// (reads, account metadata): both become permanent errors keeping the code.
    pub(crate) fn into_error(self) -> Error {
        match self {
            Self::Rejected { code, message } => {
                Error::new(ErrorKind::Ledger, message).with_code(code)
            }
            Self::Conflict { message } => {
                Error::new(ErrorKind::Ledger, message).with_code("CONFLICT")
            }
            Self::Failed(error) => error,
        }
    }
}

/// Classifies a non-2xx answer from the ledger.
pub(crate) fn classify_answer(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: DateTime<Utc>,
) -> Refusal {
    let envelope: Option<ErrorBody> = serde_json::from_slice(body).ok();
    let (code, message) = match envelope {
        Some(ErrorBody { code, message }) if !code.is_empty() => (code, message),
        _ => (String::new(), LEDGER.describe_body(status, body)),
    };
    if matches!(status, StatusCode::BAD_REQUEST | StatusCode::CONFLICT)
        && let Some(refusal) = classify_code(&code, &message)
    {
        return refusal;
    }
    let kind = if status == StatusCode::NOT_FOUND {
        ErrorKind::NotFound
    } else {
        ErrorKind::Ledger
    };
    let mut error = Error::new(kind, message).with("status", status.as_u16());
    if !code.is_empty() {
        error = error.with_code(code);
    }
    if is_transient_status(status.as_u16()) {
        error = error.transient(retry_after(headers, now));
    }
    Refusal::Failed(error)
}

/// Classifies one failed `_bulk` element (`responseType: ERROR`); elements carry a
/// code and a description but no HTTP status.
pub(crate) fn classify_element(code: &str, description: &str) -> Refusal {
    if let Some(refusal) = classify_code(code, description) {
        return refusal;
    }
    let error = Error::new(ErrorKind::Ledger, description).with_code(code);
    // INTERNAL is a server fault (or "context canceled": the element never ran), so
    // sending it again under the same key is right.
    if code == "INTERNAL" {
        Refusal::Failed(error.transient(None))
    } else {
        Refusal::Failed(error)
    }
}

/// The codes whose meaning does not depend on the HTTP status.
fn classify_code(code: &str, message: &str) -> Option<Refusal> {
    if code == "VALIDATION" && message.to_ascii_lowercase().contains(MISMATCH_MARKER) {
        return Some(Refusal::Failed(
            Error::new(
                ErrorKind::IdempotencyMismatch,
                format!("the ledger holds this idempotency key with a different body: {message}"),
            )
            .with_code(code),
        ));
    }
    if BUSINESS_CODES.contains(&code) {
        return Some(Refusal::Rejected {
            code: code.to_owned(),
            message: message.to_owned(),
        });
    }
    (code == "CONFLICT").then(|| Refusal::Conflict {
        message: message.to_owned(),
    })
}

/// A request that got no answer. Connect errors, timeouts and broken connections are
/// transient: every write carries an idempotency key, so a retry cannot post twice.
pub(crate) fn classify_transport(err: reqwest::Error) -> Error {
    http_answer::classify_transport(
        err,
        "the ledger may have committed; a retry with the same key replays",
    )
}

/// Classifies a non-2xx answer from the OAuth2 token endpoint (RFC 6749 §5.2).
pub(crate) fn classify_token_answer(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: DateTime<Utc>,
) -> Error {
    #[derive(Default, Deserialize)]
    struct OAuthError {
        #[serde(default)]
        error: String,
        #[serde(default)]
        error_description: String,
    }
    let answer: OAuthError = serde_json::from_slice(body).unwrap_or_default();
    if is_transient_status(status.as_u16()) {
        return Error::new(
            ErrorKind::Transport,
            format!("the token endpoint answered {status}"),
        )
        .with("status", status.as_u16())
        .transient(retry_after(headers, now));
    }
    let mut error = Error::new(
        ErrorKind::Config,
        format!(
            "the token endpoint refused the client credentials ({status}): {} {}",
            answer.error, answer.error_description
        )
        .trim_end()
        .to_owned(),
    )
    .with("status", status.as_u16());
    if !answer.error.is_empty() {
        error = error.with("oauth_error", answer.error);
    }
    error
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeZone;
    use outbox_core::Retry;
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 10, 7, 12, 0, 0).unwrap()
    }

    fn answer(status: u16, body: &str) -> Refusal {
        classify_answer(
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            body.as_bytes(),
            now(),
        )
    }

    fn failed(refusal: Refusal) -> Error {
        match refusal {
            Refusal::Failed(error) => error,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn business_codes_are_rejections() {
        for code in BUSINESS_CODES {
            let body = format!(r#"{{"errorCode":"{code}","errorMessage":"no"}}"#);
            match answer(400, &body) {
                Refusal::Rejected { code: got, message } => {
                    assert_eq!(got, code);
                    assert_eq!(message, "no");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
    }

    #[test]
    fn idempotency_hash_mismatch_is_permanent() {
        let body = r#"{"errorCode":"VALIDATION","errorMessage":"invalid idempotency hash when using idempotency key 'k', has computed 'a' but 'b' is stored"}"#;
        let error = failed(answer(400, body));
        assert_eq!(error.kind(), &ErrorKind::IdempotencyMismatch);
        assert_eq!(error.retry(), Retry::Permanent);
        let element = failed(classify_element(
            "VALIDATION",
            "Invalid idempotency hash when using idempotency key 'k'",
        ));
        assert_eq!(element.kind(), &ErrorKind::IdempotencyMismatch);
    }

    #[test]
    fn other_validation_is_a_permanent_ledger_error_keeping_the_code() {
        let error = failed(answer(
            400,
            r#"{"errorCode":"VALIDATION","errorMessage":"invalid amount"}"#,
        ));
        assert_eq!(error.kind(), &ErrorKind::Ledger);
        assert_eq!(error.retry(), Retry::Permanent);
        assert_eq!(error.context("error_code"), Some("VALIDATION"));
        assert_eq!(error.context("status"), Some("400"));
        let missing = failed(answer(
            404,
            r#"{"errorCode":"LEDGER_NOT_FOUND","errorMessage":"ledger x not found"}"#,
        ));
        assert_eq!(missing.kind(), &ErrorKind::NotFound);
        assert_eq!(missing.context("error_code"), Some("LEDGER_NOT_FOUND"));
        let too_big = failed(answer(
            413,
            r#"{"errorCode":"BULK_SIZE_EXCEEDED","errorMessage":"max 10"}"#,
        ));
        assert_eq!(too_big.retry(), Retry::Permanent);
        let unauthorised = failed(answer(401, ""));
        assert_eq!(unauthorised.retry(), Retry::Permanent);
        assert!(unauthorised.message().contains("401"), "{unauthorised}");
    }

    #[test]
    fn conflict_is_left_to_the_caller() {
        let body = r#"{"errorCode":"CONFLICT","errorMessage":"duplicate reference \"r\""}"#;
        assert!(matches!(answer(409, body), Refusal::Conflict { .. }));
        assert!(matches!(
            classify_element("CONFLICT", "dup"),
            Refusal::Conflict { .. }
        ));
        let schema = failed(answer(
            409,
            r#"{"errorCode":"SCHEMA_ALREADY_EXISTS","errorMessage":"x"}"#,
        ));
        assert_eq!(schema.retry(), Retry::Permanent);
    }

    #[test]
    fn server_errors_and_throttling_are_transient_with_retry_after() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        for status in [500, 502, 503, 504, 408, 429] {
            let refusal = classify_answer(
                StatusCode::from_u16(status).unwrap(),
                &headers,
                b"<html>busy</html>",
                now(),
            );
            let error = failed(refusal);
            assert_eq!(
                error.retry(),
                Retry::Transient {
                    after: Some(Duration::from_secs(7))
                },
                "{status}"
            );
            assert!(error.message().contains("busy"), "{error}");
        }
        let plain = failed(answer(
            503,
            r#"{"errorCode":"INTERNAL","errorMessage":"too many clients"}"#,
        ));
        assert_eq!(plain.retry(), Retry::Transient { after: None });
        assert_eq!(plain.context("error_code"), Some("INTERNAL"));
    }

    #[test]
    fn bulk_internal_is_transient_other_codes_permanent() {
        assert!(failed(classify_element("INTERNAL", "context canceled")).is_transient());
        let not_found = failed(classify_element("NOT_FOUND", "tx 9 not found"));
        assert_eq!(not_found.retry(), Retry::Permanent);
        assert_eq!(not_found.context("error_code"), Some("NOT_FOUND"));
        assert!(matches!(
            classify_element("NO_POSTINGS", "none"),
            Refusal::Rejected { .. }
        ));
    }

    #[test]
    fn token_endpoint_answers() {
        let refused = classify_token_answer(
            StatusCode::UNAUTHORIZED,
            &HeaderMap::new(),
            br#"{"error":"invalid_client","error_description":"bad secret"}"#,
            now(),
        );
        assert_eq!(refused.kind(), &ErrorKind::Config);
        assert_eq!(refused.context("oauth_error"), Some("invalid_client"));
        assert_eq!(refused.retry(), Retry::Permanent);
        let busy = classify_token_answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &HeaderMap::new(),
            b"",
            now(),
        );
        assert!(busy.is_transient());
    }
}
