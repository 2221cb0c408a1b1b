//! The webhook receiver over real HTTP on loopback: signed deliveries reach the sink,
//! anything tampered, unsigned or stale is refused before the sink sees it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox_core::{Error, ErrorKind, FanoutMessage, MessageSink, Result};
use outbox_ledger_formance::{FormanceWebhookDecoder, WebhookVerifier, sign};
use outbox_transport_http::{ReceiverConfig, RunningReceiver, start_receiver};

const SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQ=";

#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<(String, FanoutMessage)>>,
    fail_transiently: bool,
}

#[async_trait]
impl MessageSink for Recorder {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        if self.fail_transiently {
            return Err(Error::new(ErrorKind::Storage, "database is busy").transient(None));
        }
        let mut got = self.got.lock().unwrap();
        got.extend(messages.into_iter().map(|m| (delivery_id.to_owned(), m)));
        Ok(())
    }
}

fn body() -> String {
    r#"{"idempotency_key":"","date":"2026-10-07T10:00:00.000000Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{"accountMetadata":{},"ledger":"payouts","transactions":[{"id":1,"metadata":{"outbox_account":"merchants:4471","outbox_event_id":"0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59","outbox_sequence":"1"},"postings":[{"amount":48500000,"asset":"USD/2","destination":"merchants:4471:payouts:pending","source":"merchants:4471:available"}]}]}}"#.to_owned()
}

async fn start(recorder: Arc<Recorder>) -> RunningReceiver {
    let mut config = ReceiverConfig::new(([127, 0, 0, 1], 0).into());
    config.max_body_bytes = 4096;
    let decoder = FormanceWebhookDecoder::new(WebhookVerifier::new(SECRET).unwrap());
    start_receiver(config, Arc::new(decoder), recorder)
        .await
        .unwrap()
}

async fn deliver(
    receiver: &RunningReceiver,
    id: &str,
    timestamp: i64,
    secret: &str,
    signed: &str,
    sent: &str,
) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(receiver.webhook_url())
        .header("content-type", "application/json")
        .header("formance-webhook-id", id)
        .header("formance-webhook-timestamp", timestamp.to_string())
        .header(
            "formance-webhook-signature",
            sign(secret, id, timestamp, signed.as_bytes()),
        )
        .body(sent.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let json = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, json)
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn a_signed_delivery_reaches_the_sink() {
    let recorder = Arc::new(Recorder::default());
    let receiver = start(recorder.clone()).await;
    let (status, _) = deliver(&receiver, "wh-1", now(), SECRET, &body(), &body()).await;
    assert_eq!(status, 204);
    let got = recorder.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "wh-1");
    assert_eq!(
        (got[0].1.account.as_str(), got[0].1.sequence),
        ("merchants:4471", 1)
    );
    assert_eq!(
        (got[0].1.ledger.as_str(), got[0].1.ledger_tx_id),
        ("payouts", Some(1))
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn the_delivery_trace_context_reaches_the_sink() {
    let recorder = Arc::new(Recorder::default());
    let receiver = start(recorder.clone()).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (id, ts) = ("wh-9", now());
    let response = reqwest::Client::new()
        .post(receiver.webhook_url())
        .header("content-type", "application/json")
        .header("formance-webhook-id", id)
        .header("formance-webhook-timestamp", ts.to_string())
        .header(
            "formance-webhook-signature",
            sign(SECRET, id, ts, body().as_bytes()),
        )
        .header("traceparent", traceparent)
        .header("tracestate", "vendor=abc")
        .body(body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let got = recorder.got.lock().unwrap().clone();
    assert_eq!(
        (
            got[0].1.traceparent.as_deref(),
            got[0].1.tracestate.as_deref()
        ),
        (Some(traceparent), Some("vendor=abc"))
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn tampered_wrong_secret_stale_and_unsigned_are_refused_with_nothing_stored() {
    let recorder = Arc::new(Recorder::default());
    let receiver = start(recorder.clone()).await;
    let tampered = body().replace("48500000", "98500000");
    let (status, json) = deliver(&receiver, "wh-2", now(), SECRET, &body(), &tampered).await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-signature")),
        "{json}"
    );
    let (status, _) = deliver(&receiver, "wh-3", now(), "another-secret", &body(), &body()).await;
    assert_eq!(status, 401);
    let (status, json) = deliver(&receiver, "wh-4", now() - 600, SECRET, &body(), &body()).await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-timestamp")),
        "{json}"
    );
    let unsigned = reqwest::Client::new()
        .post(receiver.webhook_url())
        .header("content-type", "application/json")
        .body(body())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);
    assert!(
        recorder.got.lock().unwrap().is_empty(),
        "a refused delivery reached the sink"
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn malformed_oversized_and_test_deliveries() {
    let recorder = Arc::new(Recorder::default());
    let receiver = start(recorder.clone()).await;
    let (status, json) =
        deliver(&receiver, "wh-5", now(), SECRET, "{\"type\":", "{\"type\":").await;
    assert_eq!(
        (status, json["field"].as_str()),
        (400, Some("body")),
        "{json}"
    );
    let huge = format!("{{\"type\":\"x\",\"payload\":\"{}\"}}", "a".repeat(8192));
    let (status, _) = deliver(&receiver, "wh-6", now(), SECRET, &huge, &huge).await;
    assert_eq!(status, 413);
    let test_body = r#"{"data":"test"}"#;
    let response = reqwest::Client::new()
        .post(receiver.webhook_url())
        .header("content-type", "application/json")
        .header("formance-webhook-id", "wh-7")
        .header("formance-webhook-timestamp", now().to_string())
        .header(
            "formance-webhook-signature",
            sign(SECRET, "wh-7", now(), test_body.as_bytes()),
        )
        .header("formance-webhook-test", "true")
        .body(test_body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(recorder.got.lock().unwrap().is_empty());
    receiver.shutdown().await;
}

#[tokio::test]
async fn a_sink_that_cannot_store_makes_the_ledger_retry() {
    let recorder = Arc::new(Recorder {
        fail_transiently: true,
        ..Recorder::default()
    });
    let receiver = start(recorder).await;
    let (status, _) = deliver(&receiver, "wh-8", now(), SECRET, &body(), &body()).await;
    assert_eq!(status, 503);
    receiver.shutdown().await;
}
