//! Verification of the webhooks the Formance webhooks service sends
//! (docs/LEDGER.md#the-webhook-signature).
//!
//! The signature is `v1,` + base64(HMAC-SHA256(key, `"<id>.<timestamp>.<raw body>"`))
//! where the key is the secret's text bytes **as-is** — unlike Svix or Standard
//! Webhooks, the secret is not base64-decoded first. Formance itself never checks the
//! timestamp's age, so a captured delivery could be replayed forever; the tolerance
//! here closes that (docs/ARCHITECTURE.md, P10). Verify before storing anything.

use std::fmt;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use outbox_core::fanout::RequestHeaders;
use outbox_core::{Error, ErrorKind, Result};
use reqwest::header::HeaderMap;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::config::{Secret, WebhookConfig};

/// The delivery id, stable across retries of one delivery: dedupe on it.
pub const WEBHOOK_ID_HEADER: &str = "formance-webhook-id";
/// Unix seconds of this attempt; signed, and checked against the tolerance.
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "formance-webhook-timestamp";
/// One or more space-separated `v1,<base64>` signatures.
pub const WEBHOOK_SIGNATURE_HEADER: &str = "formance-webhook-signature";
/// Default largest distance between the signed timestamp and now, either way.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

const SCHEME: &str = "v1,";

type HmacSha256 = Hmac<Sha256>;

/// Checks the signature and age of Formance webhook deliveries.
///
/// It may know a second, previous secret while a rotation is under way: a delivery
/// signed with either passes, so deliveries signed (or retried) with the old secret
/// are not lost while the ledger's webhook config switches to the new one.
#[derive(Clone)]
pub struct WebhookVerifier {
    secret: Secret,
    previous: Option<Secret>,
    tolerance: Duration,
}

/// The three signed header values, for callers not holding an [`HeaderMap`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WebhookHeaders<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    /// Space-separated `v1,<base64>` entries; entries of other schemes are ignored.
    pub signature: Option<&'a str>,
}

/// A delivery whose signature and age checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedWebhook {
    /// `formance-webhook-id`: dedupe deliveries on it.
    pub id: String,
    /// `formance-webhook-timestamp`: when this attempt was signed.
    pub timestamp: DateTime<Utc>,
}

impl WebhookVerifier {
    /// A verifier with the default five-minute tolerance.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for an empty secret, which anyone could sign with.
    pub fn new(secret: impl Into<Secret>) -> Result<Self> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err(
                Error::new(ErrorKind::Config, "the webhook secret must not be empty")
                    .with("field", "secret"),
            );
        }
        Ok(Self {
            secret,
            previous: None,
            tolerance: DEFAULT_TOLERANCE,
        })
    }

    /// Also accepts deliveries signed with `previous`, the secret being rotated out.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] naming `previous_secret` when it is empty.
    pub fn with_previous_secret(mut self, previous: impl Into<Secret>) -> Result<Self> {
        let previous = previous.into();
        if previous.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                "the previous webhook secret must not be empty",
            )
            .with("field", "previous_secret"));
        }
        self.previous = Some(previous);
        Ok(self)
    }

    /// # Errors
    /// As [`WebhookVerifier::new`] and [`WebhookVerifier::with_previous_secret`].
    pub fn from_config(config: &WebhookConfig) -> Result<Self> {
        let verifier = Self::new(config.secret.clone())?
            .with_tolerance(Duration::from_secs(config.tolerance_secs));
        match &config.previous_secret {
            Some(previous) => verifier.with_previous_secret(previous.clone()),
            None => Ok(verifier),
        }
    }

    #[must_use]
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// Verifies a delivery from its HTTP headers (several signature header lines are
    /// treated as one space-separated list).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the header at fault (`formance-webhook-id`,
    /// `formance-webhook-timestamp` or `formance-webhook-signature`).
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<VerifiedWebhook> {
        let headers: RequestHeaders = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect();
        self.verify_request(&headers, body, now)
    }

    /// Verifies a delivery from a request's headers as the webhook intake hands them
    /// over; the same rules as [`WebhookVerifier::verify`].
    ///
    /// # Errors
    /// As [`WebhookVerifier::verify`].
    pub fn verify_request(
        &self,
        headers: &RequestHeaders,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<VerifiedWebhook> {
        let signatures = headers.all_text(WEBHOOK_SIGNATURE_HEADER)?.join(" ");
        let parts = WebhookHeaders {
            id: headers.text(WEBHOOK_ID_HEADER)?,
            timestamp: headers.text(WEBHOOK_TIMESTAMP_HEADER)?,
            signature: (!signatures.is_empty()).then_some(signatures.as_str()),
        };
        self.verify_parts(parts, body, now)
    }

    /// Verifies a delivery from the three header values.
    ///
    /// # Errors
    /// As [`WebhookVerifier::verify`].
    pub fn verify_parts(
        &self,
        headers: WebhookHeaders<'_>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<VerifiedWebhook> {
        let id = required(headers.id, WEBHOOK_ID_HEADER)?;
        let timestamp_text = required(headers.timestamp, WEBHOOK_TIMESTAMP_HEADER)?;
        let signature = required(headers.signature, WEBHOOK_SIGNATURE_HEADER)?;

        let timestamp = timestamp_text
            .parse::<i64>()
            .ok()
            .and_then(|secs| DateTime::from_timestamp(secs, 0))
            .ok_or_else(|| {
                Error::invalid(WEBHOOK_TIMESTAMP_HEADER, "not a unix time in seconds")
            })?;
        let skew = (now - timestamp).abs().to_std().unwrap_or(Duration::MAX);
        if skew > self.tolerance {
            return Err(Error::invalid(
                WEBHOOK_TIMESTAMP_HEADER,
                format!(
                    "signed at {timestamp}, {}s away from now; more than the {}s tolerance (a replayed or delayed delivery)",
                    skew.as_secs(),
                    self.tolerance.as_secs()
                ),
            ));
        }

        // The timestamp is signed as sent, not as re-formatted from its parsed value.
        let expected: Vec<[u8; 32]> = std::iter::once(&self.secret)
            .chain(&self.previous)
            .map(|secret| tag(secret.expose(), id, timestamp_text, body))
            .collect();
        let mut candidates = signature
            .split_ascii_whitespace()
            .filter_map(|entry| entry.strip_prefix(SCHEME))
            .peekable();
        if candidates.peek().is_none() {
            return Err(Error::invalid(WEBHOOK_SIGNATURE_HEADER, "no v1 signature"));
        }
        // Every candidate is compared with every secret's tag, in constant time, so
        // timing tells nothing about which entry, which secret or how many bytes matched.
        let matched = candidates.fold(false, |matched, candidate| {
            let decoded = STANDARD.decode(candidate).unwrap_or_default();
            expected.iter().fold(matched, |matched, tag| {
                let equal: bool = decoded.as_slice().ct_eq(tag.as_slice()).into();
                matched | equal
            })
        });
        if !matched {
            return Err(Error::invalid(
                WEBHOOK_SIGNATURE_HEADER,
                "no v1 signature matches the body (unknown secret, or the body was altered)",
            ));
        }
        Ok(VerifiedWebhook {
            id: id.to_owned(),
            timestamp,
        })
    }
}

impl fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookVerifier")
            .field("secret", &"***")
            .field("previous_secret", &self.previous.as_ref().map(|_| "***"))
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

/// The `formance-webhook-signature` value Formance would send: `v1,<base64>`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    format!(
        "{SCHEME}{}",
        STANDARD.encode(tag(secret, id, &timestamp.to_string(), body))
    )
}

fn tag(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> [u8; 32] {
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn required<'a>(value: Option<&'a str>, name: &'static str) -> Result<&'a str> {
    match value.map(str::trim) {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(Error::invalid(name, "missing")),
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    const SECRET: &str = "c2VjcmV0LW9mLTI0LWJ5dGVzLWxvbmc=";

    #[test]
    fn the_key_is_the_secret_text_not_its_base64_decoding() {
        // Computed independently: printf 'msg_1.1700000000.{"a":1}' |
        //   openssl dgst -sha256 -hmac 'c2VjcmV0LW9mLTI0LWJ5dGVzLWxvbmc=' -binary | base64
        let signature = sign(SECRET, "msg_1", 1_700_000_000, br#"{"a":1}"#);
        assert_eq!(signature, "v1,Ci6xKa5KK/OOo6sfZisgyLrO/b1ohVzYVogcsQY/bkI=");
    }

    #[test]
    fn an_empty_secret_is_refused() {
        assert_eq!(
            WebhookVerifier::new("").unwrap_err().kind(),
            &ErrorKind::Config
        );
    }

    #[test]
    fn debug_redacts_the_secret() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert!(!format!("{verifier:?}").contains(SECRET));
    }

    #[test]
    fn non_ascii_header_is_named() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            WEBHOOK_ID_HEADER,
            HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        let err = verifier.verify(&headers, b"", Utc::now()).unwrap_err();
        assert_eq!(err.field(), Some(WEBHOOK_ID_HEADER));
    }
}
