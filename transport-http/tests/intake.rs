//! The webhook intake over real HTTP on loopback: a verified delivery is appended to
//! the fan-out store before the 2xx; anything unsigned, stale, oversized or malformed
//! is refused with nothing stored; a store that cannot write makes the ledger retry.
//!
//! The store here is a test-local `FanoutStore` that records appends (and dedupes as
//! the contract says), standing in for `outbox_store_sqlite::SqliteFanoutStore`.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use outbox_core::{
    AppendOutcome, Error, ErrorKind, FanoutMessage, FanoutStore, MessageKind, Result,
    StoredMessage, Wakeup,
};
use outbox_transport_http::{ReceiverConfig, RunningReceiver, start_intake};

use common::{LEDGER_SECRET, TRACEPARENT, now, post_signed};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Failure {
    #[default]
    None,
    Transient,
    Permanent,
}

/// Records appends; dedupes on the delivery id and the dedup key like a real store.
#[derive(Default)]
struct RecordingStore {
    appends: Mutex<Vec<(String, Vec<FanoutMessage>)>>,
    messages: Mutex<Vec<StoredMessage>>,
    deliveries: Mutex<HashSet<String>>,
    keys: Mutex<HashSet<String>>,
    failure: Failure,
}

impl RecordingStore {
    fn failing(failure: Failure) -> Self {
        Self {
            failure,
            ..Self::default()
        }
    }

    fn appends(&self) -> Vec<(String, Vec<FanoutMessage>)> {
        self.appends.lock().unwrap().clone()
    }

    fn stored(&self) -> Vec<FanoutMessage> {
        let messages = self.messages.lock().unwrap();
        messages.iter().map(|m| m.message.clone()).collect()
    }
}

#[async_trait]
impl FanoutStore for RecordingStore {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        self.appends
            .lock()
            .unwrap()
            .push((delivery_id.to_owned(), messages.to_vec()));
        match self.failure {
            Failure::None => {}
            Failure::Transient => {
                return Err(Error::new(ErrorKind::Storage, "database is locked").transient(None));
            }
            Failure::Permanent => {
                return Err(Error::new(ErrorKind::Storage, "disk image is malformed"));
            }
        }
        let mut outcome = AppendOutcome::default();
        if !self
            .deliveries
            .lock()
            .unwrap()
            .insert(delivery_id.to_owned())
        {
            outcome.delivery_seen = true;
            return Ok(outcome);
        }
        let mut stored = self.messages.lock().unwrap();
        let mut keys = self.keys.lock().unwrap();
        for message in messages {
            if keys.insert(message.dedup_key()) {
                let position = stored.len() as u64 + 1;
                stored.push(StoredMessage {
                    position,
                    message: message.clone(),
                    received_at: Utc::now(),
                });
                outcome.stored += 1;
            } else {
                outcome.duplicates += 1;
            }
        }
        Ok(outcome)
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        let stored = self.messages.lock().unwrap();
        Ok(stored
            .iter()
            .filter(|m| m.position > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn load_cursor(&self, _transport: &str) -> Result<u64> {
        Ok(0)
    }

    async fn save_cursor(&self, _transport: &str, _position: u64) -> Result<()> {
        Ok(())
    }
}

fn body(tx: u64, event_id: &str, sequence: u64) -> Vec<u8> {
    format!(
        r#"{{"idempotency_key":"","date":"2026-10-07T10:00:00.000000Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{{"accountMetadata":{{}},"ledger":"payouts","transactions":[{{"id":{tx},"metadata":{{"outbox_account":"merchants:4471","outbox_event_id":"{event_id}","outbox_sequence":"{sequence}"}},"postings":[{{"amount":48500000,"asset":"USD/2","destination":"merchants:4471:payouts:pending","source":"merchants:4471:available"}}]}}]}}}}"#
    )
    .into_bytes()
}

fn payout() -> Vec<u8> {
    body(1, "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59", 1)
}

async fn start(store: Arc<RecordingStore>) -> RunningReceiver {
    let mut config = ReceiverConfig::new(([127, 0, 0, 1], 0).into(), LEDGER_SECRET);
    config.max_body_bytes = 4096;
    start_intake(config, store, Some(Wakeup::new()))
        .await
        .unwrap()
}

async fn deliver(receiver: &RunningReceiver, id: &str, body: Vec<u8>) -> u16 {
    let url = receiver.webhook_url();
    post_signed(&url, id, now(), LEDGER_SECRET, &body.clone(), body, &[])
        .await
        .0
}

#[tokio::test]
async fn a_signed_delivery_is_stored_then_acknowledged() {
    let store = Arc::new(RecordingStore::default());
    let receiver = start(store.clone()).await;
    let url = receiver.webhook_url();
    let (status, _) = post_signed(
        &url,
        "wh-1",
        now(),
        LEDGER_SECRET,
        &payout(),
        payout(),
        &[("traceparent", TRACEPARENT)],
    )
    .await;
    assert_eq!(status, 204);
    let appends = store.appends();
    assert_eq!(appends.len(), 1);
    assert_eq!(appends[0].0, "wh-1");
    let stored = store.stored();
    assert_eq!(stored.len(), 1);
    let m = &stored[0];
    assert_eq!(
        (
            m.instruction_id.as_str(),
            m.account.as_str(),
            m.sequence,
            m.kind,
            m.ledger.as_str(),
            m.ledger_tx_id,
            m.traceparent.as_deref(),
        ),
        (
            "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59",
            "merchants:4471",
            1,
            MessageKind::Committed,
            "payouts",
            Some(1),
            Some(TRACEPARENT),
        )
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn a_retried_delivery_and_a_replay_re_emit_are_acknowledged_and_stored_once() {
    let store = Arc::new(RecordingStore::default());
    let receiver = start(store.clone()).await;
    assert_eq!(deliver(&receiver, "wh-1", payout()).await, 204);
    // The webhooks service retries the same delivery (same id) ...
    assert_eq!(deliver(&receiver, "wh-1", payout()).await, 204);
    // ... and the ledger re-emits the transaction on an idempotent replay (new id).
    assert_eq!(deliver(&receiver, "wh-2", payout()).await, 204);
    assert_eq!(store.appends().len(), 3, "every delivery reaches the store");
    assert_eq!(store.stored().len(), 1, "the store kept one message");
    receiver.shutdown().await;
}

#[tokio::test]
async fn unsigned_badly_signed_and_stale_deliveries_are_refused_with_nothing_stored() {
    let store = Arc::new(RecordingStore::default());
    let receiver = start(store.clone()).await;
    let url = receiver.webhook_url();

    let unsigned = reqwest::Client::new()
        .post(&url)
        .body(payout())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);

    let (status, json) = post_signed(
        &url,
        "wh-2",
        now(),
        "another-secret",
        &payout(),
        payout(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-signature")),
        "{json}"
    );

    let tampered = body(1, "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59", 2);
    let (status, _) =
        post_signed(&url, "wh-3", now(), LEDGER_SECRET, &payout(), tampered, &[]).await;
    assert_eq!(status, 401);

    let (status, json) = post_signed(
        &url,
        "wh-4",
        now() - 600,
        LEDGER_SECRET,
        &payout(),
        payout(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-timestamp")),
        "{json}"
    );

    assert!(
        store.appends().is_empty(),
        "a refused delivery reached the store"
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn oversized_and_invalid_json_deliveries_are_refused_with_nothing_stored() {
    let store = Arc::new(RecordingStore::default());
    let receiver = start(store.clone()).await;
    let huge = format!("{{\"type\":\"x\",\"payload\":\"{}\"}}", "a".repeat(8192)).into_bytes();
    assert_eq!(deliver(&receiver, "wh-5", huge).await, 413);

    let url = receiver.webhook_url();
    let broken = b"{\"type\":".to_vec();
    let (status, json) = post_signed(
        &url,
        "wh-6",
        now(),
        LEDGER_SECRET,
        &broken,
        broken.clone(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (400, Some("body")),
        "{json}"
    );

    let without_ledger = String::from_utf8(payout())
        .unwrap()
        .replace(r#""ledger":"payouts","#, "")
        .into_bytes();
    let (status, json) = post_signed(
        &url,
        "wh-7",
        now(),
        LEDGER_SECRET,
        &without_ledger,
        without_ledger.clone(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (400, Some("payload.ledger")),
        "{json}"
    );

    assert!(
        store.appends().is_empty(),
        "a refused delivery reached the store"
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn an_event_without_outbox_messages_is_acknowledged_without_an_append() {
    let store = Arc::new(RecordingStore::default());
    let receiver = start(store.clone()).await;
    let schema = br#"{"type":"ledger.inserted_schema","payload":{"ledger":"payouts","schema":{}}}"#;
    assert_eq!(deliver(&receiver, "wh-8", schema.to_vec()).await, 204);
    assert!(store.appends().is_empty());
    receiver.shutdown().await;
}

#[tokio::test]
async fn a_store_that_cannot_write_makes_the_ledger_retry() {
    let store = Arc::new(RecordingStore::failing(Failure::Transient));
    let receiver = start(store.clone()).await;
    assert_eq!(deliver(&receiver, "wh-9", payout()).await, 503);
    receiver.shutdown().await;

    let store = Arc::new(RecordingStore::failing(Failure::Permanent));
    let receiver = start(store.clone()).await;
    assert_eq!(deliver(&receiver, "wh-10", payout()).await, 500);
    assert!(store.stored().is_empty());
    receiver.shutdown().await;
}
