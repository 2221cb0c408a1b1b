//! Our own signature on Hop 2 HTTP messages, from [`crate::HttpPublisher`] to
//! [`crate::HttpSubscriber`] (or any consumer that checks it), with the secret the
//! two share (`--publish-secret` / `--secret`).
//!
//! | header | value |
//! | --- | --- |
//! | `outbox-delivery-id` | the message's dedup key, stable across retries: dedupe on it |
//! | `outbox-timestamp` | unix seconds of this attempt; signed, checked against the tolerance |
//! | `outbox-signature` | `v1,` + base64(HMAC-SHA256(secret, `"<delivery id>.<timestamp>.<identity>.<raw body>"`)); several space-separated entries may be sent, one matching entry passes |
//!
//! `<identity>` is every header of [`SIGNED_HEADERS`] (the message's identity:
//! instruction id, account, sequence, kind, ledger, ledger transaction), in that
//! order, each as `name:value\n` with its value exactly as sent (empty when absent).
//! The identity is signed because a consumer's inbox dedupes on the instruction id
//! and orders by account and sequence: were they outside the signature, a message
//! captured on the wire could be replayed within the tolerance under a new
//! instruction id and applied twice. Trace context is not signed (it moves no money).
//!
//! The key is the secret's text bytes as they are (no base64 decoding). A receiver
//! refuses a timestamp more than its tolerance (5 minutes) before or after its clock,
//! so a captured message cannot be replayed later, and compares in constant time.

use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use outbox_core::fanout::headers;
use outbox_core::{Error, ErrorKind, Result};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The message's dedup key, stable across retries.
pub const DELIVERY_ID_HEADER: &str = "outbox-delivery-id";
/// Unix seconds of this attempt.
pub const TIMESTAMP_HEADER: &str = "outbox-timestamp";
/// One or more space-separated `v1,<base64>` signatures.
pub const SIGNATURE_HEADER: &str = "outbox-signature";
/// Default largest distance between the signed timestamp and now, either way.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

const SCHEME: &str = "v1,";

/// The identity headers the signature covers, in the order they are signed.
pub const SIGNED_HEADERS: [&str; 6] = [
    headers::INSTRUCTION_ID,
    headers::ACCOUNT,
    headers::SEQUENCE,
    headers::EVENT_TYPE,
    headers::LEDGER,
    headers::LEDGER_TX_ID,
];

type HmacSha256 = Hmac<Sha256>;

/// The `outbox-signature` value for one attempt: `v1,<base64>`. `identity` holds the
/// message's headers as they will be sent (name, value); only [`SIGNED_HEADERS`]
/// count, and one that is not there is signed as empty.
pub fn sign(
    secret: &str,
    delivery_id: &str,
    timestamp: i64,
    identity: &[(&str, &str)],
    body: &[u8],
) -> String {
    let identity = signed_identity(|name| {
        identity
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    });
    format!(
        "{SCHEME}{}",
        STANDARD.encode(tag(
            secret,
            delivery_id,
            &timestamp.to_string(),
            &identity,
            body
        ))
    )
}

/// `name:value\n` for every signed header, in order; `value_of` gives a header's
/// value as sent.
fn signed_identity<'a>(value_of: impl Fn(&str) -> Option<&'a str>) -> String {
    SIGNED_HEADERS
        .iter()
        .map(|name| format!("{name}:{}\n", value_of(name).unwrap_or("")))
        .collect()
}

/// Refuses an empty secret, which anyone could sign with.
pub(crate) fn non_empty_secret(secret: &str) -> Result<()> {
    if secret.is_empty() {
        return Err(
            Error::new(ErrorKind::Config, "the signing secret must not be empty")
                .with("field", "secret"),
        );
    }
    Ok(())
}

/// Checks the signature and age of the messages our publisher sends.
#[derive(Clone)]
pub(crate) struct Verifier {
    secret: String,
    tolerance: Duration,
}

impl Verifier {
    /// # Errors
    /// `Config` naming `secret` when it is empty.
    pub(crate) fn new(secret: &str, tolerance: Duration) -> Result<Self> {
        non_empty_secret(secret)?;
        Ok(Self {
            secret: secret.to_owned(),
            tolerance,
        })
    }

    /// The delivery id of a message whose signature and age check out.
    ///
    /// # Errors
    /// `InvalidInput` naming the header at fault (`outbox-delivery-id`,
    /// `outbox-timestamp` or `outbox-signature`): missing, not text, outside the
    /// tolerance, or no signature matching the body.
    pub(crate) fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<String> {
        let id = required(headers, DELIVERY_ID_HEADER)?;
        let timestamp_text = required(headers, TIMESTAMP_HEADER)?;
        let signatures = headers
            .get_all(SIGNATURE_HEADER)
            .iter()
            .map(|value| value.to_str().map_err(|_| not_text(SIGNATURE_HEADER)))
            .collect::<Result<Vec<_>>>()?
            .join(" ");

        let timestamp = timestamp_text
            .parse::<i64>()
            .ok()
            .and_then(|secs| DateTime::from_timestamp(secs, 0))
            .ok_or_else(|| Error::invalid(TIMESTAMP_HEADER, "not a unix time in seconds"))?;
        let skew = (now - timestamp).abs().to_std().unwrap_or(Duration::MAX);
        if skew > self.tolerance {
            return Err(Error::invalid(
                TIMESTAMP_HEADER,
                format!(
                    "signed at {timestamp}, {}s away from now; more than the {}s tolerance (a replayed or delayed message)",
                    skew.as_secs(),
                    self.tolerance.as_secs()
                ),
            ));
        }

        // The timestamp is signed as sent, not as re-formatted from its parsed value;
        // so are the identity headers (a value that is not text signs as empty, and
        // then fails the match below or the header check after it).
        let identity = signed_identity(|name| headers.get(name).and_then(|v| v.to_str().ok()));
        let expected = tag(&self.secret, id, timestamp_text, &identity, body);
        let mut candidates = signatures
            .split_ascii_whitespace()
            .filter_map(|entry| entry.strip_prefix(SCHEME))
            .peekable();
        if candidates.peek().is_none() {
            return Err(Error::invalid(
                SIGNATURE_HEADER,
                "missing or no v1 signature",
            ));
        }
        // Every candidate is compared, in constant time, so timing tells nothing about
        // which entry or how many bytes matched.
        let matched = candidates.fold(false, |matched, candidate| {
            let decoded = STANDARD.decode(candidate).unwrap_or_default();
            let equal: bool = decoded.as_slice().ct_eq(expected.as_slice()).into();
            matched | equal
        });
        if !matched {
            return Err(Error::invalid(
                SIGNATURE_HEADER,
                "no v1 signature matches the body (another secret, or the body was altered)",
            ));
        }
        Ok(id.to_owned())
    }
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("secret", &"<redacted>")
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

fn tag(secret: &str, id: &str, timestamp: &str, identity: &str, body: &[u8]) -> [u8; 32] {
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(identity.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn required<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str> {
    let value = headers
        .get(name)
        .map(|value| value.to_str().map_err(|_| not_text(name)))
        .transpose()?;
    match value.map(str::trim) {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(Error::invalid(name, "missing")),
    }
}

fn not_text(name: &'static str) -> Error {
    Error::invalid(name, "not visible ASCII text")
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const SECRET: &str = "aG9wMi1zZWNyZXQtb2YtMjQtYnl0ZXM=";
    const BODY: &[u8] = br#"{"id":41}"#;

    fn headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(DELIVERY_ID_HEADER, HeaderValue::from_str(id).unwrap());
        map.insert(TIMESTAMP_HEADER, HeaderValue::from(timestamp));
        map.insert(SIGNATURE_HEADER, HeaderValue::from_str(signature).unwrap());
        map
    }

    fn verifier() -> Verifier {
        Verifier::new(SECRET, DEFAULT_TOLERANCE).unwrap()
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_id_timestamp_identity_and_body_keyed_with_the_secret_text() {
        // Computed independently:
        //   printf 'payouts:tx:41:committed.1700000000.outbox-instruction-id:0190f2a0-7b1c-7cc2-8a4e-000000000041\noutbox-account:merchants:4471\noutbox-sequence:3\noutbox-event-type:committed\noutbox-ledger:payouts\noutbox-ledger-tx-id:41\n.{"id":41}' |
        //   openssl dgst -sha256 -hmac 'aG9wMi1zZWNyZXQtb2YtMjQtYnl0ZXM=' -binary | base64
        let identity = [
            ("outbox-ledger-tx-id", "41"),
            ("outbox-account", "merchants:4471"),
            (
                "outbox-instruction-id",
                "0190f2a0-7b1c-7cc2-8a4e-000000000041",
            ),
            ("outbox-sequence", "3"),
            ("outbox-event-type", "committed"),
            ("outbox-ledger", "payouts"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        ];
        assert_eq!(
            sign(
                SECRET,
                "payouts:tx:41:committed",
                1_700_000_000,
                &identity,
                BODY
            ),
            "v1,sDUfAbtoMo/Prcf0Aq5ak9K/X5BA/Y20BFIieQiIoRQ="
        );
    }

    #[test]
    fn a_fresh_signature_verifies_to_its_delivery_id() {
        let now = Utc::now();
        let ts = now.timestamp();
        let signed = headers("d-1", ts, &sign(SECRET, "d-1", ts, &[], BODY));
        assert_eq!(verifier().verify(&signed, BODY, now).unwrap(), "d-1");
        // Another entry beside the matching one (a publisher mid-rotation) passes too.
        let both = format!("v1,AAAA {}", sign(SECRET, "d-1", ts, &[], BODY));
        let signed = headers("d-1", ts, &both);
        assert_eq!(verifier().verify(&signed, BODY, now).unwrap(), "d-1");
    }

    #[test]
    fn every_refusal_names_its_header() {
        let now = Utc::now();
        let ts = now.timestamp();
        let field = |map: &HeaderMap, body: &[u8]| {
            verifier()
                .verify(map, body, now)
                .unwrap_err()
                .field()
                .map(str::to_owned)
        };
        let good = sign(SECRET, "d-1", ts, &[], BODY);
        let signature = Some(SIGNATURE_HEADER.to_owned());
        assert_eq!(field(&headers("d-1", ts, &good), b"{}"), signature);
        let other = sign("another-secret", "d-1", ts, &[], BODY);
        assert_eq!(field(&headers("d-1", ts, &other), BODY), signature);
        assert_eq!(field(&headers("d-2", ts, &good), BODY), signature);
        assert_eq!(field(&headers("d-1", ts, "v2,abc"), BODY), signature);
        let stale = sign(SECRET, "d-1", ts - 301, &[], BODY);
        assert_eq!(
            field(&headers("d-1", ts - 301, &stale), BODY),
            Some(TIMESTAMP_HEADER.to_owned())
        );
        let future = sign(SECRET, "d-1", ts + 301, &[], BODY);
        assert_eq!(
            field(&headers("d-1", ts + 301, &future), BODY),
            Some(TIMESTAMP_HEADER.to_owned())
        );
        for missing in [DELIVERY_ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER] {
            let mut map = headers("d-1", ts, &good);
            map.remove(missing);
            assert_eq!(field(&map, BODY), Some(missing.to_owned()), "{missing}");
        }
        let mut map = headers("d-1", ts, &good);
        map.insert(
            DELIVERY_ID_HEADER,
            HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        assert_eq!(field(&map, BODY), Some(DELIVERY_ID_HEADER.to_owned()));
    }

    #[test]
    fn an_empty_secret_is_refused_and_debug_redacts() {
        let err = Verifier::new("", DEFAULT_TOLERANCE).unwrap_err();
        assert_eq!(
            (err.kind(), err.context("field")),
            (&ErrorKind::Config, Some("secret"))
        );
        assert!(!format!("{:?}", verifier()).contains(SECRET));
    }
}
