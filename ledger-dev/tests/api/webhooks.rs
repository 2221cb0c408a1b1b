//! Webhook deliveries: format, signature, retries, replay re-emission.

use std::time::Duration;

use outbox_ledger_dev::{DevLedgerConfig, WebhookBackoff, WebhookTarget};
use serde_json::{Value, json};

use crate::support::{
    Delivery, Harness, Receiver, contracts, expected_signature, key_order, postings, sorted,
};

const SECRET: &str = "d2hzZWNfdGVzdF9zZWNyZXRfMjRieXRlcw==";

fn config(receiver: &Receiver) -> DevLedgerConfig {
    DevLedgerConfig {
        webhooks: vec![WebhookTarget {
            url: receiver.url.clone(),
            secret: SECRET.to_owned(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            max_attempts: 5,
        },
        ..DevLedgerConfig::default()
    }
}

/// Checks headers and signature of one attempt and returns the parsed body.
fn check_attempt(d: &Delivery) -> Value {
    assert_eq!(d.header("content-type"), "application/json");
    assert_eq!(d.header("user-agent"), "formance-webhooks/v0");
    assert_eq!(d.header("formance-webhook-test"), "false");
    assert!(
        d.headers.get("formance-webhook-idempotency-key").is_none(),
        "ledger events have no key"
    );
    let id = d.header("formance-webhook-id");
    uuid::Uuid::parse_str(id).expect("the webhook id is a UUID");
    let timestamp = d.header("formance-webhook-timestamp");
    let ts: i64 = timestamp.parse().expect("unix seconds");
    assert!(
        (ts - chrono::Utc::now().timestamp()).abs() < 60,
        "timestamp of this attempt"
    );
    assert_eq!(
        d.header("formance-webhook-signature"),
        expected_signature(SECRET, id, timestamp, &d.body),
        "HMAC-SHA256 over id.timestamp.body with the secret's bytes as key"
    );
    let text = std::str::from_utf8(&d.body).unwrap();
    assert!(
        !text.contains('\n') && !text.contains(": "),
        "compact JSON: {text}"
    );
    assert_eq!(
        key_order(text),
        [
            "idempotency_key",
            "date",
            "app",
            "version",
            "type",
            "payload"
        ],
        "envelope in struct order"
    );
    let payload_text = serde_json::to_string(&d.json["payload"]).unwrap();
    let payload_keys = key_order(&text[text.find(r#""payload":"#).unwrap() + 10..text.len() - 1]);
    assert_eq!(
        payload_keys,
        sorted(&payload_keys),
        "payload keys sorted: {payload_text}"
    );
    assert_eq!(d.json["idempotency_key"], "");
    assert_eq!(d.json["app"], "ledger");
    assert_eq!(d.json["version"], "v2");
    d.json.clone()
}

#[tokio::test]
async fn deliveries_are_signed_and_retried_with_a_stable_id() {
    let Some(c) = contracts() else { return };
    let mut receiver = Receiver::start(&[500, 500]).await;
    let h = Harness::start_with(c, config(&receiver)).await;
    let tx = h
        .create(
            &json!({"postings": [{"source": "world", "destination": "merchants:4471:available", "amount": 48_500_000, "asset": "USD/2"}],
                    "reference": "payout:1", "metadata": {"outbox_event_id": "e1"}}),
            Some("k1"),
        )
        .await;

    let attempts = [
        receiver.next().await,
        receiver.next().await,
        receiver.next().await,
    ];
    let ids: Vec<&str> = attempts
        .iter()
        .map(|d| d.header("formance-webhook-id"))
        .collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one delivery id across retries: {ids:?}"
    );
    for attempt in &attempts {
        let event = check_attempt(attempt);
        assert_eq!(
            attempt.body, attempts[0].body,
            "every retry sends the same bytes"
        );
        assert_eq!(event["type"], "ledger.committed_transactions");
        c.validate_committed_transactions(&event["payload"]);
        assert_eq!(event["payload"]["ledger"], "default");
        assert_eq!(event["payload"]["accountMetadata"], json!({}));
        assert_eq!(
            event["payload"]["transactions"][0], tx,
            "the event carries the committed transaction"
        );
    }
    assert_eq!(receiver.scripted_left(), 0);
    h.wait_stats("the delivery to be acknowledged", |s| {
        s.webhooks_delivered == 1 && s.webhooks_pending == 0
    })
    .await;
    assert_eq!(h.ledger.stats().webhook_attempts, 3);
}

#[tokio::test]
async fn an_idempotent_replay_re_emits_the_event() {
    let Some(c) = contracts() else { return };
    let mut receiver = Receiver::start(&[]).await;
    let h = Harness::start_with(c, config(&receiver)).await;
    let body = postings("world", "a", 5, "USD");
    let tx = h.create(&body, Some("same")).await;
    assert!(h.post("transactions", &body, Some("same")).await.hit());
    let first = check_attempt(&receiver.next().await);
    let second_delivery = receiver.next().await;
    let second = check_attempt(&second_delivery);
    assert_eq!(first["payload"]["transactions"][0]["id"], tx["id"]);
    assert_eq!(
        second["payload"]["transactions"][0]["id"], tx["id"],
        "same tx id: consumers dedupe on it"
    );
    c.validate_committed_transactions(&second["payload"]);
    h.wait_stats("both deliveries", |s| s.webhooks_delivered == 2)
        .await;
    // A dry run publishes nothing.
    h.post(
        "transactions?dryRun=true",
        &postings("world", "a", 1, "USD"),
        None,
    )
    .await;
    assert_eq!(h.ledger.stats().webhooks_pending, 0);
}

#[tokio::test]
async fn revert_and_metadata_events() {
    let Some(c) = contracts() else { return };
    let mut receiver = Receiver::start(&[]).await;
    let h = Harness::start_with(c, config(&receiver)).await;
    let tx = h.create(&postings("world", "a", 5, "USD"), None).await;
    check_attempt(&receiver.next().await);

    let answer = h
        .post(
            &format!("transactions/{}/revert", tx["id"]),
            &json!({}),
            None,
        )
        .await;
    let revert = h.ok(&answer, 201, "V2RevertTransactionResponse")["data"].clone();
    let event = check_attempt(&receiver.next().await);
    assert_eq!(event["type"], "ledger.reverted_transaction");
    assert_eq!(event["payload"]["revertedTransaction"]["id"], tx["id"]);
    assert_eq!(event["payload"]["revertedTransaction"]["reverted"], true);
    assert_eq!(event["payload"]["revertTransaction"], revert);

    assert_eq!(
        h.post("accounts/a/metadata", &json!({"k": "v"}), None)
            .await
            .status,
        204
    );
    let event = check_attempt(&receiver.next().await);
    assert_eq!(event["type"], "ledger.saved_metadata");
    assert_eq!(
        event["payload"],
        json!({"ledger": "default", "metadata": {"k": "v"}, "targetId": "a", "targetType": "ACCOUNT"})
    );
    assert_eq!(
        h.post(
            &format!("transactions/{}/metadata", tx["id"]),
            &json!({"n": "1"}),
            None
        )
        .await
        .status,
        204
    );
    let event = check_attempt(&receiver.next().await);
    assert_eq!(event["payload"]["targetType"], "TRANSACTION");
    assert_eq!(
        event["payload"]["targetId"],
        tx["id"].to_string(),
        "transaction ids are strings here"
    );
}

#[tokio::test]
async fn a_permanent_4xx_is_not_retried() {
    let Some(c) = contracts() else { return };
    let mut receiver = Receiver::start(&[400]).await;
    let h = Harness::start_with(c, config(&receiver)).await;
    h.create(&postings("world", "a", 5, "USD"), None).await;
    check_attempt(&receiver.next().await);
    h.wait_stats("the delivery to fail", |s| s.webhooks_failed == 1)
        .await;
    assert_eq!(h.ledger.stats().webhook_attempts, 1);
    assert!(receiver.drain().is_empty(), "no retry after a 400");

    // 429 and 408 are retried, like 5xx.
    let mut retried = Receiver::start(&[429, 408]).await;
    let h2 = Harness::start_with(c, config(&retried)).await;
    h2.create(&postings("world", "a", 5, "USD"), None).await;
    for _ in 0..3 {
        check_attempt(&retried.next().await);
    }
    h2.wait_stats("the delivery", |s| s.webhooks_delivered == 1)
        .await;
}

/// More deliveries than the dispatcher's 32 slots, with the first attempts refused
/// so every slot sits in backoff while the rest wait in the journal: each
/// transaction's event still arrives, under one delivery id each, and nothing is
/// left pending.
#[tokio::test]
async fn a_backlog_beyond_the_delivery_slots_is_delivered_in_full() {
    let Some(c) = contracts() else { return };
    const TRANSACTIONS: usize = 100;
    let mut receiver = Receiver::start(&[503; 40]).await;
    let h = Harness::start_with(c, config(&receiver)).await;
    let mut ids = std::collections::BTreeSet::new();
    for n in 0..TRANSACTIONS {
        let tx = h
            .create(
                &json!({"postings": [{"source": "world", "destination": format!("merchants:{n}:available"), "amount": 100, "asset": "USD/2"}]}),
                Some(&format!("backlog-{n}")),
            )
            .await;
        ids.insert(tx["id"].as_u64().expect("a transaction id"));
    }
    h.wait_stats("every delivery to be acknowledged", |s| {
        s.webhooks_delivered == TRANSACTIONS as u64 && s.webhooks_pending == 0
    })
    .await;
    let mut delivered = std::collections::BTreeMap::new();
    for attempt in receiver.drain() {
        let event = check_attempt(&attempt);
        let tx = event["payload"]["transactions"][0]["id"].as_u64().unwrap();
        delivered
            .entry(tx)
            .or_insert_with(std::collections::BTreeSet::new)
            .insert(attempt.header("formance-webhook-id").to_owned());
    }
    assert_eq!(
        delivered
            .keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        ids,
        "every committed transaction's event arrived"
    );
    assert!(
        delivered
            .values()
            .all(|delivery_ids| delivery_ids.len() == 1),
        "one delivery id per event across its retries: {delivered:?}"
    );
    assert_eq!(receiver.scripted_left(), 0);
    assert_eq!(h.ledger.stats().webhooks_failed, 0);
}
