//! The seam between the webhook intake and a ledger vendor.
//!
//! The intake (an HTTP server in a transport crate) knows how to take a request and
//! store messages; what a ledger's delivery looks like — how it is signed, which
//! headers carry its id, how its body maps to [`FanoutMessage`]s — is the ledger
//! adapter's. The intake hands each request's headers and raw body to a
//! [`WebhookDecoder`] and answers by what it returns:
//!
//! | decoder returns | intake |
//! | --- | --- |
//! | [`WebhookDelivery::Events`] | appends the messages under `id` (dedup), then 2xx |
//! | [`WebhookDelivery::Probe`] | 200, nothing stored |
//! | [`WebhookRefusal::Unauthenticated`] | 401, nothing parsed or stored |
//! | [`WebhookRefusal::Malformed`] | 400 naming the field, nothing stored |
//!
//! The body limit (413) is the intake's own and applies before the decoder runs.

use std::fmt;

use chrono::{DateTime, Utc};

use super::FanoutMessage;
use crate::error::{Error, Result};

/// Verifies and decodes one webhook delivery of a ledger.
///
/// # Contract
/// - Verify before decoding: a delivery that is not proven to come from the ledger
///   (signature missing or wrong, timestamp outside the tolerance, unknown secret) is
///   [`WebhookRefusal::Unauthenticated`], whatever its body.
/// - During a secret rotation, a delivery signed with either the current or the
///   previous secret is authentic.
/// - A verified body that is not a ledger event the decoder understands, or whose
///   outbox metadata is malformed, is [`WebhookRefusal::Malformed`] with an
///   `InvalidInput` error naming the field (its JSON path).
/// - The delivery id is stable across the ledger's retries of one delivery: the store
///   dedupes on it (and on each message's [`FanoutMessage::dedup_key`]).
/// - An event that carries nothing for Hop 2 (an ignored type, a transaction without
///   outbox metadata) is `Events` with no messages, not a refusal.
/// - No I/O: the decoder runs inside the request, before anything is stored.
pub trait WebhookDecoder: Send + Sync + fmt::Debug + 'static {
    /// Verifies and decodes the request (`headers`, the raw `body` as received) at
    /// `now`, the time its timestamp is checked against.
    ///
    /// # Errors
    /// A [`WebhookRefusal`] saying whether the delivery was not authentic or not
    /// understood, with the error naming the header or field at fault.
    fn decode(
        &self,
        headers: &RequestHeaders,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<WebhookDelivery, WebhookRefusal>;

    /// The media type the ledger's deliveries carry (`Content-Type`, parameters such
    /// as `charset` aside). The intake refuses a delivery of another type, or of none,
    /// with 415 before decoding it. JSON unless a decoder says otherwise.
    fn media_type(&self) -> &str {
        "application/json"
    }
}

/// What an authentic delivery is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookDelivery {
    /// A connectivity test the ledger sends when a webhook is configured: answered
    /// 2xx, nothing stored.
    Probe,
    /// Ledger events: the messages they carry (possibly none) and the delivery id
    /// the store dedupes on.
    Events {
        /// Stable across the ledger's retries of this delivery.
        id: String,
        /// In the order the delivery lists them.
        messages: Vec<FanoutMessage>,
    },
}

/// Why a delivery was refused; the error names the header or field at fault.
#[derive(Debug)]
pub enum WebhookRefusal {
    /// Not proven to come from the ledger (HTTP 401).
    Unauthenticated(Error),
    /// Authentic, but not a ledger event the decoder understands (HTTP 400).
    Malformed(Error),
}

impl WebhookRefusal {
    /// The error, naming the header or field at fault.
    pub fn error(&self) -> &Error {
        match self {
            Self::Unauthenticated(error) | Self::Malformed(error) => error,
        }
    }
}

impl fmt::Display for WebhookRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unauthenticated(error) => write!(f, "not authentic: {error}"),
            Self::Malformed(error) => write!(f, "malformed: {error}"),
        }
    }
}

/// The headers of one request as the decoder sees them: names compared without case,
/// values as raw bytes, in the order received; a name may appear several times.
#[derive(Clone, Default)]
pub struct RequestHeaders {
    entries: Vec<(String, Vec<u8>)>,
}

impl RequestHeaders {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one header line (the name is kept lower-cased).
    pub fn push(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.entries.push((name.to_ascii_lowercase(), value.into()));
    }

    /// Every value of `name`, in the order received.
    pub fn get_all<'a, 'n>(
        &'a self,
        name: &'n str,
    ) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.entries
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.get_all(name).next()
    }

    /// The first value of `name` as text; `None` when absent.
    ///
    /// # Errors
    /// `InvalidInput` naming the header when its value is not visible ASCII.
    pub fn text(&self, name: &str) -> Result<Option<&str>> {
        self.get(name)
            .map(|value| header_text(name, value))
            .transpose()
    }

    /// Every value of `name` as text, in the order received.
    ///
    /// # Errors
    /// As [`RequestHeaders::text`], for the first value that is not visible ASCII.
    pub fn all_text(&self, name: &str) -> Result<Vec<&str>> {
        self.get_all(name)
            .map(|value| header_text(name, value))
            .collect()
    }
}

/// A header value as text: visible ASCII, spaces and tabs (what HTTP allows a
/// server to read as a string).
fn header_text<'a>(name: &str, value: &'a [u8]) -> Result<&'a str> {
    let printable = value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
    match std::str::from_utf8(value) {
        Ok(text) if printable => Ok(text),
        _ => Err(Error::invalid(name, "not visible ASCII text")),
    }
}

impl<N: AsRef<str>, V: Into<Vec<u8>>> FromIterator<(N, V)> for RequestHeaders {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut headers = Self::new();
        for (name, value) in iter {
            headers.push(name.as_ref(), value);
        }
        headers
    }
}

impl fmt::Debug for RequestHeaders {
    /// Names only: a header value may be a credential.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(name, _)| name))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_ignore_case_and_keep_every_line_in_order() {
        let headers: RequestHeaders =
            [("Signature", "v1,a"), ("id", "wh-1"), ("signature", "v1,b")]
                .into_iter()
                .collect();
        assert_eq!(headers.text("SIGNATURE").unwrap(), Some("v1,a"));
        assert_eq!(headers.all_text("signature").unwrap(), ["v1,a", "v1,b"]);
        assert_eq!(headers.text("Id").unwrap(), Some("wh-1"));
        assert_eq!(headers.text("absent").unwrap(), None);
        assert!(headers.all_text("absent").unwrap().is_empty());
    }

    #[test]
    fn a_value_that_is_not_text_is_named() {
        let mut headers = RequestHeaders::new();
        headers.push("x-id", b"caf\xe9".to_vec());
        headers.push("x-line", "a\nb");
        assert_eq!(headers.get("x-id"), Some(&b"caf\xe9"[..]));
        assert_eq!(headers.text("x-id").unwrap_err().field(), Some("x-id"));
        assert_eq!(
            headers.all_text("x-line").unwrap_err().field(),
            Some("x-line")
        );
    }

    #[test]
    fn debug_shows_names_not_values() {
        let headers: RequestHeaders = [("authorization", "Bearer hunter2")].into_iter().collect();
        let shown = format!("{headers:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn a_refusal_keeps_its_error() {
        let refusal = WebhookRefusal::Malformed(Error::invalid("payload.ledger", "missing"));
        assert_eq!(refusal.error().field(), Some("payload.ledger"));
        assert!(refusal.to_string().starts_with("malformed: "), "{refusal}");
    }
}
