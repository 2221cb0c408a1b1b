//! Reverts and metadata writes.

use outbox_ledger_dev::DevLedgerConfig;
use serde_json::{Value, json};

use crate::support::{Harness, contracts, postings, with};

#[tokio::test]
async fn revert_creates_the_reversing_transaction() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.create(
        &postings("world", "merchants:4471:available", 1000, "USD/2"),
        None,
    )
    .await;
    let payout = h
        .create(
            &json!({"postings": [
                {"source": "merchants:4471:available", "destination": "merchants:4471:payouts:pending", "amount": 600, "asset": "USD/2"},
                {"source": "merchants:4471:available", "destination": "fees", "amount": 10, "asset": "USD/2"},
            ], "metadata": {"outbox_event_id": "e1"}}),
            None,
        )
        .await;
    let id = payout["id"].as_u64().unwrap();

    let answer = h
        .post(
            &format!("transactions/{id}/revert"),
            &json!({"metadata": {"outbox_event_id": "e2"}}),
            Some("rv-1"),
        )
        .await;
    let revert = h.ok(&answer, 201, "V2RevertTransactionResponse")["data"].clone();
    assert!(!answer.hit());
    assert_eq!(
        revert["postings"],
        json!([
            {"source": "fees", "destination": "merchants:4471:available", "amount": 10, "asset": "USD/2"},
            {"source": "merchants:4471:payouts:pending", "destination": "merchants:4471:available", "amount": 600, "asset": "USD/2"},
        ]),
        "swapped and in reverse order"
    );
    assert_eq!(
        revert["metadata"],
        json!({"outbox_event_id": "e2", "com.formance.spec/state/reverts": id.to_string()})
    );
    assert_eq!(revert["reverted"], false);
    assert!(revert["id"].as_u64().unwrap() > id);

    let original = h.get(&format!("transactions/{id}")).await;
    let original = h.ok(&original, 200, "V2GetTransactionResponse")["data"].clone();
    assert_eq!(original["reverted"], true);
    assert!(original["revertedAt"].is_string());
    assert_eq!(h.balances("merchants:4471:available").await["USD/2"], 1000);

    // Replay: same status, stored body, hit header.
    let replay = h
        .post(
            &format!("transactions/{id}/revert"),
            &json!({"metadata": {"outbox_event_id": "e2"}}),
            Some("rv-1"),
        )
        .await;
    assert!(replay.hit());
    assert_eq!(
        h.ok(&replay, 201, "V2RevertTransactionResponse")["data"],
        revert
    );

    h.err(
        &h.post(&format!("transactions/{id}/revert"), &json!({}), None)
            .await,
        400,
        "ALREADY_REVERT",
    );
    h.err(
        &h.post_raw("transactions/999/revert", "", None).await,
        404,
        "NOT_FOUND",
    );
    h.err(
        &h.post_raw("transactions/x/revert", "", None).await,
        400,
        "VALIDATION",
    );
    // A key reused on another transaction (or another operation) is a mismatch.
    h.err(
        &h.post_raw("transactions/1/revert", "", Some("rv-1")).await,
        400,
        "VALIDATION",
    );
    h.err(
        &h.post(
            "transactions",
            &postings("world", "a", 1, "USD"),
            Some("rv-1"),
        )
        .await,
        400,
        "VALIDATION",
    );
}

#[tokio::test]
async fn revert_needs_funds_unless_forced() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let funding = h.create(&postings("world", "a", 100, "USD"), None).await;
    h.create(&postings("a", "b", 100, "USD"), None).await;
    let path = format!("transactions/{}/revert", funding["id"]);
    let message = h.err(&h.post_raw(&path, "", None).await, 400, "INSUFFICIENT_FUND");
    assert!(message.contains("@a"), "{message}");
    let forced = h.post_raw(&format!("{path}?force=true"), "", None).await;
    h.ok(&forced, 201, "V2RevertTransactionResponse");
    assert_eq!(h.balances("a").await["USD"], -100);

    // atEffectiveDate dates the reversal at the original's timestamp.
    let dated = h
        .create(&json!({"postings": [{"source": "world", "destination": "c", "amount": 1, "asset": "USD"}], "timestamp": "2024-05-01T00:00:00Z"}), None)
        .await;
    let answer = h
        .post_raw(
            &format!("transactions/{}/revert?atEffectiveDate=true", dated["id"]),
            "",
            None,
        )
        .await;
    assert_eq!(
        h.ok(&answer, 201, "V2RevertTransactionResponse")["data"]["timestamp"],
        "2024-05-01T00:00:00Z"
    );
}

#[tokio::test]
async fn metadata_writes_are_idempotent() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let md = json!({"tier": "gold", "owner": "4471"});
    let first = h
        .post(
            "accounts/merchants:4471:available/metadata",
            &md,
            Some("m1"),
        )
        .await;
    assert_eq!(first.status, 204);
    assert!(!first.hit());
    let replay = h
        .post(
            "accounts/merchants:4471:available/metadata",
            &md,
            Some("m1"),
        )
        .await;
    assert_eq!(replay.status, 204);
    assert!(replay.hit());
    let other = h
        .post(
            "accounts/merchants:4471:available/metadata",
            &json!({"tier": "silver"}),
            Some("m1"),
        )
        .await;
    h.err(&other, 400, "VALIDATION");
    let account = h.get("accounts/merchants:4471:available").await;
    let account = h.ok(&account, 200, "V2AccountResponse")["data"].clone();
    assert_eq!(account["metadata"], md);
    assert!(account.get("volumes").is_none(), "volumes only with expand");

    h.err(
        &h.post("accounts/bad::address/metadata", &md, None).await,
        400,
        "VALIDATION",
    );
    h.err(
        &h.post_raw("accounts/a/metadata", "[1]", None).await,
        400,
        "VALIDATION",
    );

    let tx = h.create(&postings("world", "a", 1, "USD"), None).await;
    let path = format!("transactions/{}/metadata", tx["id"]);
    assert_eq!(
        h.post(&path, &json!({"note": "hello"}), Some("t1"))
            .await
            .status,
        204
    );
    let read = h.get(&format!("transactions/{}", tx["id"])).await;
    assert_eq!(
        h.ok(&read, 200, "V2GetTransactionResponse")["data"]["metadata"]["note"],
        "hello"
    );
    h.err(
        &h.post("transactions/999/metadata", &json!({"a": "b"}), None)
            .await,
        404,
        "NOT_FOUND",
    );

    let delete = h.send(h.http.delete(h.url(&format!("{path}/note")))).await;
    assert_eq!(delete.status, 204);
    let read = h.get(&format!("transactions/{}", tx["id"])).await;
    assert!(
        h.ok(&read, 200, "V2GetTransactionResponse")["data"]["metadata"]
            .get("note")
            .is_none()
    );

    // dryRun stores nothing.
    let dry = h
        .post(
            "accounts/dry/metadata?dryRun=true",
            &json!({"a": "b"}),
            Some("m2"),
        )
        .await;
    assert_eq!(dry.status, 204);
    h.err(&h.get("accounts/dry").await, 404, "NOT_FOUND");
}

/// The log entry with id `id`, read through `GET /logs`.
async fn log(h: &Harness, id: u64) -> Value {
    let answer = h.get("logs?pageSize=100").await;
    let page = h.ok(&answer, 200, "V2LogsCursorResponse");
    page["cursor"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == id)
        .unwrap_or_else(|| panic!("no log {id}: {page:#}"))
        .clone()
}

/// What `snapshots` reads of the payout `id` (created by `body` under key `e1`,
/// reverted under key `rv`).
#[derive(Debug, Clone, PartialEq)]
struct Snapshots {
    now: Value,
    replayed: Value,
    new_log: Value,
    reverted: Value,
    revert_log: Value,
}

async fn snapshots(h: &Harness, id: u64, body: &Value) -> Snapshots {
    let read = h.get(&format!("transactions/{id}")).await;
    let now = h.ok(&read, 200, "V2GetTransactionResponse")["data"].clone();
    let replay = h.post("transactions", body, Some("e1")).await;
    assert!(replay.hit());
    let replayed = h.ok(&replay, 200, "V2CreateTransactionResponse")["data"].clone();
    // A bulk revert answers the reverted original: a replay answers its snapshot.
    let bulk = json!([{"action": "REVERT_TRANSACTION", "ik": "rv", "data": {"id": id}}]);
    let answer = h.post("_bulk", &bulk, None).await;
    let reverted = h.ok(&answer, 200, "V2BulkResponse")["data"][0]["data"].clone();
    // Logs: 1 funding, 2 the payout, 3 and 4 its metadata, 5 the revert, 6 metadata.
    Snapshots {
        now,
        replayed,
        new_log: log(h, 2).await["data"]["transaction"].clone(),
        reverted,
        revert_log: log(h, 5).await["data"].clone(),
    }
}

/// A transaction changed after it was committed (metadata added and removed, then
/// reverted, then more metadata) reads as it is now, while its key's replays and its
/// logs still answer the snapshots of their own time — live and after a restart.
#[tokio::test]
async fn replays_and_logs_keep_the_snapshot_of_their_time() {
    let Some(c) = contracts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = DevLedgerConfig {
        data: Some(dir.path().join("ledger.sqlite")),
        ..DevLedgerConfig::default()
    };
    let h = Harness::start_with(c, config.clone()).await;
    h.create(
        &postings("world", "merchants:1:available", 1000, "USD/2"),
        None,
    )
    .await;
    let body = with(
        postings(
            "merchants:1:available",
            "merchants:1:payouts:pending",
            600,
            "USD/2",
        ),
        "metadata",
        json!({"outbox_event_id": "e1", "outbox_sequence": "1"}),
    );
    let created = h.create(&body, Some("e1")).await;
    let id = created["id"].as_u64().unwrap();
    let path = format!("transactions/{id}/metadata");
    assert_eq!(h.post(&path, &json!({"k": "v"}), None).await.status, 204);
    let delete = h.http.delete(h.url(&format!("{path}/outbox_sequence")));
    assert_eq!(h.send(delete).await.status, 204);
    let answer = h
        .post_raw(&format!("transactions/{id}/revert"), "", Some("rv"))
        .await;
    let revert = h.ok(&answer, 201, "V2RevertTransactionResponse")["data"].clone();
    assert_eq!(
        h.post(&path, &json!({"after": "revert"}), None)
            .await
            .status,
        204
    );

    let live = snapshots(&h, id, &body).await;
    assert_eq!(live.now["reverted"], true);
    assert_eq!(
        live.now["metadata"],
        json!({"outbox_event_id": "e1", "k": "v", "after": "revert"})
    );
    assert_eq!(
        live.replayed, created,
        "the replay answers the transaction as committed"
    );
    assert_eq!(live.new_log, created, "so does its log");
    assert_eq!(live.reverted["reverted"], true);
    assert_eq!(
        live.reverted["metadata"],
        json!({"outbox_event_id": "e1", "k": "v"}),
        "the revert's snapshot has the metadata of its time"
    );
    assert_eq!(live.revert_log["revertedTransaction"], live.reverted);
    assert_eq!(live.revert_log["transaction"], revert);
    h.ledger.shutdown().await;

    let h = Harness::start_with(c, config).await;
    assert_eq!(
        snapshots(&h, id, &body).await,
        live,
        "a restart rebuilds the same answers"
    );
}
