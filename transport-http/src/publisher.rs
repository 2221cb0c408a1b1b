//! `HttpPublisher`: the fan-out loop's sink for one subscriber endpoint, POSTing each
//! message with our own signature (`crate::signing`).

use std::fmt;

use async_trait::async_trait;
use axum::http::header::{CONTENT_TYPE, USER_AGENT};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use chrono::Utc;
use futures_util::future::join_all;
use outbox_core::fanout::headers;
use outbox_core::{Error, ErrorKind, FanoutMessage, Publisher, PublisherCapabilities, Result};
use reqwest::{Client, Url, redirect};

use crate::config::PublisherConfig;
use crate::error::{classify_answer, classify_transport};
use crate::signing::{
    DELIVERY_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, non_empty_secret, sign,
};

/// Publishes Hop 2 messages to one HTTP endpoint (an [`crate::HttpSubscriber`] or any
/// receiver that checks our signature, `crate::signing`).
///
/// Each message is one `POST`: the body is the payload bytes as stored, the identity
/// travels in the `outbox-*` headers ([`outbox_core::fanout::headers`]), and
/// `outbox-delivery-id` is the message's [`FanoutMessage::dedup_key`], stable across
/// retries, so the receiver can dedupe. The timestamp and signature are fresh on
/// every attempt.
///
/// Messages of one `publish` call are sent concurrently; HTTP keeps no order between
/// requests, so the publisher does not claim `ordered_pipeline` and the fan-out loop
/// hands it at most one message per account per call.
pub struct HttpPublisher {
    client: Client,
    endpoint: Url,
    name: String,
    secret: String,
}

impl HttpPublisher {
    /// # Errors
    /// `Config` naming the field when the endpoint is not an http(s) URL, the secret
    /// is empty or the HTTP client cannot be built.
    pub fn new(config: PublisherConfig) -> Result<Self> {
        let endpoint = endpoint(&config.endpoint)?;
        non_empty_secret(&config.secret)?;
        let client = Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            // A redirected POST would lose its body or its signature's meaning; a 3xx
            // is reported (transient) so an operator fixes the endpoint instead.
            .redirect(redirect::Policy::none())
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Config,
                    format!("cannot build the HTTP client: {e}"),
                )
            })?;
        Ok(Self {
            name: redact_url(&endpoint),
            client,
            endpoint,
            secret: config.secret,
        })
    }

    /// Sends one message and classifies the answer.
    async fn send(&self, message: &FanoutMessage) -> Result<()> {
        let timestamp = Utc::now().timestamp();
        let request = self.request_headers(message, timestamp)?;
        let response = self
            .client
            .post(self.endpoint.clone())
            .headers(request)
            .body(message.payload.clone())
            .send()
            .await
            .map_err(classify_transport)?;
        let status = response.status();
        let answer_headers = response.headers().clone();
        // The body of an error answer says why; a success's body is not read.
        let body = if status.is_success() {
            Default::default()
        } else {
            response.bytes().await.unwrap_or_default()
        };
        classify_answer(status, &answer_headers, &body, Utc::now())
    }

    fn request_headers(&self, message: &FanoutMessage, timestamp: i64) -> Result<HeaderMap> {
        let delivery_id = message.dedup_key();
        let identity = headers::encode(message);
        let identity: Vec<(&str, &str)> = identity.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let signature = sign(
            &self.secret,
            &delivery_id,
            timestamp,
            &identity,
            &message.payload,
        );
        let mut map = HeaderMap::new();
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        map.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("outbox-transport-http/", env!("CARGO_PKG_VERSION"))),
        );
        let signed = [
            (DELIVERY_ID_HEADER, delivery_id),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (SIGNATURE_HEADER, signature),
        ];
        for (name, value) in headers::encode(message).into_iter().chain(signed) {
            let value = HeaderValue::from_str(&value).map_err(|_| {
                Error::invalid(
                    format!("header {name}"),
                    "not a valid HTTP header value (control characters)",
                )
            })?;
            map.insert(HeaderName::from_static(name), value);
        }
        Ok(map)
    }
}

impl fmt::Debug for HttpPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpPublisher")
            .field("endpoint", &self.name)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Publisher for HttpPublisher {
    /// The endpoint URL without credentials, query or fragment.
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::new(false)
    }

    /// One result per message, in input order; `Ok` only for a 2xx answer.
    ///
    /// Cancel safety: a dropped call may leave requests sent and unanswered; the loop
    /// re-sends them under the same `outbox-delivery-id`.
    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        join_all(messages.iter().map(|message| async move {
            self.send(message).await.map_err(|e| {
                e.with("endpoint", &self.name)
                    .with("instruction_id", &message.instruction_id)
                    .with("account", &message.account)
                    .with("sequence", message.sequence)
            })
        }))
        .await
    }
}

/// The endpoint as an http(s) URL.
pub(crate) fn endpoint(text: &str) -> Result<Url> {
    Url::parse(text)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| {
            Error::new(ErrorKind::Config, "the endpoint is not an http(s) URL")
                .with("field", "endpoint")
        })
}

/// `url` without credentials, query or fragment: safe to log and to name a cursor.
pub(crate) fn redact(url: &str) -> String {
    Url::parse(url).map_or_else(|_| "<not a URL>".to_owned(), |url| redact_url(&url))
}

pub(crate) fn redact_url(url: &Url) -> String {
    let mut url = url.clone();
    // Both only fail for URLs that cannot have credentials at all.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use outbox_core::{Account, MessageKind};

    use crate::signing::{DEFAULT_TOLERANCE, Verifier};

    use super::*;

    fn publisher(endpoint: &str) -> Result<HttpPublisher> {
        HttpPublisher::new(PublisherConfig::new(endpoint, "our-secret"))
    }

    fn message() -> FanoutMessage {
        FanoutMessage {
            instruction_id: "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59".into(),
            account: Account::parse("merchants:4471").unwrap(),
            sequence: 3,
            kind: MessageKind::Committed,
            ledger: "payouts".into(),
            ledger_tx_id: Some(41),
            traceparent: None,
            tracestate: None,
            payload: br#"{"id":41}"#.to_vec(),
        }
    }

    #[test]
    fn name_drops_credentials_query_and_fragment() {
        let p = publisher("https://user:pw@consumer.example:8443/hop2/messages?token=t#x").unwrap();
        assert_eq!(p.name(), "https://consumer.example:8443/hop2/messages");
        assert!(!format!("{p:?}").contains("our-secret"));
        assert!(!format!("{p:?}").contains("pw"));
        let config = PublisherConfig::new("https://user:pw@h/p?token=t", "our-secret");
        let shown = format!("{config:?}");
        assert!(!shown.contains("pw") && !shown.contains("token") && !shown.contains("our-secret"));
    }

    #[test]
    fn the_name_is_scheme_host_port_and_path() {
        let name = |url: &str| publisher(url).unwrap().name().to_owned();
        assert_eq!(
            name("http://Consumer.Example:80/hop2/messages"),
            "http://consumer.example/hop2/messages"
        );
        let base = name("https://consumer.example/hop2/messages");
        for other in [
            "https://other.example/hop2/messages",
            "https://consumer.example:8443/hop2/messages",
            "https://consumer.example/tenant-b/messages",
            "http://consumer.example/hop2/messages",
        ] {
            assert_ne!(name(other), base, "{other}");
        }
    }

    #[test]
    fn bad_endpoint_or_empty_secret_is_a_config_error() {
        for endpoint in ["not a url", "ftp://h/p"] {
            let err = publisher(endpoint).unwrap_err();
            assert_eq!(
                (err.kind(), err.context("field")),
                (&ErrorKind::Config, Some("endpoint"))
            );
        }
        let err = HttpPublisher::new(PublisherConfig::new("http://h/p", "")).unwrap_err();
        assert_eq!(err.context("field"), Some("secret"));
    }

    #[test]
    fn headers_are_identity_plus_a_verifiable_signature_on_the_dedup_key() {
        let p = publisher("http://127.0.0.1:1/hop2/messages").unwrap();
        let m = message();
        let now = Utc::now();
        let map = p.request_headers(&m, now.timestamp()).unwrap();
        assert_eq!(map[DELIVERY_ID_HEADER], "payouts:tx:41:committed");
        assert_eq!(map[headers::SEQUENCE], "3");
        assert_eq!(map[CONTENT_TYPE], "application/json");
        let verified = Verifier::new("our-secret", DEFAULT_TOLERANCE)
            .unwrap()
            .verify(&map, &m.payload, now)
            .unwrap();
        assert_eq!(verified, m.dedup_key());
        // Our signature is named as ours: nothing in the request claims to be the
        // ledger's webhook.
        let names: Vec<&str> = map.keys().map(|name| name.as_str()).collect();
        assert!(
            names.iter().all(|name| !name.starts_with("formance-")),
            "{names:?}"
        );
        assert!(
            [DELIVERY_ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER]
                .iter()
                .all(|name| name.starts_with("outbox-") && names.contains(name)),
            "{names:?}"
        );
    }

    #[test]
    fn a_header_value_that_http_cannot_carry_is_named() {
        let p = publisher("http://127.0.0.1:1/hop2/messages").unwrap();
        let m = FanoutMessage {
            traceparent: Some("bad\nvalue".into()),
            ..message()
        };
        let err = p.request_headers(&m, 0).unwrap_err();
        assert_eq!(err.field(), Some("header traceparent"));
    }
}
