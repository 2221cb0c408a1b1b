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
//! This is the Formance webhooks service's own retry policy (FORMANCE.md §7), so a
//! consumer behind our publisher sees the same behaviour as one behind Formance.

use std::time::Duration;

use axum::Json;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDateTime, Utc};
use outbox_core::{Error, ErrorKind, Result};

/// Longest part of an error answer's body kept in the error message.
const BODY_SNIPPET: usize = 200;

/// 408, 429, 5xx and 3xx may pass on a later attempt; every other non-2xx answers
/// the same again.
pub(crate) fn is_transient_status(status: StatusCode) -> bool {
    status.is_server_error()
        || status.is_redirection()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
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
    let error = Error::new(ErrorKind::Transport, describe_body(status, body))
        .with("status", status.as_u16());
    if is_transient_status(status) {
        return Err(error.transient(retry_after(headers, now)));
    }
    Err(error)
}

/// A POST that got no answer. Connect errors, timeouts and broken exchanges are
/// transient: the message carries a stable `formance-webhook-id`, so the consumer
/// dedupes a retry of one that did arrive.
pub(crate) fn classify_transport(err: reqwest::Error) -> Error {
    // The URL could carry credentials; the endpoint context names it without them.
    let err = err.without_url();
    let detail = error_chain(&err);
    if err.is_builder() {
        return Error::new(
            ErrorKind::Config,
            format!("cannot build the request: {detail}"),
        );
    }
    let message = if err.is_timeout() {
        format!("no answer in time (the endpoint may have applied it): {detail}")
    } else if err.is_connect() {
        format!("cannot connect: {detail}")
    } else {
        format!("the exchange broke off: {detail}")
    };
    Error::new(ErrorKind::Transport, message).transient(None)
}

/// The delay asked for by `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, now)
}

fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok().map(Duration::from_secs);
    }
    let at = DateTime::parse_from_rfc2822(value)
        .map(|at| at.with_timezone(&Utc))
        .or_else(|_| {
            // The two obsolete forms a recipient must still accept: RFC 850 and asctime.
            NaiveDateTime::parse_from_str(value, "%A, %d-%b-%y %H:%M:%S GMT")
                .or_else(|_| NaiveDateTime::parse_from_str(value, "%a %b %e %H:%M:%S %Y"))
                .map(|naive| naive.and_utc())
        })
        .ok()?;
    // A date already past means "now", not "never".
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

fn describe_body(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return format!("the endpoint answered {status}");
    }
    let snippet: String = text.chars().take(BODY_SNIPPET).collect();
    let ellipsis = if text.chars().count() > BODY_SNIPPET {
        "…"
    } else {
        ""
    };
    format!("the endpoint answered {status}: {snippet}{ellipsis}")
}

/// `err: cause: cause`, since reqwest's own message ("error sending request") hides
/// the useful part ("connection refused") in its sources.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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
    use axum::http::HeaderValue;
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

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(
            answer(429, Some("2")).unwrap_err().retry(),
            Retry::Transient {
                after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            parse_retry_after("Wed, 07 Oct 2026 12:01:30 GMT", now()),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_retry_after("Wed, 07 Oct 2026 11:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now()), None);
    }

    #[test]
    fn a_long_error_body_is_cut() {
        let body = "x".repeat(1000);
        let err = classify_answer(
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            body.as_bytes(),
            now(),
        )
        .unwrap_err();
        assert!(err.message().len() < 300, "{}", err.message());
        assert!(err.message().ends_with('…'));
    }
}
