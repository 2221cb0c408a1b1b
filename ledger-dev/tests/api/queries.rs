//! Accounts, aggregate balances and transaction lists.

use serde_json::json;

use crate::support::{Harness, contracts, postings, with};

#[tokio::test]
async fn account_volumes() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.create(
        &postings("world", "merchants:4471:available", 1000, "USD/2"),
        None,
    )
    .await;
    h.create(
        &postings(
            "merchants:4471:available",
            "merchants:4471:payouts:pending",
            300,
            "USD/2",
        ),
        None,
    )
    .await;
    let answer = h
        .get("accounts/merchants:4471:available?expand=volumes")
        .await;
    let account = h.ok(&answer, 200, "V2AccountResponse")["data"].clone();
    assert_eq!(account["address"], "merchants:4471:available");
    assert_eq!(
        account["volumes"]["USD/2"],
        json!({"input": 1000, "output": 300, "balance": 700})
    );
    assert!(account["firstUsage"].is_string() && account["insertionDate"].is_string());

    let both = h
        .get("accounts/world?expand=volumes,effectiveVolumes")
        .await;
    let world = h.ok(&both, 200, "V2AccountResponse")["data"].clone();
    assert_eq!(world["volumes"]["USD/2"]["balance"], -1000);
    assert_eq!(world["effectiveVolumes"], world["volumes"]);

    h.err(&h.get("accounts/never:used").await, 404, "NOT_FOUND");
    h.err(&h.get("accounts/not%20valid").await, 400, "VALIDATION");
}

#[tokio::test]
async fn aggregate_balances_match_address_patterns() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.create(
        &postings("world", "merchants:4471:available", 1000, "USD/2"),
        None,
    )
    .await;
    h.create(
        &postings(
            "merchants:4471:available",
            "merchants:4471:payouts:pending",
            300,
            "USD/2",
        ),
        None,
    )
    .await;
    h.create(
        &postings("world", "merchants:9:available", 50, "USD/2"),
        None,
    )
    .await;
    h.create(&postings("world", "merchants:9:available", 7, "EUR"), None)
        .await;

    assert_eq!(
        h.balances("merchants:4471:available").await,
        json!({"USD/2": 700})
    );
    assert_eq!(
        h.balances("merchants:4471:").await,
        json!({"USD/2": 700}),
        "empty segment: fixed depth"
    );
    assert_eq!(
        h.balances("merchants:4471:...").await,
        json!({"USD/2": 1000}),
        "trailing ...: any depth"
    );
    assert_eq!(
        h.balances("merchants::available").await,
        json!({"USD/2": 750, "EUR": 7})
    );
    assert_eq!(h.balances("nobody").await, json!({}));

    // Without a filter every account counts, world included: everything sums to 0.
    let all = h.get("aggregate/balances").await;
    assert_eq!(
        h.ok(&all, 200, "V2AggregateBalancesResponse")["data"],
        json!({"USD/2": 0, "EUR": 0})
    );

    // The filter may also come as ?query=, and combine with $or / $and / $not.
    let filter = json!({"$or": [
        {"$match": {"address": "merchants:9:available"}},
        {"$match": {"address": "merchants:4471:payouts:pending"}},
    ]});
    let encoded: String = filter
        .to_string()
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    let answer = h.get(&format!("aggregate/balances?query={encoded}")).await;
    assert_eq!(
        h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"],
        json!({"USD/2": 350, "EUR": 7})
    );
    let not_world = json!({"$and": [{"$match": {"address": "merchants:..."}}, {"$not": {"$match": {"address": "merchants:9:..."}}}]});
    let answer = h.get_with_body("aggregate/balances", &not_world).await;
    assert_eq!(
        h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"],
        json!({"USD/2": 1000})
    );

    let bad = h
        .get_with_body("aggregate/balances", &json!({"$like": {"address": "x"}}))
        .await;
    h.err(&bad, 400, "VALIDATION");
    h.err(
        &h.get("/v2/nope/aggregate/balances").await,
        404,
        "LEDGER_NOT_FOUND",
    );
}

#[tokio::test]
async fn list_transactions_by_reference_metadata_and_pages() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    for i in 0..20 {
        let body = with(
            with(
                postings("world", "m:1", i + 1, "USD"),
                "reference",
                json!(format!("ref-{i}")),
            ),
            "metadata",
            json!({"outbox_event_id": format!("evt-{i}")}),
        );
        h.create(&body, None).await;
    }
    let by_ref = h.list(&json!({"$match": {"reference": "ref-7"}})).await;
    assert_eq!(by_ref.len(), 1);
    assert_eq!(by_ref[0]["postings"][0]["amount"], 8);
    let by_meta = h
        .list(&json!({"$match": {"metadata[outbox_event_id]": "evt-12"}}))
        .await;
    assert_eq!(by_meta.len(), 1);
    assert_eq!(by_meta[0]["reference"], "ref-12");
    assert!(
        h.list(&json!({"$match": {"reference": "missing"}}))
            .await
            .is_empty()
    );

    // Default page of 15, newest first, then the cursor.
    let answer = h.get("transactions").await;
    let page = h.ok(&answer, 200, "V2TransactionsCursorResponse")["cursor"].clone();
    assert_eq!(page["pageSize"], 15);
    assert_eq!(page["hasMore"], true);
    let data = page["data"].as_array().unwrap();
    assert_eq!(data.len(), 15);
    assert_eq!(data[0]["id"], 20);
    let next = page["next"].as_str().unwrap();
    let answer = h.get(&format!("transactions?cursor={next}")).await;
    let page = h.ok(&answer, 200, "V2TransactionsCursorResponse")["cursor"].clone();
    assert_eq!(page["hasMore"], false);
    assert_eq!(page["data"].as_array().unwrap().len(), 5);
    assert_eq!(page["data"][4]["id"], 1);

    let answer = h.get("transactions?pageSize=500").await;
    assert_eq!(
        h.ok(&answer, 200, "V2TransactionsCursorResponse")["cursor"]["pageSize"],
        100
    );
    let query = "%7B%22%24match%22%3A%7B%22reference%22%3A%22ref-3%22%7D%7D";
    let answer = h
        .get(&format!("transactions?pageSize=2&query={query}"))
        .await;
    let page = h.ok(&answer, 200, "V2TransactionsCursorResponse")["cursor"].clone();
    assert_eq!(page["data"][0]["reference"], "ref-3");
    assert_eq!(page["hasMore"], false);
    h.err(&h.get("transactions?pageSize=abc").await, 400, "VALIDATION");
    h.err(
        &h.get("transactions?cursor=not-a-cursor").await,
        400,
        "VALIDATION",
    );
}
