//! `POST /_bulk`: per-element keys, failure modes, atomicity, size limit.

use outbox_ledger_dev::DevLedgerConfig;
use serde_json::{Value, json};

use crate::support::{Harness, contracts, postings, with};

fn create(ik: &str, body: Value) -> Value {
    json!({"action": "CREATE_TRANSACTION", "ik": ik, "data": body})
}

#[tokio::test]
async fn elements_carry_their_own_idempotency_keys() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let elements = json!([
        create("e1", postings("world", "m:1", 100, "USD/2")),
        create(
            "e2",
            with(
                postings("world", "m:2", 200, "USD/2"),
                "reference",
                json!("r2")
            )
        ),
    ]);
    // A request-level Idempotency-Key is ignored by bulk.
    let first = h.post("_bulk", &elements, Some("request-key")).await;
    let body = h.ok(&first, 200, "V2BulkResponse");
    assert!(!first.hit());
    let results = body["data"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["responseType"], "CREATE_TRANSACTION");
    assert_eq!(results[0]["logID"], 1);
    assert_eq!(results[1]["logID"], 2);
    assert_eq!(results[1]["data"]["reference"], "r2");

    // Replaying the bulk creates nothing and answers the same transactions.
    let again = h.post("_bulk", &elements, None).await;
    let replayed = h.ok(&again, 200, "V2BulkResponse");
    assert_eq!(replayed["data"][0]["data"], results[0]["data"]);
    assert_eq!(replayed["data"][1]["logID"], 2);
    assert_eq!(h.ledger.stats().transactions, 2);
    assert_eq!(h.ledger.stats().idempotency_hits, 2);

    // One key space: the same payload under the same key via the single endpoint is a hit…
    let single = h
        .post(
            "transactions",
            &postings("world", "m:1", 100, "USD/2"),
            Some("e1"),
        )
        .await;
    assert!(single.hit());
    assert_eq!(
        h.ok(&single, 200, "V2CreateTransactionResponse")["data"],
        results[0]["data"]
    );
    // …and the request-level key of the bulk call was never stored.
    let fresh = h
        .post(
            "transactions",
            &postings("world", "m:3", 1, "USD/2"),
            Some("request-key"),
        )
        .await;
    assert!(!fresh.hit());
    assert_eq!(fresh.status, 200);
    // A different payload under an element's key is VALIDATION, in bulk too.
    let clash = h
        .post(
            "_bulk",
            &json!([create("e2", postings("world", "m:2", 201, "USD/2"))]),
            None,
        )
        .await;
    let body = h.ok(&clash, 400, "V2BulkResponse");
    assert_eq!(body["data"][0]["responseType"], "ERROR");
    assert_eq!(body["data"][0]["errorCode"], "VALIDATION");
}

#[tokio::test]
async fn without_continue_on_failure_later_elements_are_canceled() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let elements = json!([
        create("a", postings("world", "x", 1, "USD")),
        create("b", postings("broke", "x", 1, "USD")),
        create("c", postings("world", "y", 1, "USD")),
    ]);
    let answer = h.post("_bulk", &elements, None).await;
    let body = h.ok(&answer, 400, "V2BulkResponse");
    let r = body["data"].as_array().unwrap();
    assert_eq!(r[0]["responseType"], "CREATE_TRANSACTION");
    assert_eq!(r[1]["responseType"], "ERROR");
    assert_eq!(r[1]["errorCode"], "INSUFFICIENT_FUND");
    assert_eq!(r[2]["responseType"], "ERROR");
    assert_eq!(r[2]["errorCode"], "INTERNAL");
    assert_eq!(r[2]["errorDescription"], "context canceled");
    assert_eq!(
        h.ledger.stats().transactions,
        1,
        "the first element committed on its own"
    );

    // Keys of failed or canceled elements were not stored.
    let retry = h
        .post("transactions", &postings("world", "y", 1, "USD"), Some("c"))
        .await;
    assert!(!retry.hit());
}

#[tokio::test]
async fn continue_on_failure_runs_every_element() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let elements = json!([
        create("a", postings("broke", "x", 1, "USD")),
        create("b", json!({})),
        create("c", postings("world", "y", 1, "USD")),
    ]);
    let answer = h
        .post("_bulk?continueOnFailure=true", &elements, None)
        .await;
    let body = h.ok(&answer, 400, "V2BulkResponse");
    let codes: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["errorCode"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(codes, ["INSUFFICIENT_FUND", "NO_POSTINGS", "-"]);
    assert_eq!(h.balances("y").await["USD"], 1);
}

#[tokio::test]
async fn atomic_failure_rolls_everything_back() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let elements = json!([
        create("a", postings("world", "x", 5, "USD")),
        create("b", postings("x", "y", 5, "USD")),
        create("c", postings("x", "z", 1, "USD")),
    ]);
    let answer = h
        .post("_bulk?atomic=true&continueOnFailure=true", &elements, None)
        .await;
    let body = h.ok(&answer, 400, "V2BulkResponse");
    assert_eq!(
        body["data"][1]["responseType"], "CREATE_TRANSACTION",
        "later elements see earlier ones"
    );
    assert_eq!(body["data"][2]["errorCode"], "INSUFFICIENT_FUND");
    assert_eq!(
        h.ledger.stats().transactions,
        0,
        "nothing of an atomic bulk survives a failure"
    );
    assert!(h.list(&json!({})).await.is_empty());
    assert!(
        !h.post("transactions", &postings("world", "x", 5, "USD"), Some("a"))
            .await
            .hit()
    );

    // The same bulk without the failing element commits as a whole.
    let ok = json!([
        create("a2", postings("world", "x", 5, "USD")),
        create("b2", postings("x", "y", 5, "USD"))
    ]);
    let answer = h.post("_bulk?atomic=true", &ok, None).await;
    h.ok(&answer, 200, "V2BulkResponse");
    assert_eq!(h.balances("y").await["USD"], 5);

    let parallel = h.post("_bulk?atomic=true&parallel=true", &ok, None).await;
    h.err(&parallel, 412, "VALIDATION");
}

/// Everything a client can read of the ledger: transactions, logs, accounts with
/// their volumes and metadata.
async fn everything(h: &crate::support::Harness) -> Vec<Value> {
    let mut reads = Vec::new();
    for path in [
        "transactions?pageSize=100",
        "logs?pageSize=100",
        "accounts?pageSize=100&expand=volumes,effectiveVolumes",
    ] {
        let answer = h.get(path).await;
        assert_eq!(answer.status, 200, "{path}: {:?}", answer.body);
        reads.push(answer.body["cursor"]["data"].clone());
    }
    reads
}

#[tokio::test]
async fn a_failed_atomic_bulk_leaves_a_busy_ledger_exactly_as_it_was() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.create(&postings("world", "x", 10, "USD"), Some("before-1"))
        .await;
    h.create(
        &with(postings("x", "y", 3, "USD"), "reference", json!("ref-1")),
        Some("before-2"),
    )
    .await;
    let before = everything(&h).await;
    // Touches existing accounts (world, x, y), creates two (z, fresh) and a new
    // asset on world, stores a reference and keys, then fails on the last element.
    let elements = json!([
        create("a", postings("world", "x", 5, "USD")),
        create(
            "b",
            with(postings("x", "z", 5, "USD"), "reference", json!("ref-2"))
        ),
        create("c", postings("world", "fresh", 1, "EUR")),
        create(
            "d",
            with(postings("x", "y", 1, "USD"), "metadata", json!({"k": "v"}))
        ),
        create("e", postings("x", "y", 1_000, "USD")),
    ]);
    let answer = h.post("_bulk?atomic=true", &elements, None).await;
    let body = h.ok(&answer, 400, "V2BulkResponse");
    assert_eq!(body["data"][4]["errorCode"], "INSUFFICIENT_FUND", "{body}");
    assert_eq!(
        everything(&h).await,
        before,
        "the rolled-back bulk left a trace"
    );
    assert_eq!(h.ledger.stats().transactions, 2);
    // Its keys and reference were not kept: each is new again.
    assert!(
        !h.post("transactions", &postings("world", "x", 5, "USD"), Some("a"))
            .await
            .hit()
    );
    h.create(
        &with(
            postings("world", "q", 1, "USD"),
            "reference",
            json!("ref-2"),
        ),
        None,
    )
    .await;
    // And the ledger goes on from where it was: balances add up.
    assert_eq!(h.balances("x").await["USD"], 10 - 3 + 5);
    assert_eq!(h.balances("y").await["USD"], 3);
}

#[tokio::test]
async fn size_limit_and_malformed_requests() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let many: Vec<Value> = (0..101)
        .map(|i| create(&format!("k{i}"), postings("world", "x", 1, "USD")))
        .collect();
    let answer = h.post("_bulk", &Value::Array(many), None).await;
    let message = h.err(&answer, 413, "BULK_SIZE_EXCEEDED");
    assert!(message.contains("100"), "{message}");
    assert_eq!(h.ledger.stats().transactions, 0);

    let small = Harness::start_with(
        c,
        DevLedgerConfig {
            bulk_max_size: 2,
            ..DevLedgerConfig::default()
        },
    )
    .await;
    let three = json!([
        create("a", json!({})),
        create("b", json!({})),
        create("c", json!({}))
    ]);
    small.err(
        &small.post("_bulk", &three, None).await,
        413,
        "BULK_SIZE_EXCEEDED",
    );

    h.err(
        &h.post("_bulk", &json!({"action": "CREATE_TRANSACTION"}), None)
            .await,
        400,
        "VALIDATION",
    );
    h.err(
        &h.post("_bulk", &json!([{"action": "NOPE", "data": {}}]), None)
            .await,
        400,
        "VALIDATION",
    );
    let quoted = json!([create(
        "q",
        json!({"postings": [{"source": "world", "destination": "a", "amount": "1", "asset": "USD"}]})
    )]);
    h.err(&h.post("_bulk", &quoted, None).await, 400, "VALIDATION");
}

#[tokio::test]
async fn metadata_and_revert_elements() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let tx = h.create(&postings("world", "m:1", 50, "USD"), None).await;
    let elements = json!([
        {"action": "ADD_METADATA", "ik": "md1", "data": {"targetType": "ACCOUNT", "targetId": "m:1", "metadata": {"tier": "gold"}}},
        {"action": "ADD_METADATA", "ik": "md2", "data": {"targetType": "TRANSACTION", "targetId": tx["id"], "metadata": {"note": "n"}}},
        {"action": "REVERT_TRANSACTION", "ik": "rv1", "data": {"id": tx["id"]}},
        {"action": "DELETE_METADATA", "data": {"targetType": "TRANSACTION", "targetId": tx["id"], "key": "note"}},
    ]);
    let answer = h.post("_bulk", &elements, None).await;
    let body = h.ok(&answer, 200, "V2BulkResponse");
    let r = body["data"].as_array().unwrap();
    assert_eq!(r[0]["responseType"], "ADD_METADATA");
    assert!(r[0].get("data").is_none());
    assert_eq!(r[2]["responseType"], "REVERT_TRANSACTION");
    assert_eq!(
        r[2]["data"]["id"], tx["id"],
        "bulk answers the reverted original"
    );
    assert_eq!(r[2]["data"]["reverted"], true);
    assert_eq!(r[3]["responseType"], "DELETE_METADATA");

    let account = h.get("accounts/m:1").await;
    assert_eq!(
        h.ok(&account, 200, "V2AccountResponse")["data"]["metadata"]["tier"],
        "gold"
    );
    let original = h.get(&format!("transactions/{}", tx["id"])).await;
    let original = h.ok(&original, 200, "V2GetTransactionResponse")["data"].clone();
    assert_eq!(original["reverted"], true);
    assert!(
        original["metadata"].get("note").is_none(),
        "deleted by the last element"
    );
    let bad_target = json!([{"action": "ADD_METADATA", "data": {"targetType": "TRANSACTION", "targetId": 999, "metadata": {}}}]);
    let body = h.ok(
        &h.post("_bulk", &bad_target, None).await,
        400,
        "V2BulkResponse",
    );
    assert_eq!(body["data"][0]["errorCode"], "NOT_FOUND");
}
