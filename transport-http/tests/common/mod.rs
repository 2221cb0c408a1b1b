//! Shared by the integration tests: signing a request the way Formance (or our
//! publisher) does, sample messages, the clock.

#![allow(dead_code)]

use outbox_core::{Account, FanoutMessage, MessageKind};
use outbox_ledger_formance::sign;

/// The ledger's webhook secret (intake side).
pub const LEDGER_SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQ=";
/// Our own Hop 2 signing secret (publisher → subscriber).
pub const HOP2_SECRET: &str = "aG9wMi1zZWNyZXQtb2YtMjQtYnl0ZXM=";
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// POSTs `sent` with a signature computed over `signed` with `secret`; returns the
/// status and the JSON body (or `Null`).
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
        .header("content-type", "application/json")
        .header("formance-webhook-id", id)
        .header("formance-webhook-timestamp", timestamp.to_string())
        .header(
            "formance-webhook-signature",
            sign(secret, id, timestamp, signed),
        );
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.body(sent).send().await.unwrap();
    let status = response.status().as_u16();
    let json = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, json)
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
