//! The intake knows no ledger vendor: driven by a tiny decoder written here (a shared
//! key header instead of a signature, a JSON list of messages as the body), over real
//! HTTP on loopback in front of a real SQLite fan-out store, it stores what the decoder
//! accepted under the decoder's delivery id (deduplicated), answers 401 / 400 with the
//! decoder's field for what it refused, keeps its own 413 body limit, and answers a
//! probe without storing. A Formance-signed delivery means nothing to this decoder.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use outbox_core::fanout::{RequestHeaders, WebhookDecoder, WebhookDelivery, WebhookRefusal};
use outbox_core::{Account, Error, FanoutMessage, FanoutStore, MessageKind, Wakeup};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore};
use outbox_transport_http::{ReceiverConfig, RunningReceiver, start_intake};
use serde::Deserialize;

const KEY_HEADER: &str = "x-test-key";
const DELIVERY_HEADER: &str = "x-test-delivery";
const PROBE_HEADER: &str = "x-test-probe";
const KEY: &str = "k-123";
/// This vendor's media type: the intake takes the one its decoder names.
const MEDIA_TYPE: &str = "application/vnd.test-ledger+json";

/// A ledger that authenticates with a shared key and sends its events as
/// `[{"account":…,"sequence":…,"tx":…}]`.
#[derive(Debug)]
struct KeyedJsonDecoder;

#[derive(Deserialize)]
struct Event {
    account: String,
    sequence: u64,
    tx: u64,
}

impl WebhookDecoder for KeyedJsonDecoder {
    fn media_type(&self) -> &str {
        MEDIA_TYPE
    }

    fn decode(
        &self,
        headers: &RequestHeaders,
        body: &[u8],
        _now: DateTime<Utc>,
    ) -> Result<WebhookDelivery, WebhookRefusal> {
        let text = |name| headers.text(name).map_err(WebhookRefusal::Unauthenticated);
        if text(KEY_HEADER)? != Some(KEY) {
            return Err(WebhookRefusal::Unauthenticated(Error::invalid(
                KEY_HEADER,
                "missing or not the shared key",
            )));
        }
        if text(PROBE_HEADER)?.is_some() {
            return Ok(WebhookDelivery::Probe);
        }
        let id = text(DELIVERY_HEADER)?
            .ok_or_else(|| {
                WebhookRefusal::Unauthenticated(Error::invalid(DELIVERY_HEADER, "missing"))
            })?
            .to_owned();
        let events: Vec<Event> = serde_json::from_slice(body)
            .map_err(|e| WebhookRefusal::Malformed(Error::invalid("body", e.to_string())))?;
        let messages = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| {
                Ok(FanoutMessage {
                    instruction_id: format!("instruction-{}", event.tx),
                    account: Account::parse_field(&format!("[{i}].account"), &event.account)
                        .map_err(WebhookRefusal::Malformed)?,
                    sequence: event.sequence,
                    kind: MessageKind::Committed,
                    ledger: "keyed".into(),
                    ledger_tx_id: Some(event.tx),
                    traceparent: None,
                    tracestate: None,
                    payload: format!(r#"{{"tx":{}}}"#, event.tx).into_bytes(),
                })
            })
            .collect::<Result<_, WebhookRefusal>>()?;
        Ok(WebhookDelivery::Events { id, messages })
    }
}

async fn start(store: Arc<dyn FanoutStore>) -> RunningReceiver {
    let mut config = ReceiverConfig::new(([127, 0, 0, 1], 0).into());
    config.max_body_bytes = 4096;
    start_intake(
        config,
        Arc::new(KeyedJsonDecoder),
        store,
        Some(Wakeup::new()),
    )
    .await
    .unwrap()
}

async fn post(
    receiver: &RunningReceiver,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .post(receiver.webhook_url())
        .header("content-type", MEDIA_TYPE);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.body(body.to_owned()).send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

fn delivery_ids(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT delivery_id FROM fanout_deliveries ORDER BY delivery_id")
        .unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<Vec<String>>>()
        .unwrap()
}

#[tokio::test]
async fn the_intake_stores_what_a_non_formance_decoder_accepts_and_refuses_what_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fanout.db");
    let store = Arc::new(
        SqliteFanoutStore::open(SqliteConfig::new(&path))
            .await
            .unwrap(),
    );
    let receiver = start(store.clone()).await;
    let keyed = |id| [(KEY_HEADER, KEY), (DELIVERY_HEADER, id)];
    let events = r#"[{"account":"merchants:1","sequence":1,"tx":10},{"account":"merchants:2","sequence":1,"tx":11}]"#;

    // Accepted: stored under the decoder's delivery id before the 2xx.
    let (status, json) = post(&receiver, &keyed("d-1"), events).await;
    assert_eq!(status, 204, "{json}");
    let stored = store.read_after(0, 100).await.unwrap();
    let got: Vec<(&str, u64, Option<u64>, &str)> = stored
        .iter()
        .map(|s| {
            (
                s.message.account.as_str(),
                s.message.sequence,
                s.message.ledger_tx_id,
                s.message.ledger.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("merchants:1", 1, Some(10), "keyed"),
            ("merchants:2", 1, Some(11), "keyed")
        ]
    );
    assert_eq!(delivery_ids(&path), ["d-1"]);

    // The same delivery again, and a new delivery re-carrying one event: 2xx, stored once.
    assert_eq!(post(&receiver, &keyed("d-1"), events).await.0, 204);
    let again = r#"[{"account":"merchants:1","sequence":1,"tx":10}]"#;
    assert_eq!(post(&receiver, &keyed("d-2"), again).await.0, 204);
    assert_eq!(store.read_after(0, 100).await.unwrap(), stored);
    assert_eq!(delivery_ids(&path), ["d-1", "d-2"]);

    // The decoder's refusals keep their classes and name the decoder's field.
    let other = r#"[{"account":"merchants:3","sequence":1,"tx":12}]"#;
    let (status, json) = post(
        &receiver,
        &[(KEY_HEADER, "wrong"), (DELIVERY_HEADER, "d-3")],
        other,
    )
    .await;
    assert_eq!((status, json["field"].as_str()), (401, Some(KEY_HEADER)));
    let (status, json) = post(&receiver, &keyed("d-4"), "[{").await;
    assert_eq!((status, json["field"].as_str()), (400, Some("body")));
    let bad_account = r#"[{"account":"no spaces allowed","sequence":1,"tx":13}]"#;
    let (status, json) = post(&receiver, &keyed("d-5"), bad_account).await;
    assert_eq!((status, json["field"].as_str()), (400, Some("[0].account")));

    // The body limit is the intake's own, whatever the decoder.
    let huge = format!(
        r#"[{{"account":"merchants:4","sequence":1,"tx":14,"pad":"{}"}}]"#,
        "a".repeat(8192)
    );
    assert_eq!(post(&receiver, &keyed("d-6"), &huge).await.0, 413);

    // This vendor's intake takes its decoder's media type, not JSON by default.
    let json_typed = reqwest::Client::new()
        .post(receiver.webhook_url())
        .header("content-type", "application/json")
        .header(KEY_HEADER, KEY)
        .header(DELIVERY_HEADER, "d-7")
        .body(other.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(json_typed.status().as_u16(), 415);

    // A probe is answered without storing anything.
    let probe = [(KEY_HEADER, KEY), (PROBE_HEADER, "1")];
    assert_eq!(post(&receiver, &probe, other).await.0, 200);

    // A delivery signed the Formance way carries no shared key: refused.
    let (status, json) = post(
        &receiver,
        &[
            ("formance-webhook-id", "wh-1"),
            (
                "formance-webhook-timestamp",
                &Utc::now().timestamp().to_string(),
            ),
            ("formance-webhook-signature", "v1,AAAA"),
        ],
        other,
    )
    .await;
    assert_eq!((status, json["field"].as_str()), (401, Some(KEY_HEADER)));

    assert_eq!(
        store.read_after(0, 100).await.unwrap(),
        stored,
        "a refused delivery or a probe was stored"
    );
    assert_eq!(delivery_ids(&path), ["d-1", "d-2"]);
    receiver.shutdown().await;
}
