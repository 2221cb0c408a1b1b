//! The reqwest side of reading an HTTP answer: `Retry-After` from a `HeaderMap`, and
//! a request that got no answer from a `reqwest::Error`. The rules themselves
//! (which statuses may pass on a retry, how `Retry-After` reads, the classes of no
//! answer) are `outbox_core::http_answer`'s, shared with the HTTP fan-out publisher.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::Error;
use outbox_core::http_answer::{NoAnswer, error_chain, no_answer, parse_retry_after};
use reqwest::header::{HeaderMap, RETRY_AFTER};

/// The delay asked for by a readable `Retry-After` header.
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, now)
}

/// A request that got no answer, classified by `outbox_core::http_answer::no_answer`.
/// The URL is left out of the message: it could carry credentials, and the caller's
/// context names the endpoint.
pub(crate) fn classify_transport(err: reqwest::Error, timeout_note: &str) -> Error {
    // Only host and port leave: the URL may carry credentials, and the path is the
    // `endpoint` the caller names.
    let server = err.url().and_then(|url| {
        url.host_str()
            .map(|host| format!("{host}:{}", url.port_or_known_default().unwrap_or(0)))
    });
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
    let error = no_answer(why, &error_chain(&err), timeout_note);
    match server {
        Some(server) => error.with("server", server),
        None => error,
    }
    .with_source(err)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use outbox_core::{ErrorKind, Retry};
    use reqwest::header::HeaderValue;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 10, 7, 12, 0, 0).unwrap()
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
        // The server is named (an operator must know which one is down), never the
        // credentials or the path of the URL.
        assert_eq!(
            error.context("server"),
            Some(format!("127.0.0.1:{port}").as_str()),
            "{error}"
        );
        let shown = error.to_string();
        assert!(
            !shown.contains("secret") && !shown.contains("/path"),
            "{shown}"
        );
    }
}
