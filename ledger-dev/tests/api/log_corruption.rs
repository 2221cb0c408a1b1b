//! The fault plan's log corruption (`corruptLogHash`, `corruptLogData`): `GET /logs`
//! serves one entry with a wrong hash, or with altered data under its original hash,
//! for tests of log verifiers; every other entry, and the stored log, stay as they were.

use serde_json::{Value, json};

use crate::support::{Harness, contracts, postings};

/// The whole log (at most one page here), oldest first, schema-checked.
async fn logs(h: &Harness) -> Vec<Value> {
    let answer = h.get("logs?pageSize=100").await;
    let cursor = h.ok(&answer, 200, "V2LogsCursorResponse")["cursor"].clone();
    let mut logs = cursor["data"].as_array().unwrap().clone();
    logs.reverse();
    logs
}

async fn three_logs(h: &Harness) {
    for amount in [100, 200, 300] {
        h.create(
            &postings("world", "merchants:1:available", amount, "USD/2"),
            None,
        )
        .await;
    }
}

#[tokio::test]
async fn a_corrupted_hash_is_served_for_that_log_only() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    three_logs(&h).await;
    let intact = logs(&h).await;

    let set = h
        .post("/_dev/faults", &json!({"corruptLogHash": 2}), None)
        .await;
    assert_eq!(set.status, 200, "{:#}", set.body);
    assert_eq!(set.body["corruptLogHash"], 2);
    let served = logs(&h).await;
    assert_ne!(served[1]["hash"], intact[1]["hash"]);
    assert_eq!(served[1]["data"], intact[1]["data"]);
    assert_eq!((&served[0], &served[2]), (&intact[0], &intact[2]));

    h.ledger.faults().clear();
    assert_eq!(
        logs(&h).await,
        intact,
        "clearing the plan serves the log as stored"
    );
}

#[tokio::test]
async fn corrupted_data_is_served_under_the_original_hash() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    three_logs(&h).await;
    let intact = logs(&h).await;

    h.ledger.faults().corrupt_log_data(3);
    let served = logs(&h).await;
    let amount = |log: &Value| log["data"]["transaction"]["postings"][0]["amount"].clone();
    assert_eq!(
        (amount(&intact[2]), amount(&served[2])),
        (json!(300), json!(301))
    );
    assert_eq!(served[2]["hash"], intact[2]["hash"]);
    assert_eq!(served[..2], intact[..2]);
    // Reads of the transaction itself are not affected: only the log is.
    let tx = h.get("transactions/3").await;
    assert_eq!(
        h.ok(&tx, 200, "V2GetTransactionResponse")["data"]["postings"][0]["amount"],
        300
    );
}
