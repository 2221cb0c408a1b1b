//! `GET /v2/{ledger}/logs`: the Formance shape (checked against `V2LogsCursorResponse`),
//! newest first with cursor pagination, the `id` / `type` / `date` filters, and the
//! hash chain.
//!
//! The chain is recomputed by [`verify_chain`], written here from the chain's
//! description (the crate README, "Logs and the hash chain") and sharing no code with
//! the dev ledger: `hash_n = SHA-256(P || J || "\n")`, `P` empty for the first log and
//! otherwise the previous hash as a JSON string plus a newline, `J` the Go JSON of
//! `{"type","data":<memento>,"date","idempotencyKey","id":0,"hash":null}`.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use outbox_ledger_dev::DevLedgerConfig;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{Harness, contracts, postings, with};

// -- an independent verifier ---------------------------------------------------

/// A JSON string as Go's `encoding/json` writes it: HTML characters escaped.
fn go_string(text: &str) -> String {
    serde_json::to_string(text)
        .unwrap()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// A `map[string]string`: keys sorted, values strings.
fn go_metadata(metadata: &Value) -> String {
    let map: BTreeMap<&String, &str> = metadata
        .as_object()
        .expect("metadata is an object")
        .iter()
        .map(|(k, v)| (k, v.as_str().expect("metadata values are strings")))
        .collect();
    let entries: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{}:{}", go_string(k), go_string(v)))
        .collect();
    format!("{{{}}}", entries.join(","))
}

/// The transaction part of a memento: postings, metadata, timestamp, reference
/// (omitted when empty), id, reverted — no dates of insertion, no volumes.
fn transaction_resume(tx: &Value) -> String {
    let postings: Vec<String> = tx["postings"]
        .as_array()
        .expect("postings")
        .iter()
        .map(|p| {
            format!(
                r#"{{"source":{},"destination":{},"amount":{},"asset":{}}}"#,
                go_string(p["source"].as_str().unwrap()),
                go_string(p["destination"].as_str().unwrap()),
                p["amount"],
                go_string(p["asset"].as_str().unwrap()),
            )
        })
        .collect();
    let reference = match tx["reference"].as_str() {
        Some(r) if !r.is_empty() => format!(r#""reference":{},"#, go_string(r)),
        _ => String::new(),
    };
    format!(
        r#"{{"postings":[{}],"metadata":{},"timestamp":{},{reference}"id":{},"reverted":{}}}"#,
        postings.join(","),
        go_metadata(&tx["metadata"]),
        go_string(tx["timestamp"].as_str().unwrap()),
        tx["id"],
        tx["reverted"],
    )
}

/// The part of a log's data that is hashed, per log type.
fn memento(log: &Value) -> String {
    let data = &log["data"];
    let target_id = |data: &Value| match &data["targetId"] {
        Value::String(s) => go_string(s),
        other => other.to_string(),
    };
    match log["type"].as_str().unwrap() {
        "NEW_TRANSACTION" => {
            let accounts: BTreeMap<&String, &Value> = data["accountMetadata"]
                .as_object()
                .unwrap()
                .iter()
                .collect();
            let accounts: Vec<String> = accounts
                .iter()
                .map(|(address, m)| format!("{}:{}", go_string(address), go_metadata(m)))
                .collect();
            format!(
                r#"{{"transaction":{},"accountMetadata":{{{}}}}}"#,
                transaction_resume(&data["transaction"]),
                accounts.join(",")
            )
        }
        "REVERTED_TRANSACTION" => format!(
            r#"{{"revertedTransactionID":{},"transaction":{}}}"#,
            data["revertedTransaction"]["id"],
            transaction_resume(&data["transaction"])
        ),
        "SET_METADATA" => format!(
            r#"{{"targetType":{},"targetId":{},"metadata":{}}}"#,
            go_string(data["targetType"].as_str().unwrap()),
            target_id(data),
            go_metadata(&data["metadata"])
        ),
        "DELETE_METADATA" => format!(
            r#"{{"targetType":{},"targetId":{},"key":{}}}"#,
            go_string(data["targetType"].as_str().unwrap()),
            target_id(data),
            go_string(data["key"].as_str().unwrap())
        ),
        other => panic!("no memento rule for log type {other}"),
    }
}

/// The hash `log` must carry when it follows a log hashed `previous`.
fn expected_hash(previous: Option<&str>, log: &Value) -> String {
    let mut digest = Sha256::new();
    if let Some(previous) = previous {
        digest.update(format!("\"{previous}\"\n"));
    }
    digest.update(format!(
        r#"{{"type":{},"data":{},"date":{},"idempotencyKey":{},"id":0,"hash":null}}"#,
        go_string(log["type"].as_str().unwrap()),
        memento(log),
        go_string(log["date"].as_str().unwrap()),
        go_string(log["idempotencyKey"].as_str().unwrap_or_default()),
    ));
    digest.update("\n");
    STANDARD.encode(digest.finalize())
}

/// Checks a whole log, oldest first, from the ledger's first entry.
fn verify_chain(logs: &[Value]) -> Result<(), String> {
    let mut previous: Option<String> = None;
    for (i, log) in logs.iter().enumerate() {
        let id = log["id"].as_u64().unwrap();
        if id != i as u64 + 1 {
            return Err(format!("chain BROKEN at log {id}: expected log {}", i + 1));
        }
        let expected = expected_hash(previous.as_deref(), log);
        let stated = log["hash"].as_str().unwrap_or_default();
        if stated != expected {
            return Err(format!(
                "chain BROKEN at log {id}: hash {stated}, recomputed {expected}"
            ));
        }
        previous = Some(expected);
    }
    Ok(())
}

// -- helpers -----------------------------------------------------------------------

/// One log of each type the dev ledger writes, seven in all:
/// 1 payout with a reference, a key and HTML characters in its metadata; 2 a spend
/// with account metadata; 3 the revert of 2; 4 a rejection notice on an account;
/// 5 transaction metadata; 6 its deletion; 7 an account metadata deletion.
async fn write_history(h: &Harness) {
    let body = with(
        with(
            postings("world", "merchants:4471:available", 48_500_000, "USD/2"),
            "reference",
            json!("payout:settlement-2026-10-07:4471"),
        ),
        "metadata",
        json!({"event_type": "payout.requested", "note": "<a&b>"}),
    );
    h.create(&body, Some("evt-1")).await;
    let spend = with(
        postings(
            "merchants:4471:available",
            "merchants:4471:payouts:pending",
            500,
            "USD/2",
        ),
        "accountMetadata",
        json!({"merchants:4471:payouts:pending": {"z": "1", "a": "2"}}),
    );
    let spent = h.create(&spend, None).await;
    let revert = h
        .post_raw(
            &format!("transactions/{}/revert", spent["id"]),
            "",
            Some("rv"),
        )
        .await;
    h.ok(&revert, 201, "V2RevertTransactionResponse");
    let notice = json!({"outbox_event_id": "e9", "outbox_rejected_code": "INSUFFICIENT_FUND"});
    let answer = h
        .post(
            "accounts/merchants:4471:available/metadata",
            &notice,
            Some("md"),
        )
        .await;
    assert_eq!(answer.status, 204, "{:#}", answer.body);
    let answer = h
        .post("transactions/1/metadata", &json!({"k": "v"}), None)
        .await;
    assert_eq!(answer.status, 204, "{:#}", answer.body);
    let answer = h
        .send(h.http.delete(h.url("transactions/1/metadata/k")))
        .await;
    assert_eq!(answer.status, 204, "{:#}", answer.body);
    let answer = h
        .send(
            h.http
                .delete(h.url("accounts/merchants:4471:available/metadata/outbox_event_id")),
        )
        .await;
    assert_eq!(answer.status, 204, "{:#}", answer.body);
}

/// One page of `/logs` (schema-checked).
async fn page(h: &Harness, query: &str) -> Value {
    let answer = h.get(&format!("logs{query}")).await;
    h.ok(&answer, 200, "V2LogsCursorResponse")["cursor"].clone()
}

fn ids(page: &Value) -> Vec<u64> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_u64().unwrap())
        .collect()
}

/// The whole log, oldest first, read page by page through the cursor.
async fn all_logs(h: &Harness) -> Vec<Value> {
    let mut logs = Vec::new();
    let mut query = "?pageSize=2".to_owned();
    for _ in 0..1_000 {
        let cursor = page(h, &query).await;
        logs.extend(cursor["data"].as_array().unwrap().iter().cloned());
        match cursor["next"].as_str() {
            Some(next) => query = format!("?cursor={next}"),
            None => {
                logs.reverse();
                return logs;
            }
        }
    }
    panic!("the cursor never ended");
}

// -- tests -------------------------------------------------------------------------

#[tokio::test]
async fn logs_are_listed_newest_first_in_the_formance_shape() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let empty = page(&h, "").await;
    assert_eq!(ids(&empty), Vec::<u64>::new());
    assert_eq!(empty["hasMore"], false);

    write_history(&h).await;
    let cursor = page(&h, "").await;
    assert_eq!(ids(&cursor), [7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(
        (cursor["pageSize"].clone(), cursor["hasMore"].clone()),
        (json!(15), json!(false))
    );
    let logs: Vec<Value> = cursor["data"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .cloned()
        .collect();
    let types: Vec<&str> = logs.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "NEW_TRANSACTION",
            "NEW_TRANSACTION",
            "REVERTED_TRANSACTION",
            "SET_METADATA",
            "SET_METADATA",
            "DELETE_METADATA",
            "DELETE_METADATA"
        ]
    );
    for log in &logs {
        c.validate("V2Log", log);
        let hash = STANDARD.decode(log["hash"].as_str().unwrap()).unwrap();
        assert_eq!(hash.len(), 32, "{log:#}");
        assert!(log["date"].as_str().unwrap().ends_with('Z'), "{log:#}");
    }

    // The data is the full transaction as the API renders it, with what it carried.
    let first = &logs[0];
    assert_eq!(first["idempotencyKey"], "evt-1");
    assert!(!first["idempotencyHash"].as_str().unwrap().is_empty());
    let tx = &first["data"]["transaction"];
    assert_eq!(tx["id"], 1);
    assert_eq!(tx["reference"], "payout:settlement-2026-10-07:4471");
    assert_eq!(tx["postings"][0]["amount"], 48_500_000);
    assert_eq!(tx["metadata"]["note"], "<a&b>");
    assert_eq!(
        tx["postCommitVolumes"]["merchants:4471:available"]["USD/2"]["balance"],
        48_500_000
    );
    assert_eq!(first["data"]["accountMetadata"], json!({}));
    let read = h.get("transactions/1").await;
    let mut current = h.ok(&read, 200, "V2GetTransactionResponse")["data"].clone();
    // The log keeps the snapshot of commit time (metadata was added and removed since).
    current["updatedAt"] = tx["updatedAt"].clone();
    assert_eq!(&current, tx);

    assert_eq!(logs[1]["idempotencyKey"], "");
    assert_eq!(
        logs[1]["data"]["accountMetadata"],
        json!({"merchants:4471:payouts:pending": {"a": "2", "z": "1"}})
    );
    let reverted = &logs[2]["data"];
    assert_eq!(reverted["revertedTransaction"]["id"], 2);
    assert_eq!(reverted["revertedTransaction"]["reverted"], true);
    assert_eq!(reverted["transaction"]["id"], 3);
    assert_eq!(
        reverted["transaction"]["metadata"]["com.formance.spec/state/reverts"],
        "2"
    );
    assert_eq!(
        logs[3]["data"],
        json!({"targetType": "ACCOUNT", "targetId": "merchants:4471:available",
               "metadata": {"outbox_event_id": "e9", "outbox_rejected_code": "INSUFFICIENT_FUND"}})
    );
    assert_eq!(
        logs[4]["data"],
        json!({"targetType": "TRANSACTION", "targetId": 1, "metadata": {"k": "v"}})
    );
    assert_eq!(
        logs[5]["data"],
        json!({"targetType": "TRANSACTION", "targetId": 1, "key": "k"})
    );

    // Only accepted writes are logged: a replay, a dry run and a refusal add nothing.
    let replay = h
        .post(
            "accounts/merchants:4471:available/metadata",
            &json!({"outbox_event_id": "e9", "outbox_rejected_code": "INSUFFICIENT_FUND"}),
            Some("md"),
        )
        .await;
    assert!(replay.hit());
    let dry = h
        .post(
            "transactions?dryRun=true",
            &postings("world", "a", 1, "USD/2"),
            None,
        )
        .await;
    assert_eq!(dry.status, 200);
    let refused = h
        .post(
            "transactions",
            &postings("merchants:4471:available", "a", 1 << 40, "USD/2"),
            None,
        )
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(ids(&page(&h, "?pageSize=1").await), [7]);

    h.err(&h.get("/v2/nope/logs").await, 404, "LEDGER_NOT_FOUND");
}

#[tokio::test]
async fn logs_page_through_a_cursor_that_keeps_the_filter() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    write_history(&h).await;

    let first = page(&h, "?pageSize=3").await;
    assert_eq!(
        (ids(&first), first["hasMore"].clone()),
        (vec![7, 6, 5], json!(true))
    );
    let next = first["next"].as_str().unwrap();
    let second = page(&h, &format!("?cursor={next}")).await;
    assert_eq!(
        (ids(&second), second["pageSize"].clone()),
        (vec![4, 3, 2], json!(3))
    );
    let next = second["next"].as_str().unwrap();
    let last = page(&h, &format!("?cursor={next}")).await;
    assert_eq!(
        (ids(&last), last["hasMore"].clone()),
        (vec![1], json!(false))
    );
    assert!(last.get("next").is_none(), "{last:#}");
    // A page size above the maximum is capped, as upstream does.
    assert_eq!(page(&h, "?pageSize=5000").await["pageSize"], 100);
    h.err(&h.get("logs?pageSize=many").await, 400, "VALIDATION");
    h.err(&h.get("logs?cursor=not-a-cursor").await, 400, "VALIDATION");

    // A window of ids, as the Formance client reads it; the cursor carries the filter.
    let window = json!({"$and": [{"$gt": {"id": 1}}, {"$lte": {"id": 6}}]});
    let answer = h.get_with_body("logs?pageSize=2", &window).await;
    let cursor = h.ok(&answer, 200, "V2LogsCursorResponse")["cursor"].clone();
    assert_eq!(ids(&cursor), [6, 5]);
    let mut seen = ids(&cursor);
    let mut next = cursor["next"].as_str().map(str::to_owned);
    while let Some(text) = next {
        let cursor = page(&h, &format!("?cursor={text}")).await;
        seen.extend(ids(&cursor));
        next = cursor["next"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, [6, 5, 4, 3, 2]);
}

#[tokio::test]
async fn logs_filter_on_id_type_and_date() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    write_history(&h).await;
    let filtered = |filter: Value| {
        let h = &h;
        async move {
            let query = serde_json::to_string(&filter).unwrap();
            let encoded: String = url_encode(&query);
            ids(&page(h, &format!("?query={encoded}")).await)
        }
    };
    assert_eq!(filtered(json!({"$gt": {"id": 5}})).await, [7, 6]);
    assert_eq!(filtered(json!({"$gte": {"id": 5}})).await, [7, 6, 5]);
    assert_eq!(filtered(json!({"$lt": {"id": 3}})).await, [2, 1]);
    assert_eq!(filtered(json!({"$match": {"id": 4}})).await, [4]);
    assert_eq!(
        filtered(json!({"$match": {"type": "SET_METADATA"}})).await,
        [5, 4]
    );
    assert_eq!(
        filtered(json!({"$not": {"$match": {"type": "NEW_TRANSACTION"}}})).await,
        [7, 6, 5, 4, 3]
    );
    assert_eq!(
        filtered(
            json!({"$or": [{"$match": {"id": 1}}, {"$match": {"type": "REVERTED_TRANSACTION"}}]})
        )
        .await,
        [3, 1]
    );
    let third = page(&h, "?query=%7B%22%24match%22%3A%7B%22id%22%3A3%7D%7D").await;
    let date = third["data"][0]["date"].as_str().unwrap().to_owned();
    let from_third = filtered(json!({"$gte": {"date": date}})).await;
    assert_eq!(from_third.last(), Some(&3), "{from_third:?}");
    assert_eq!(filtered(json!({"$lt": {"date": date}})).await, [2, 1]);
    assert_eq!(
        filtered(json!({"$gt": {"date": "2999-01-01T00:00:00Z"}})).await,
        Vec::<u64>::new()
    );

    for bad in [
        json!({"$match": {"reference": "x"}}),
        json!({"$gt": {"type": "NEW_TRANSACTION"}}),
        json!({"$gt": {"id": "three"}}),
        json!({"$lt": {"date": "yesterday"}}),
        json!({"$like": {"type": "NEW%"}}),
    ] {
        let message = h.err(&h.get_with_body("logs", &bad).await, 400, "VALIDATION");
        assert!(message.contains("query"), "{bad}: {message}");
    }
    h.err(&h.get("logs?sort=id:asc").await, 400, "VALIDATION");
}

#[tokio::test]
async fn log_hashes_chain_and_a_tampered_log_breaks_the_chain() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    write_history(&h).await;
    // A bulk's logs chain too, and their ids are the bulk answer's `logID`s.
    let bulk = json!([
        {"action": "CREATE_TRANSACTION", "ik": "b1", "data": postings("world", "b:1", 10, "USD/2")},
        {"action": "ADD_METADATA", "data": {"targetType": "ACCOUNT", "targetId": "b:1", "metadata": {"x": "y"}}},
    ]);
    let answer = h.post("_bulk", &bulk, None).await;
    let results = h.ok(&answer, 200, "V2BulkResponse")["data"].clone();
    assert_eq!(
        (results[0]["logID"].clone(), results[1]["logID"].clone()),
        (json!(8), json!(9))
    );

    let logs = all_logs(&h).await;
    assert_eq!(logs.len(), 9);
    verify_chain(&logs).unwrap();
    let hashes: std::collections::HashSet<&str> =
        logs.iter().map(|l| l["hash"].as_str().unwrap()).collect();
    assert_eq!(hashes.len(), logs.len(), "every hash differs");

    let tampered = |edit: &dyn Fn(&mut Vec<Value>)| {
        let mut copy = logs.clone();
        edit(&mut copy);
        verify_chain(&copy).unwrap_err()
    };
    let amount =
        tampered(&|l| l[0]["data"]["transaction"]["postings"][0]["amount"] = json!(48_500_001));
    assert!(amount.starts_with("chain BROKEN at log 1:"), "{amount}");
    let notice = tampered(&|l| l[3]["data"]["metadata"]["outbox_rejected_code"] = json!("NONE"));
    assert!(notice.starts_with("chain BROKEN at log 4:"), "{notice}");
    let key = tampered(&|l| l[2]["idempotencyKey"] = json!("other"));
    assert!(key.starts_with("chain BROKEN at log 3:"), "{key}");
    let dropped = tampered(&|l| {
        l.remove(2);
        for (i, log) in l.iter_mut().enumerate() {
            log["id"] = json!(i + 1);
        }
    });
    assert!(dropped.starts_with("chain BROKEN at log 3:"), "{dropped}");
    let rehashed = tampered(&|l| {
        l[5]["data"]["key"] = json!("other");
        l[5]["hash"] = json!(expected_hash(l[4]["hash"].as_str(), &l[5]));
    });
    assert!(rehashed.starts_with("chain BROKEN at log 7:"), "{rehashed}");
}

#[tokio::test]
async fn persisted_logs_keep_their_hashes_after_a_restart() {
    let Some(c) = contracts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = DevLedgerConfig {
        data: Some(dir.path().join("ledger.sqlite")),
        ..DevLedgerConfig::default()
    };
    let h = Harness::start_with(c, config.clone()).await;
    write_history(&h).await;
    let before = all_logs(&h).await;
    h.ledger.shutdown().await;

    let h = Harness::start_with(c, config).await;
    let after = all_logs(&h).await;
    assert_eq!(after, before);
    h.create(&postings("world", "merchants:1", 5, "USD/2"), None)
        .await;
    let grown = all_logs(&h).await;
    assert_eq!(grown.len(), 8);
    assert_eq!(grown[..7], before[..]);
    verify_chain(&grown).unwrap();
}

/// Percent-encodes a query parameter value.
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
