//! `POST /transactions`: idempotency, references, dry runs, errors, Numscript.

use serde_json::json;

use crate::support::{Harness, contracts, postings, with};

const PAYOUT: &str = "vars {\n  monetary $amount\n  account $dst\n}\nsend $amount (\n  source = @world\n  destination = $dst\n)\nset_tx_meta(\"event_type\", \"payout.requested\")\n";

#[tokio::test]
async fn create_then_replay_with_same_key_answers_the_original() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let body = with(
        with(
            postings("world", "merchants:4471:available", 48_500_000, "USD/2"),
            "reference",
            json!("payout:settlement-2026-10-07:4471"),
        ),
        "metadata",
        json!({"outbox_event_id": "e-1", "event_type": "payout.requested"}),
    );
    let first = h.post("transactions", &body, Some("key-1")).await;
    let tx = h.ok(&first, 200, "V2CreateTransactionResponse")["data"].clone();
    assert!(!first.hit(), "a first call has no Idempotency-Hit header");
    assert_eq!(tx["id"], 1, "ids start at 1 per ledger");
    assert_eq!(tx["reverted"], false);
    assert_eq!(
        tx["postCommitVolumes"]["merchants:4471:available"]["USD/2"]["balance"],
        48_500_000
    );
    assert_eq!(tx["preCommitVolumes"]["world"]["USD/2"]["balance"], 0);
    assert_eq!(
        tx["postCommitEffectiveVolumes"]["world"]["USD/2"]["output"],
        48_500_000
    );

    // Same command, other key order and whitespace: the hash covers the parsed command.
    let respelled = r#"{ "metadata": {"event_type":"payout.requested","outbox_event_id":"e-1"},
        "reference": "payout:settlement-2026-10-07:4471",
        "postings": [ { "asset": "USD/2", "amount": 48500000, "destination": "merchants:4471:available", "source": "world" } ] }"#;
    let replay = h.post_raw("transactions", respelled, Some("key-1")).await;
    assert!(replay.hit(), "a replay carries Idempotency-Hit: true");
    let replayed = h.ok(&replay, 200, "V2CreateTransactionResponse")["data"].clone();
    assert_eq!(
        replayed, tx,
        "a replay answers the stored original, byte for byte"
    );

    assert_eq!(
        h.list(&json!({})).await.len(),
        1,
        "the replay posted nothing"
    );
    assert_eq!(
        h.balances("merchants:4471:available").await["USD/2"],
        48_500_000
    );
    assert_eq!(h.ledger.stats().idempotency_hits, 1);
    assert_eq!(h.ledger.stats().transactions, 1);
}

#[tokio::test]
async fn same_key_with_another_body_is_a_validation_error() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.create(&postings("world", "a", 100, "USD/2"), Some("k"))
        .await;
    for other in [
        postings("world", "a", 101, "USD/2"),
        postings("world", "b", 100, "USD/2"),
        with(
            postings("world", "a", 100, "USD/2"),
            "reference",
            json!("r"),
        ),
        with(
            postings("world", "a", 100, "USD/2"),
            "metadata",
            json!({"x": "y"}),
        ),
        with(postings("world", "a", 100, "USD/2"), "force", json!(true)),
    ] {
        let answer = h.post("transactions", &other, Some("k")).await;
        let message = h.err(&answer, 400, "VALIDATION");
        assert!(
            message.starts_with(
                "invalid idempotency hash when using idempotency key 'k', has computed '"
            ),
            "{message}"
        );
        assert!(
            message.contains("' but '") && message.ends_with("' is stored"),
            "{message}"
        );
    }
    // Absent metadata equals {} in postings mode (TxToScriptData normalises it).
    let same = with(postings("world", "a", 100, "USD/2"), "metadata", json!({}));
    assert!(h.post("transactions", &same, Some("k")).await.hit());
}

#[tokio::test]
async fn a_failed_request_stores_no_key() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let spend = postings(
        "merchants:1:available",
        "merchants:1:payouts:pending",
        500,
        "USD/2",
    );
    let refused = h.post("transactions", &spend, Some("pay-1")).await;
    h.err(&refused, 400, "INSUFFICIENT_FUND");

    h.create(
        &postings("world", "merchants:1:available", 500, "USD/2"),
        None,
    )
    .await;
    let retried = h.post("transactions", &spend, Some("pay-1")).await;
    let tx = h.ok(&retried, 200, "V2CreateTransactionResponse");
    assert!(
        !retried.hit(),
        "the failed attempt consumed nothing: this is a first success"
    );
    assert_eq!(tx["data"]["postings"][0]["source"], "merchants:1:available");
    assert_eq!(h.balances("merchants:1:available").await["USD/2"], 0);
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let body = postings("world", "a", 7, "EUR/2");
    let dry = h.post("transactions?dryRun=true", &body, Some("d")).await;
    let tx = h.ok(&dry, 200, "V2CreateTransactionResponse")["data"].clone();
    assert_eq!(tx["postCommitVolumes"]["a"]["EUR/2"]["balance"], 7);
    let id = tx["id"].as_u64().unwrap();
    h.err(
        &h.get(&format!("transactions/{id}")).await,
        404,
        "NOT_FOUND",
    );
    h.err(&h.get("accounts/a").await, 404, "NOT_FOUND");

    let real = h.post("transactions", &body, Some("d")).await;
    let real_tx = h.ok(&real, 200, "V2CreateTransactionResponse")["data"].clone();
    assert!(!real.hit(), "a dry run stores no key");
    assert!(
        real_tx["id"].as_u64().unwrap() > id,
        "the dry run consumed its id, like the SQL sequence"
    );
    assert_eq!(h.ledger.stats().transactions, 1);
}

#[tokio::test]
async fn duplicate_reference_conflicts_unless_replayed() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let body = with(
        postings("world", "a", 1, "USD"),
        "reference",
        json!("inv-1"),
    );
    let first = h.create(&body, Some("A")).await;

    let message = h.err(
        &h.post("transactions", &body, Some("B")).await,
        409,
        "CONFLICT",
    );
    assert!(message.contains("inv-1"), "{message}");
    h.err(&h.post("transactions", &body, None).await, 409, "CONFLICT");
    let other_amount = with(
        postings("world", "a", 2, "USD"),
        "reference",
        json!("inv-1"),
    );
    h.err(
        &h.post("transactions", &other_amount, None).await,
        409,
        "CONFLICT",
    );

    // The key lookup happens before the reference insert.
    let replay = h.post("transactions", &body, Some("A")).await;
    assert!(replay.hit());
    assert_eq!(
        h.ok(&replay, 200, "V2CreateTransactionResponse")["data"]["id"],
        first["id"]
    );
    // An empty reference is not constrained.
    let empty = with(postings("world", "a", 1, "USD"), "reference", json!(""));
    h.create(&empty, None).await;
    let again = h.create(&empty, None).await;
    assert!(
        again.get("reference").is_none(),
        "an empty reference is omitted"
    );
}

#[tokio::test]
async fn error_codes_and_statuses() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let validation = [
        ("not json", "{".to_owned()),
        ("empty body", String::new()),
        (
            "quoted amount",
            json!({"postings":[{"source":"world","destination":"a","amount":"100","asset":"USD"}]})
                .to_string(),
        ),
        (
            "negative amount",
            json!({"postings":[{"source":"world","destination":"a","amount":-1,"asset":"USD"}]})
                .to_string(),
        ),
        (
            "missing amount",
            json!({"postings":[{"source":"world","destination":"a","asset":"USD"}]}).to_string(),
        ),
        ("bad address", postings("@world", "a", 1, "USD").to_string()),
        (
            "bad destination",
            postings("world", "a::b", 1, "USD").to_string(),
        ),
        ("bad asset", postings("world", "a", 1, "usd").to_string()),
        (
            "postings and script",
            with(
                postings("world", "a", 1, "USD"),
                "script",
                json!({"plain": PAYOUT}),
            )
            .to_string(),
        ),
        (
            "metadata not strings",
            with(
                postings("world", "a", 1, "USD"),
                "metadata",
                json!({"n": 1}),
            )
            .to_string(),
        ),
        (
            "bad timestamp",
            with(
                postings("world", "a", 1, "USD"),
                "timestamp",
                json!("yesterday"),
            )
            .to_string(),
        ),
    ];
    for (what, body) in validation {
        let answer = h.post_raw("transactions", &body, None).await;
        assert_eq!(answer.status, 400, "{what}: {:#}", answer.body);
        h.err(&answer, 400, "VALIDATION");
    }
    h.err(
        &h.post("transactions", &json!({}), None).await,
        400,
        "NO_POSTINGS",
    );
    h.err(
        &h.post("transactions", &json!({"postings": []}), None).await,
        400,
        "NO_POSTINGS",
    );
    let meta_only = json!({"script": {"plain": "set_tx_meta(\"a\", \"b\")\n"}});
    h.err(
        &h.post("transactions", &meta_only, None).await,
        400,
        "NO_POSTINGS",
    );
    let syntax =
        json!({"script": {"plain": "send [USD 1] (\n source = world\n destination = @a\n)"}});
    h.err(
        &h.post("transactions", &syntax, None).await,
        400,
        "COMPILATION_FAILED",
    );
    let missing_var = json!({"script": {"plain": PAYOUT, "vars": {"amount": "USD/2 1"}}});
    h.err(
        &h.post("transactions", &missing_var, None).await,
        400,
        "COMPILATION_FAILED",
    );
    let bad_var = json!({"script": {"plain": PAYOUT, "vars": {"amount": "1 USD", "dst": "a"}}});
    h.err(
        &h.post("transactions", &bad_var, None).await,
        400,
        "COMPILATION_FAILED",
    );

    let unknown = h
        .post(
            "/v2/nope/transactions",
            &postings("world", "a", 1, "USD"),
            None,
        )
        .await;
    h.err(&unknown, 404, "LEDGER_NOT_FOUND");
    h.err(
        &h.get("/v2/nope/transactions/1").await,
        404,
        "LEDGER_NOT_FOUND",
    );
    h.err(&h.get("transactions/99").await, 404, "NOT_FOUND");
    h.err(&h.get("transactions/abc").await, 400, "VALIDATION");

    // Ledgers.
    assert_eq!(h.post("/v2/second", &json!({}), None).await.status, 204);
    h.err(
        &h.post("/v2/second", &json!({}), None).await,
        400,
        "LEDGER_ALREADY_EXISTS",
    );
    h.err(
        &h.post_raw("/v2/bad.name", "", None).await,
        400,
        "VALIDATION",
    );
    let info = h.get("/v2/second").await;
    assert_eq!(
        h.ok(&info, 200, "V2GetLedgerResponse")["data"]["name"],
        "second"
    );
}

#[tokio::test]
async fn numscript_subset() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let vars = json!({"amount": "USD/2 48500000", "dst": "merchants:4471:available"});
    let tx = h
        .create(
            &json!({"script": {"plain": PAYOUT, "vars": vars}, "metadata": {"payout_id": "p1"}}),
            Some("s1"),
        )
        .await;
    assert_eq!(
        tx["postings"][0],
        json!({"source": "world", "destination": "merchants:4471:available", "amount": 48_500_000, "asset": "USD/2"})
    );
    assert_eq!(
        tx["metadata"],
        json!({"event_type": "payout.requested", "payout_id": "p1"})
    );

    // The script's set_tx_meta key may not also come in the request.
    let clash = json!({"script": {"plain": PAYOUT, "vars": vars}, "metadata": {"event_type": "x"}});
    h.err(
        &h.post("transactions", &clash, None).await,
        400,
        "METADATA_OVERRIDE",
    );

    // Account variables as source and destination; funds are checked.
    let transfer = "vars {\n  monetary $amount\n  account $src\n  account $dst\n}\nsend $amount (\n  source = $src\n  destination = $dst\n)\n";
    let move_funds = |amount: &str| json!({"script": {"plain": transfer, "vars": {"amount": amount, "src": "merchants:4471:available", "dst": "merchants:4471:payouts:pending"}}});
    h.create(&move_funds("USD/2 48500000"), None).await;
    h.err(
        &h.post("transactions", &move_funds("USD/2 1"), None).await,
        400,
        "INSUFFICIENT_FUND",
    );

    // Unbounded overdraft, literal amounts, legacy object variables.
    let overdraft = "vars {\n  monetary $m\n}\nsend $m (\n  source = @fees allowing unbounded overdraft\n  destination = @platform\n)\nsend [USD/2 5] (\n  source = @platform\n  destination = @merchants:4471:available\n)\n";
    let tx = h
        .create(&json!({"script": {"plain": overdraft, "vars": {"m": {"asset": "USD/2", "amount": 10}}}}), None)
        .await;
    assert_eq!(tx["postCommitVolumes"]["fees"]["USD/2"]["balance"], -10);
    assert_eq!(tx["postings"].as_array().unwrap().len(), 2);

    // The machine needs newlines; the experimental interpreter does not.
    let one_line = "send [USD 100] ( source = @world destination = @alice )";
    h.err(
        &h.post(
            "transactions",
            &json!({"script": {"plain": one_line}}),
            None,
        )
        .await,
        400,
        "COMPILATION_FAILED",
    );
    let interp = json!({"script": {"plain": one_line}, "runtime": "experimental-interpreter"});
    assert_eq!(
        h.create(&interp, None).await["postings"][0]["destination"],
        "alice"
    );

    // A `world` account variable as a source fails on the machine (write @world).
    let world_var = json!({"script": {"plain": transfer, "vars": {"amount": "USD 1", "src": "world", "dst": "a"}}});
    h.err(
        &h.post("transactions", &world_var, None).await,
        400,
        "COMPILATION_FAILED",
    );

    // `force` lets postings overdraw a non-world source, from the body or the query.
    let overdraw = postings("empty", "b", 3, "USD");
    h.err(
        &h.post("transactions", &overdraw, None).await,
        400,
        "INSUFFICIENT_FUND",
    );
    h.create(&with(overdraw.clone(), "force", json!(true)), None)
        .await;
    let forced = h.post("transactions?force=true", &overdraw, None).await;
    assert_eq!(
        h.ok(&forced, 200, "V2CreateTransactionResponse")["data"]["postCommitVolumes"]["empty"]["USD"]
            ["balance"],
        -6
    );
}

#[tokio::test]
async fn transaction_dates_and_volumes() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let tx = h
        .create(
            &with(
                postings("world", "a", 5, "USD"),
                "timestamp",
                json!("2025-01-15T12:00:00.1234567+02:00"),
            ),
            None,
        )
        .await;
    assert_eq!(
        tx["timestamp"], "2025-01-15T10:00:00.123456Z",
        "UTC, microseconds, Go's RFC3339Nano"
    );
    let inserted = tx["insertedAt"].as_str().unwrap();
    assert!(
        inserted.ends_with('Z') && inserted.len() <= "2025-01-15T10:00:00.123456Z".len(),
        "{inserted}"
    );
    assert!(tx.get("revertedAt").is_none());

    // Back-dated: effective volumes count only earlier-dated moves.
    let later = h.create(&postings("world", "a", 10, "USD"), None).await;
    let backdated = h
        .create(
            &with(
                postings("world", "a", 1, "USD"),
                "timestamp",
                json!("2024-01-01T00:00:00Z"),
            ),
            None,
        )
        .await;
    assert_eq!(later["postCommitVolumes"]["a"]["USD"]["balance"], 15);
    assert_eq!(backdated["postCommitVolumes"]["a"]["USD"]["balance"], 16);
    assert_eq!(
        backdated["preCommitEffectiveVolumes"]["a"]["USD"]["balance"],
        0
    );
    assert_eq!(
        backdated["postCommitEffectiveVolumes"]["a"]["USD"]["balance"],
        1
    );

    let read = h.get(&format!("transactions/{}", later["id"])).await;
    assert_eq!(h.ok(&read, 200, "V2GetTransactionResponse")["data"], later);
}
