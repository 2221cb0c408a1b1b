//! How an HTTP answer is read, for every HTTP client of ledger-outbox (the ledger
//! adapter's and the HTTP fan-out publisher's), as plain functions over a status code
//! and a header value, so neither adapter depends on the other and the core on no
//! HTTP library.
//!
//! | answer | class |
//! | --- | --- |
//! | 408, 429, 5xx | may pass on a later attempt ([`is_transient_status`]), after `Retry-After` ([`parse_retry_after`]) |
//! | 3xx | [`is_redirection`]: a client that does not follow redirects decides (the publisher retries, the ledger client does not) |
//! | other 4xx | the same again on every attempt |
//! | no answer | [`no_answer`]: an unbuildable request is a permanent `Config` error; a connect error, timeout or broken exchange a transient `Transport` one |
//!
//! Each client turns its library's types into these (its status as `u16`, the
//! `Retry-After` value as text, its error into a [`NoAnswer`]) and adds its own
//! context.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::error::{Error, ErrorKind};

/// 408, 429 and 5xx may pass on a later attempt; every other status will answer the
/// same again. A client may add its own (the HTTP publisher adds 3xx).
pub fn is_transient_status(status: u16) -> bool {
    (500..600).contains(&status) || status == 408 || status == 429
}

/// A 3xx: only a client that does not follow redirects sees one.
pub fn is_redirection(status: u16) -> bool {
    (300..400).contains(&status)
}

/// The delay a `Retry-After` value asks for: delay-seconds or an HTTP-date (RFC 9110
/// §10.2.3, all three date forms); a date already past is zero. `None` for a value
/// that is neither.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
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
    /// HTML page, an empty 503): `<name> answered <status>: <trimmed snippet>`, with
    /// `status` as the client shows it (`502 Bad Gateway`).
    pub fn describe_body(&self, status: impl fmt::Display, body: &[u8]) -> String {
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

/// `err: cause: cause`, since an HTTP library's own message ("error sending request")
/// hides the useful part ("connection refused") in its sources. A cause whose text
/// the message already holds is not repeated.
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

/// Why a request got no answer, as the client's library tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// The request could not be built (a malformed URL or header): never sent.
    Unbuildable,
    /// No answer within the client's timeout: the other side may have acted.
    Timeout,
    /// The connection could not be opened: nothing was sent.
    Connect,
    /// The exchange broke off after it started.
    BrokenOff,
}

/// The error for a request that got no answer, `detail` being the library's error
/// with its causes ([`error_chain`], without any URL: it could carry credentials).
/// An unbuildable request is a permanent `Config` error; the rest are transient
/// `Transport` errors (the caller's protocol makes a retry safe: an idempotency key,
/// a stable message id). `timeout_note` says what a timeout leaves open:
/// `no answer in time (<timeout_note>): <detail>`.
pub fn no_answer(why: NoAnswer, detail: &str, timeout_note: &str) -> Error {
    let message = match why {
        NoAnswer::Unbuildable => {
            return Error::new(
                ErrorKind::Config,
                format!("cannot build the request: {detail}"),
            );
        }
        NoAnswer::Timeout => format!("no answer in time ({timeout_note}): {detail}"),
        NoAnswer::Connect => format!("cannot connect: {detail}"),
        NoAnswer::BrokenOff => format!("the exchange broke off: {detail}"),
    };
    Error::new(ErrorKind::Transport, message).transient(None)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::error::Retry;

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
        for status in [408, 429, 500, 502, 503, 504, 599] {
            assert!(is_transient_status(status), "{status}");
        }
        for status in [200, 307, 400, 401, 403, 404, 409, 413, 422, 600] {
            assert!(!is_transient_status(status), "{status}");
        }
    }

    #[test]
    fn redirections_are_3xx() {
        for status in [300, 301, 302, 307, 308, 399] {
            assert!(is_redirection(status), "{status}");
        }
        for status in [200, 204, 299, 400, 500] {
            assert!(!is_redirection(status), "{status}");
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
    fn a_long_error_body_is_cut() {
        let body = "x".repeat(1000);
        let message = ENDPOINT.describe_body("400 Bad Request", body.as_bytes());
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
            ledger.describe_body("502 Bad Gateway", b"  <html>busy</html>\n"),
            "the ledger answered 502 Bad Gateway: <html>busy</html>"
        );
        assert_eq!(
            ledger.describe_body("401 Unauthorized", b" \n"),
            "the ledger answered 401 Unauthorized with no error body"
        );
        assert_eq!(
            ENDPOINT.describe_body("503 Service Unavailable", b""),
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
    fn no_answer_classes() {
        let unbuildable = no_answer(NoAnswer::Unbuildable, "bad url", "unused");
        assert_eq!(
            (unbuildable.kind(), unbuildable.retry()),
            (&ErrorKind::Config, Retry::Permanent)
        );
        assert_eq!(unbuildable.message(), "cannot build the request: bad url");
        for (why, message) in [
            (
                NoAnswer::Timeout,
                "no answer in time (it may have applied it): cause",
            ),
            (NoAnswer::Connect, "cannot connect: cause"),
            (NoAnswer::BrokenOff, "the exchange broke off: cause"),
        ] {
            let error = no_answer(why, "cause", "it may have applied it");
            assert_eq!(
                (error.kind(), error.retry(), error.message()),
                (
                    &ErrorKind::Transport,
                    Retry::Transient { after: None },
                    message
                ),
                "{why:?}"
            );
        }
    }
}
