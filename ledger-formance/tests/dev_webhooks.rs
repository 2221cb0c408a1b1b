//! Webhook deliveries signed by `outbox-ledger-dev` (an independent implementation of
//! the Formance signature) verify with `WebhookVerifier`, over real HTTP.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::Utc;
use outbox_core::{EventId, Ledger, OUTBOX_EVENT_ID_KEY, PostOutcome};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, WebhookTarget};
use outbox_ledger_formance::{
    FormanceConfig, FormanceLedger, WEBHOOK_SIGNATURE_HEADER, WebhookVerifier,
};
use serde_json::Value;

const SECRET: &str = "8n6BbP3OgQ5m1Vd0Hk2yR7sXfJc4Lq9Z";

type Deliveries = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn receive(
    State(deliveries): State<Deliveries>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let verdict = WebhookVerifier::new(SECRET)
        .unwrap()
        .verify(&headers, &body, Utc::now());
    deliveries.lock().unwrap().push((headers, body));
    // Verify before storing anything: a refused delivery gets a 4xx, never stored.
    if verdict.is_ok() {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::UNAUTHORIZED
    }
}

async fn first_delivery(deliveries: &Deliveries) -> (HeaderMap, Bytes) {
    for _ in 0..100 {
        if let Some(delivery) = deliveries.lock().unwrap().first().cloned() {
            return delivery;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no webhook delivery within 5 s");
}

#[tokio::test]
async fn a_committed_transaction_arrives_signed_and_verifies() {
    let deliveries = Deliveries::default();
    let receiver = support::serve(
        Router::new()
            .route("/hook", post(receive))
            .with_state(deliveries.clone()),
    )
    .await;
    let dev = DevLedger::start(DevLedgerConfig {
        webhooks: vec![WebhookTarget {
            url: format!("http://{receiver}/hook"),
            secret: SECRET.into(),
        }],
        create_ledgers: vec!["main".into()],
        ..DevLedgerConfig::default()
    })
    .await
    .expect("dev ledger");
    let ledger = FormanceLedger::new(&FormanceConfig::new(dev.url(), "main")).unwrap();

    let event = EventId::new();
    let body = format!(
        r#"{{"postings":[{{"source":"world","destination":"merchants:4471:available","amount":48500000,"asset":"USD/2"}}],"metadata":{{"{OUTBOX_EVENT_ID_KEY}":"{event}"}}}}"#
    );
    let PostOutcome::Accepted { transaction_id } =
        ledger.post(event, body.as_bytes()).await.unwrap()
    else {
        panic!("not accepted");
    };

    let (headers, raw) = first_delivery(&deliveries).await;
    let verified = WebhookVerifier::new(SECRET)
        .unwrap()
        .verify(&headers, &raw, Utc::now())
        .expect("the dev ledger's signature verifies");
    assert!(!verified.id.is_empty());
    assert!(
        headers[WEBHOOK_SIGNATURE_HEADER]
            .to_str()
            .unwrap()
            .starts_with("v1,")
    );

    let envelope: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(envelope["type"], "ledger.committed_transactions");
    let tx = &envelope["payload"]["transactions"][0];
    assert_eq!(tx["id"], transaction_id);
    assert_eq!(tx["metadata"][OUTBOX_EVENT_ID_KEY], event.to_string());

    // The same delivery under another secret, or with one byte changed, is refused.
    let other = WebhookVerifier::new("another-secret").unwrap();
    assert!(other.verify(&headers, &raw, Utc::now()).is_err());
    let mut altered = raw.to_vec();
    let last = altered.len() - 2;
    altered[last] ^= 1;
    let err = WebhookVerifier::new(SECRET)
        .unwrap()
        .verify(&headers, &altered, Utc::now())
        .unwrap_err();
    assert_eq!(err.field(), Some(WEBHOOK_SIGNATURE_HEADER));
    dev.shutdown().await;
}
