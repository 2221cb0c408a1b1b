//! Shared by the integration tests: signing a request the way the Formance ledger
//! does (intake side) or the way our publisher does (Hop 2), the Formance decoder the
//! intake reads the ledger's deliveries with, sample messages, the clock.

#![allow(dead_code)]

use std::sync::Arc;

use outbox_core::fanout::WebhookDecoder;
use outbox_core::{Account, FanoutMessage, MessageKind};
use outbox_ledger_formance::{FormanceWebhookDecoder, WebhookVerifier, sign};
use outbox_transport_http::{DELIVERY_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};

/// The ledger's webhook secret (intake side).
pub const LEDGER_SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQ=";
/// Our own Hop 2 signing secret (publisher → subscriber).
pub const HOP2_SECRET: &str = "aG9wMi1zZWNyZXQtb2YtMjQtYnl0ZXM=";
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The ledger's deliveries as the intake reads them: Formance webhooks signed with
/// `secret`.
pub fn ledger_decoder(secret: &str) -> Arc<dyn WebhookDecoder> {
    Arc::new(FormanceWebhookDecoder::new(
        WebhookVerifier::new(secret).unwrap(),
    ))
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// POSTs `sent` as a ledger webhook with a Formance signature computed over `signed`
/// with `secret`; returns the status and the JSON body (or `Null`).
pub async fn post_signed(
    url: &str,
    id: &str,
    timestamp: i64,
    secret: &str,
    signed: &[u8],
    sent: Vec<u8>,
    extra: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("formance-webhook-id", id)
        .header("formance-webhook-timestamp", timestamp.to_string())
        .header(
            "formance-webhook-signature",
            sign(secret, id, timestamp, signed),
        );
    request = with_extra(request, extra);
    let response = request.body(sent).send().await.unwrap();
    let status = response.status().as_u16();
    let json = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// POSTs `sent` to our Hop 2 subscriber with our own signature (`outbox-delivery-id`,
/// `outbox-timestamp`, `outbox-signature`) computed over `signed` with `secret`.
pub async fn post_hop2_signed(
    url: &str,
    id: &str,
    timestamp: i64,
    secret: &str,
    signed: &[u8],
    sent: Vec<u8>,
    extra: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header(DELIVERY_ID_HEADER, id)
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(
            SIGNATURE_HEADER,
            outbox_transport_http::sign(secret, id, timestamp, extra, signed),
        );
    request = with_extra(request, extra);
    let response = request.body(sent).send().await.unwrap();
    let status = response.status().as_u16();
    let json = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// `extra` headers on `request`, with `content-type: application/json` unless
/// `extra` names one (an empty value sends none).
fn with_extra(
    mut request: reqwest::RequestBuilder,
    extra: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    if !extra
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in extra {
        if !value.is_empty() {
            request = request.header(*name, *value);
        }
    }
    request
}

/// A committed Hop 2 message of `account` at `sequence`, ledger transaction `tx`.
pub fn committed(account: &str, sequence: u64, tx: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: format!("0190f2a0-7b1c-7cc2-8a4e-{tx:012}"),
        account: Account::parse(account).unwrap(),
        sequence,
        kind: MessageKind::Committed,
        ledger: "payouts".into(),
        ledger_tx_id: Some(tx),
        traceparent: None,
        tracestate: None,
        payload: format!(
            r#"{{"id":{tx},"metadata":{{"outbox_account":"{account}","outbox_sequence":"{sequence}"}},"postings":[{{"amount":48500000,"asset":"USD/2","destination":"{account}:payouts:pending","source":"{account}:available"}}]}}"#
        )
        .into_bytes(),
    }
}

/// A relay rejection notice: no ledger transaction.
pub fn rejection(account: &str, sequence: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: "0190f2a0-7b1c-7cc2-8a4e-rejected0001".into(),
        account: Account::parse(account).unwrap(),
        sequence,
        kind: MessageKind::Rejected,
        ledger: "payouts".into(),
        ledger_tx_id: None,
        traceparent: None,
        tracestate: None,
        payload: br#"{"outbox_rejected_code":"INSUFFICIENT_FUND"}"#.to_vec(),
    }
}
