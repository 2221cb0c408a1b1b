//! Restarts on the same SQLite file.

use std::time::Duration;

use outbox_ledger_dev::{DevLedgerConfig, WebhookBackoff, WebhookTarget};
use serde_json::json;

use crate::support::{Harness, Receiver, contracts, postings, with};

#[tokio::test]
async fn a_restart_keeps_transactions_balances_and_keys() {
    let Some(c) = contracts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = DevLedgerConfig {
        data: Some(dir.path().join("ledger.sqlite")),
        ..DevLedgerConfig::default()
    };
    let body = with(
        postings("world", "merchants:4471:available", 48_500_000, "USD/2"),
        "reference",
        json!("payout:1"),
    );

    let h = Harness::start_with(c, config.clone()).await;
    let tx = h.create(&body, Some("evt-1")).await;
    let spend = postings(
        "merchants:4471:available",
        "merchants:4471:payouts:pending",
        500,
        "USD/2",
    );
    let second = h.create(&spend, Some("evt-2")).await;
    assert_eq!(
        h.post(
            "accounts/merchants:4471:available/metadata",
            &json!({"tier": "gold"}),
            Some("md")
        )
        .await
        .status,
        204
    );
    let reverted = h
        .post_raw(
            &format!("transactions/{}/revert", second["id"]),
            "",
            Some("rv"),
        )
        .await;
    let revert = h.ok(&reverted, 201, "V2RevertTransactionResponse")["data"].clone();
    h.ledger.shutdown().await;

    let h = Harness::start_with(c, config).await;
    assert_eq!(h.ledger.stats().transactions, 3);
    let read = h.get(&format!("transactions/{}", tx["id"])).await;
    assert_eq!(h.ok(&read, 200, "V2GetTransactionResponse")["data"], tx);
    let read = h.get(&format!("transactions/{}", second["id"])).await;
    assert_eq!(
        h.ok(&read, 200, "V2GetTransactionResponse")["data"]["reverted"],
        true
    );
    assert_eq!(
        h.balances("merchants:4471:available").await["USD/2"],
        48_500_000
    );
    let account = h
        .get("accounts/merchants:4471:available?expand=volumes")
        .await;
    let account = h.ok(&account, 200, "V2AccountResponse")["data"].clone();
    assert_eq!(account["metadata"]["tier"], "gold");
    assert_eq!(account["volumes"]["USD/2"]["input"], 48_500_500);

    // Keys survive: replays answer the stored originals; a mismatch is still refused.
    let replay = h.post("transactions", &body, Some("evt-1")).await;
    assert!(replay.hit());
    assert_eq!(
        h.ok(&replay, 200, "V2CreateTransactionResponse")["data"],
        tx
    );
    let replay = h
        .post_raw(
            &format!("transactions/{}/revert", second["id"]),
            "",
            Some("rv"),
        )
        .await;
    assert!(replay.hit());
    assert_eq!(
        h.ok(&replay, 201, "V2RevertTransactionResponse")["data"],
        revert
    );
    assert!(
        h.post(
            "accounts/merchants:4471:available/metadata",
            &json!({"tier": "gold"}),
            Some("md")
        )
        .await
        .hit()
    );
    h.err(
        &h.post(
            "transactions",
            &postings("world", "x", 1, "USD"),
            Some("evt-1"),
        )
        .await,
        400,
        "VALIDATION",
    );
    // The id sequence and the references carry on.
    let next = h.create(&postings("world", "x", 1, "USD"), None).await;
    assert_eq!(
        next["id"].as_u64().unwrap(),
        revert["id"].as_u64().unwrap() + 1
    );
    h.err(&h.post("transactions", &body, None).await, 409, "CONFLICT");
    h.err(
        &h.post("/v2/default", &json!({}), None).await,
        400,
        "LEDGER_ALREADY_EXISTS",
    );
}

#[tokio::test]
async fn unacknowledged_webhooks_are_delivered_after_a_restart() {
    let Some(c) = contracts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut receiver = Receiver::start(&[]).await;
    receiver.set_fallback(503);
    let config = DevLedgerConfig {
        data: Some(dir.path().join("ledger.sqlite")),
        webhooks: vec![WebhookTarget {
            url: receiver.url.clone(),
            secret: "s".into(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(50),
            max_attempts: 1000,
        },
        ..DevLedgerConfig::default()
    };
    let h = Harness::start_with(c, config.clone()).await;
    let tx = h.create(&postings("world", "a", 5, "USD"), None).await;
    let refused = receiver.next().await;
    let id = refused.header("formance-webhook-id").to_owned();
    h.ledger.shutdown().await;
    receiver.drain();

    receiver.set_fallback(200);
    let h = Harness::start_with(c, config).await;
    let delivered = receiver.next().await;
    assert_eq!(
        delivered.header("formance-webhook-id"),
        id,
        "the same delivery, resumed"
    );
    assert_eq!(delivered.body, refused.body);
    assert_eq!(delivered.json["payload"]["transactions"][0]["id"], tx["id"]);
    c.validate_committed_transactions(&delivered.json["payload"]);
    h.wait_stats("the resumed delivery", |s| {
        s.webhooks_delivered == 1 && s.webhooks_pending == 0
    })
    .await;
    h.ledger.shutdown().await;

    // Acknowledged deliveries are not sent again.
    let h = Harness::start_with(
        c,
        DevLedgerConfig {
            data: Some(dir.path().join("ledger.sqlite")),
            ..DevLedgerConfig::default()
        },
    )
    .await;
    assert_eq!(h.ledger.stats().webhooks_pending, 0);
}
