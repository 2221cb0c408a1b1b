//! The HTTP answer reading both our HTTP clients share: this crate's Formance
//! client and `outbox-transport-http`'s publisher. Which statuses may pass on a
//! retry, the delay a `Retry-After` asks for, a short description of an answer's
//! body for an error message, a reqwest error with its sources, and the class of a
//! request that got no answer. No I/O here; each client classifies its answers into
//! core errors with these.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use outbox_core::{Error, ErrorKind};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

/// 408, 429 and 5xx may pass on a later attempt; every other status will answer the
/// same again. A client may add its own (the HTTP publisher adds 3xx).
pub fn is_transient_status(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// The delay asked for by `Retry-After`: delay-seconds or an HTTP-date (RFC 9110
/// §10.2.3); a date already past is zero. `None` without a readable header.
pub fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
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

/// The other side of an exchange, as an error message names it.
#[derive(Clone, Copy, Debug)]
pub struct Answerer {
    /// `"the ledger"`, `"the endpoint"`.
    pub name: &'static str,
    /// Said after the status when the body is blank (`" with no error body"`), or `""`.
    pub blank_body: &'static str,
    /// The longest part of a body kept in a message, in characters; `…` marks a cut.
    pub snippet_limit: usize,
}

impl Answerer {
    /// A short description of an answer that carries no error envelope (a proxy's
    /// HTML page, an empty 503): `<name> answered <status>: <trimmed snippet>`.
    pub fn describe_body(&self, status: StatusCode, body: &[u8]) -> String {
        let name = self.name;
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if text.is_empty() {
            return format!("{name} answered {status}{}", self.blank_body);
        }
        let snippet: String = text.chars().take(self.snippet_limit).collect();
        let ellipsis = if text.chars().count() > self.snippet_limit {
            "…"
        } else {
            ""
        };
        format!("{name} answered {status}: {snippet}{ellipsis}")
    }
}

/// `err: cause: cause`, since reqwest's own message ("error sending request") hides
/// the useful part ("connection refused") in its sources. A cause whose text the
/// message already holds is not repeated.
pub fn error_chain(err: &dyn std::error::Error) -> String {
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

/// A request that got no answer. A request that could not be built is a permanent
/// `Config` error; connect errors, timeouts and broken exchanges are transient
/// `Transport` errors (the caller's protocol makes a retry safe: an idempotency key,
/// a stable message id). `timeout_note` says what a timeout leaves open:
/// `no answer in time (<timeout_note>): <cause chain>`. The URL is left out of the
/// message: it could carry credentials, and the caller's context names the endpoint.
pub fn classify_transport(err: reqwest::Error, timeout_note: &str) -> Error {
    let err = err.without_url();
    let detail = error_chain(&err);
    if err.is_builder() {
        return Error::new(
            ErrorKind::Config,
            format!("cannot build the request: {detail}"),
        );
    }
    let message = if err.is_timeout() {
        format!("no answer in time ({timeout_note}): {detail}")
    } else if err.is_connect() {
        format!("cannot connect: {detail}")
    } else {
        format!("the exchange broke off: {detail}")
    };
    Error::new(ErrorKind::Transport, message).transient(None)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use outbox_core::Retry;
    use reqwest::header::HeaderValue;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 10, 7, 12, 0, 0).unwrap()
    }

    const ENDPOINT: Answerer = Answerer {
        name: "the endpoint",
        blank_body: "",
        snippet_limit: 200,
    };

    #[test]
    fn transient_statuses_are_408_429_and_5xx() {
        for status in [408, 429, 500, 502, 503, 504] {
            assert!(
                is_transient_status(StatusCode::from_u16(status).unwrap()),
                "{status}"
            );
        }
        for status in [200, 307, 400, 401, 403, 404, 409, 413, 422] {
            assert!(
                !is_transient_status(StatusCode::from_u16(status).unwrap()),
                "{status}"
            );
        }
    }

    #[test]
    fn retry_after_accepts_seconds_and_every_http_date_form() {
        assert_eq!(
            parse_retry_after(" 120 ", now()),
            Some(Duration::from_secs(120))
        );
        let in_90s = Some(Duration::from_secs(90));
        assert_eq!(
            parse_retry_after("Wed, 07 Oct 2026 12:01:30 GMT", now()),
            in_90s
        );
        assert_eq!(
            parse_retry_after("Wednesday, 07-Oct-26 12:01:30 GMT", now()),
            in_90s
        );
        assert_eq!(parse_retry_after("Wed Oct  7 12:01:30 2026", now()), in_90s);
        assert_eq!(
            parse_retry_after("Wed, 07 Oct 2026 11:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now()), None);
        assert_eq!(parse_retry_after("-5", now()), None);
        assert_eq!(parse_retry_after("", now()), None);
    }

    #[test]
    fn retry_after_reads_the_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers, now()), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers, now()), Some(Duration::from_secs(2)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 07 Oct 2026 12:01:30 GMT"),
        );
        assert_eq!(retry_after(&headers, now()), Some(Duration::from_secs(90)));
    }

    #[test]
    fn a_long_error_body_is_cut() {
        let body = "x".repeat(1000);
        let message = ENDPOINT.describe_body(StatusCode::BAD_REQUEST, body.as_bytes());
        assert!(message.len() < 300, "{message}");
        assert!(message.ends_with('…'));
        assert_eq!(
            message,
            format!(
                "the endpoint answered 400 Bad Request: {}…",
                "x".repeat(200)
            )
        );
    }

    #[test]
    fn a_short_body_is_trimmed_and_a_blank_one_named() {
        let ledger = Answerer {
            name: "the ledger",
            blank_body: " with no error body",
            snippet_limit: 200,
        };
        assert_eq!(
            ledger.describe_body(StatusCode::BAD_GATEWAY, b"  <html>busy</html>\n"),
            "the ledger answered 502 Bad Gateway: <html>busy</html>"
        );
        assert_eq!(
            ledger.describe_body(StatusCode::UNAUTHORIZED, b" \n"),
            "the ledger answered 401 Unauthorized with no error body"
        );
        assert_eq!(
            ENDPOINT.describe_body(StatusCode::SERVICE_UNAVAILABLE, b""),
            "the endpoint answered 503 Service Unavailable"
        );
    }

    #[test]
    fn error_chain_adds_causes_not_already_said() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let err = Layer(
            "error sending request",
            Some(Box::new(Layer(
                "client error (Connect)",
                Some(Box::new(Layer("Connect", None))),
            ))),
        );
        assert_eq!(
            error_chain(&err),
            "error sending request: client error (Connect)"
        );
        let refused = Layer(
            "error sending request",
            Some(Box::new(Layer("connection refused", None))),
        );
        assert_eq!(
            error_chain(&refused),
            "error sending request: connection refused"
        );
    }

    #[test]
    fn an_unbuildable_request_is_a_permanent_config_error() {
        let err = reqwest::Client::new()
            .get("http://user:secret@[::1")
            .build()
            .unwrap_err();
        let error = classify_transport(err, "unused");
        assert_eq!(error.kind(), &ErrorKind::Config);
        assert_eq!(error.retry(), Retry::Permanent);
        assert!(
            error.message().starts_with("cannot build the request: "),
            "{error}"
        );
        assert!(!error.message().contains("secret"), "{error}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_transient_transport_without_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap()
            .port();
        let err = reqwest::Client::new()
            .get(format!("http://user:secret@127.0.0.1:{port}/path"))
            .send()
            .await
            .unwrap_err();
        let error = classify_transport(err, "unused");
        assert_eq!(error.kind(), &ErrorKind::Transport);
        assert_eq!(error.retry(), Retry::Transient { after: None });
        assert!(error.message().starts_with("cannot connect: "), "{error}");
        assert!(!error.message().contains("secret"), "{error}");
    }
}
