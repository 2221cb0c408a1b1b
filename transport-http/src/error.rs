//! Error mapping, once for the crate: an endpoint's HTTP answer or a failed exchange
//! into the core error's kind and retry class, and a core error into the HTTP answer
//! our own servers give.
//!
//! | outcome of a POST | class |
//! | --- | --- |
//! | 2xx | ok |
//! | connect error, timeout, broken exchange | `Transport`, transient |
//! | 408, 429, 5xx (and 3xx: redirects are not followed) | `Transport`, transient, `Retry-After` as `after` |
//! | other 4xx | `Transport`, permanent, `status` in the context |
//!
//! The same retry policy as a ledger's webhook sender commonly applies
//! (docs/LEDGER.md#the-webhook-retry-policy), so a consumer behind our publisher sees
//! what it would see behind the ledger. The rules (which statuses may pass,
//! `Retry-After`, the body snippet, the cause chain, the classes of no answer) are
//! `outbox_core::http_answer`'s, shared with the ledger client.

use axum::Json;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use outbox_core::http_answer::{
    Answerer, NoAnswer, error_chain, is_redirection, is_transient_status, no_answer,
    parse_retry_after,
};
use outbox_core::{Error, ErrorKind, Result};

/// How error messages name the endpoint, and how much of an error answer's body
/// they keep.
const ENDPOINT: Answerer = Answerer {
    name: "the endpoint",
    blank_body: "",
    snippet_limit: 200,
};

/// 408, 429, 5xx and 3xx may pass on a later attempt; every other non-2xx answers
/// the same again. A 3xx is retried rather than dead-lettered: redirects are not
/// followed (a redirected POST loses its body or its signature's meaning), and an
/// operator fixing the endpoint lets the message through.
fn is_retryable(status: StatusCode) -> bool {
    is_transient_status(status.as_u16()) || is_redirection(status.as_u16())
}

/// The delay asked for by a readable `Retry-After` header.
fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<std::time::Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, now)
}

/// Classifies an endpoint's answer to one POST.
///
/// # Errors
/// A `Transport` error for every non-2xx answer: transient (with `Retry-After`) or
/// permanent per the table above, with `status` in its context.
pub(crate) fn classify_answer(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<()> {
    if status.is_success() {
        return Ok(());
    }
    let error = Error::new(ErrorKind::Transport, ENDPOINT.describe_body(status, body))
        .with("status", status.as_u16());
    if is_retryable(status) {
        return Err(error.transient(retry_after(headers, now)));
    }
    Err(error)
}

/// A POST that got no answer. Connect errors, timeouts and broken exchanges are
/// transient: the message carries a stable `outbox-delivery-id`, so the consumer
/// dedupes a retry of one that did arrive. The URL is left out of the message: it
/// could carry credentials, and the caller's context names the endpoint.
pub(crate) fn classify_transport(err: reqwest::Error) -> Error {
    let err = err.without_url();
    let why = if err.is_builder() {
        NoAnswer::Unbuildable
    } else if err.is_timeout() {
        NoAnswer::Timeout
    } else if err.is_connect() {
        NoAnswer::Connect
    } else {
        NoAnswer::BrokenOff
    };
    no_answer(why, &error_chain(&err), "the endpoint may have applied it").with_source(err)
}

/// Our servers' answer when the sink did not take a delivery: 503 for a transient
/// error, 500 for a permanent one. The sender retries both (its 5xx class).
pub(crate) fn sink_refusal(error: &Error) -> Response {
    let status = if error.is_transient() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    refuse(status, error)
}

/// A refusal with a JSON body naming the message and the field or header at fault.
pub(crate) fn refuse(status: StatusCode, error: &Error) -> Response {
    if status.is_server_error() {
        tracing::warn!(%status, error = %error, "delivery not applied; the sender will retry");
    } else {
        tracing::warn!(%status, error = %error, "delivery refused");
    }
    let body = serde_json::json!({ "error": error.message(), "field": error.field() });
    (status, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::HeaderValue;
    use axum::http::header::RETRY_AFTER;
    use chrono::TimeZone;
    use outbox_core::Retry;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 10, 7, 12, 0, 0).unwrap()
    }

    fn answer(status: u16, retry_after: Option<&'static str>) -> Result<()> {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
        }
        classify_answer(StatusCode::from_u16(status).unwrap(), &headers, b"", now())
    }

    #[test]
    fn success_transient_and_permanent_statuses() {
        assert!(answer(200, None).is_ok());
        assert!(answer(204, None).is_ok());
        for status in [408, 429, 500, 502, 503, 307] {
            let err = answer(status, None).unwrap_err();
            assert_eq!(
                (err.kind(), err.retry()),
                (&ErrorKind::Transport, Retry::Transient { after: None }),
                "{status}"
            );
            assert_eq!(err.context("status"), Some(status.to_string().as_str()));
        }
        for status in [400, 401, 403, 404, 409, 413, 422] {
            let err = answer(status, None).unwrap_err();
            assert_eq!(
                (err.kind(), err.retry()),
                (&ErrorKind::Transport, Retry::Permanent),
                "{status}"
            );
            assert_eq!(err.context("status"), Some(status.to_string().as_str()));
        }
    }

    /// The delay itself is read by `outbox_core::http_answer::parse_retry_after`
    /// (tested there); here only that it reaches the error.
    #[test]
    fn retry_after_reaches_the_error() {
        assert_eq!(
            answer(429, Some("2")).unwrap_err().retry(),
            Retry::Transient {
                after: Some(Duration::from_secs(2))
            }
        );
    }
}
