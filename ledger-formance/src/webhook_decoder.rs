//! The Formance webhooks service's deliveries as the webhook intake reads them: a
//! [`WebhookDecoder`] that verifies the signature and age ([`WebhookVerifier`], both
//! secrets during a rotation), answers the service's test deliveries, and turns the
//! event into Hop 2 messages ([`messages_from_webhook`]).

use chrono::{DateTime, Utc};
use outbox_core::Result;
use outbox_core::fanout::{RequestHeaders, WebhookDecoder, WebhookDelivery, WebhookRefusal};

use crate::config::WebhookConfig;
use crate::ledger_events::{TraceContext, messages_from_webhook};
use crate::webhook::WebhookVerifier;

/// Set to `true` on the delivery the webhooks service sends to test a new webhook
/// config; signed like any other, carrying no ledger event.
pub const WEBHOOK_TEST_HEADER: &str = "formance-webhook-test";

/// Verifies and decodes Formance webhook deliveries for the intake.
///
/// | delivery | decoded as |
/// | --- | --- |
/// | signature missing or matching neither secret, timestamp outside the tolerance | `Unauthenticated`, naming the `formance-webhook-*` header |
/// | `formance-webhook-test: true` (verified) | `Probe` |
/// | a body that is not a Formance event, or bad outbox metadata | `Malformed`, naming the JSON path |
/// | otherwise | `Events` with `id` = `formance-webhook-id` and the messages of [`messages_from_webhook`], stamped with the request's `traceparent` / `tracestate` |
#[derive(Debug, Clone)]
pub struct FormanceWebhookDecoder {
    verifier: WebhookVerifier,
}

impl FormanceWebhookDecoder {
    pub fn new(verifier: WebhookVerifier) -> Self {
        Self { verifier }
    }

    /// # Errors
    /// As [`WebhookVerifier::from_config`]: an empty secret or previous secret.
    pub fn from_config(config: &WebhookConfig) -> Result<Self> {
        WebhookVerifier::from_config(config).map(Self::new)
    }
}

impl WebhookDecoder for FormanceWebhookDecoder {
    fn decode(
        &self,
        headers: &RequestHeaders,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<WebhookDelivery, WebhookRefusal> {
        // Verified before anything is parsed: unsigned input leaves no trace.
        let delivery = self
            .verifier
            .verify_request(headers, body, now)
            .map_err(WebhookRefusal::Unauthenticated)?;
        if headers
            .get(WEBHOOK_TEST_HEADER)
            .is_some_and(|v| v.eq_ignore_ascii_case(b"true"))
        {
            return Ok(WebhookDelivery::Probe);
        }
        let messages = messages_from_webhook(body, &TraceContext::from_headers(headers))
            .map_err(WebhookRefusal::Malformed)?;
        Ok(WebhookDelivery::Events {
            id: delivery.id,
            messages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::{
        WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, sign,
    };

    const SECRET: &str = "c2VjcmV0LW9mLTI0LWJ5dGVzLWxvbmc=";

    fn decoder() -> FormanceWebhookDecoder {
        FormanceWebhookDecoder::new(WebhookVerifier::new(SECRET).unwrap())
    }

    fn signed(body: &[u8], extra: &[(&str, &str)]) -> RequestHeaders {
        let ts = Utc::now().timestamp();
        let signature = sign(SECRET, "wh-1", ts, body);
        let mut headers: RequestHeaders = [
            (WEBHOOK_ID_HEADER, "wh-1".to_owned()),
            (WEBHOOK_TIMESTAMP_HEADER, ts.to_string()),
            (WEBHOOK_SIGNATURE_HEADER, signature),
        ]
        .into_iter()
        .collect();
        for (name, value) in extra {
            headers.push(name, *value);
        }
        headers
    }

    const COMMITTED: &[u8] = br#"{"type":"ledger.committed_transactions","payload":{"ledger":"payouts","transactions":[{"id":7,"metadata":{"outbox_event_id":"e","outbox_account":"merchants:1","outbox_sequence":"2"},"postings":[]}]}}"#;

    #[test]
    fn a_signed_event_decodes_to_its_messages_under_the_webhook_id() {
        let headers = signed(COMMITTED, &[("traceparent", "00-aa-bb-01")]);
        let WebhookDelivery::Events { id, messages } =
            decoder().decode(&headers, COMMITTED, Utc::now()).unwrap()
        else {
            panic!("not events");
        };
        assert_eq!(id, "wh-1");
        assert_eq!(
            (
                messages.len(),
                messages[0].dedup_key(),
                messages[0].traceparent.as_deref()
            ),
            (1, "payouts:tx:7:committed".to_owned(), Some("00-aa-bb-01"))
        );
    }

    #[test]
    fn refusals_say_why() {
        let unsigned = decoder()
            .decode(&RequestHeaders::new(), COMMITTED, Utc::now())
            .unwrap_err();
        assert!(
            matches!(unsigned, WebhookRefusal::Unauthenticated(_)),
            "{unsigned}"
        );
        assert_eq!(unsigned.error().field(), Some(WEBHOOK_ID_HEADER));

        let tampered = decoder()
            .decode(&signed(COMMITTED, &[]), b"{}", Utc::now())
            .unwrap_err();
        assert!(matches!(tampered, WebhookRefusal::Unauthenticated(_)));
        assert_eq!(tampered.error().field(), Some(WEBHOOK_SIGNATURE_HEADER));

        let broken = b"{\"type\":";
        let malformed = decoder()
            .decode(&signed(broken, &[]), broken, Utc::now())
            .unwrap_err();
        assert!(
            matches!(malformed, WebhookRefusal::Malformed(_)),
            "{malformed}"
        );
        assert_eq!(malformed.error().field(), Some("body"));
    }

    #[test]
    fn a_signed_test_delivery_is_a_probe_and_an_unsigned_one_is_refused() {
        let body = br#"{"data":"test"}"#;
        let headers = signed(body, &[(WEBHOOK_TEST_HEADER, "TRUE")]);
        assert_eq!(
            decoder().decode(&headers, body, Utc::now()).unwrap(),
            WebhookDelivery::Probe
        );
        let mut unsigned = RequestHeaders::new();
        unsigned.push(WEBHOOK_TEST_HEADER, "true");
        assert!(matches!(
            decoder().decode(&unsigned, body, Utc::now()),
            Err(WebhookRefusal::Unauthenticated(_))
        ));
    }
}
