//! `GET /transactions` orders and cursors, `HEAD /transactions` counts, and every
//! query option the dev ledger does not implement refused by name.

use serde_json::{Value, json};

use crate::support::{Harness, contracts, postings, with};

/// The ids of a list answer, and its `next` cursor when it has more.
fn ids_and_next(h: &Harness, answer: &crate::support::Answer) -> (Vec<u64>, Option<String>) {
    let page = h.ok(answer, 200, "V2TransactionsCursorResponse")["cursor"].clone();
    let ids = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tx| tx["id"].as_u64().unwrap())
        .collect();
    let next = page["next"].as_str().map(str::to_owned);
    assert_eq!(page["hasMore"], next.is_some(), "{page:#}");
    (ids, next)
}

/// Every page from `first`, following the cursors (bounded).
async fn all_pages(h: &Harness, first: &str) -> Vec<Vec<u64>> {
    let mut pages = Vec::new();
    let (ids, mut next) = ids_and_next(h, &h.get(first).await);
    pages.push(ids);
    for _ in 0..100 {
        let Some(cursor) = next else { return pages };
        let (ids, more) = ids_and_next(h, &h.get(&format!("transactions?cursor={cursor}")).await);
        pages.push(ids);
        next = more;
    }
    panic!("the cursors never ended: {pages:?}");
}

async fn seven(h: &Harness) {
    for i in 1..=7 {
        h.create(&postings("world", "m:1", i, "USD"), None).await;
    }
}

#[tokio::test]
async fn newest_first_by_default_ascending_on_request_across_pages() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    seven(&h).await;

    let descending = vec![vec![7, 6, 5], vec![4, 3, 2], vec![1]];
    let ascending = vec![vec![1, 2, 3], vec![4, 5, 6], vec![7]];
    assert_eq!(all_pages(&h, "transactions?pageSize=3").await, descending);
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&sort=id:desc").await,
        descending
    );
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&sort=id").await,
        descending,
        "a sort without a direction keeps the default direction"
    );
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&reverse=true").await,
        ascending
    );
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&sort=id:asc").await,
        ascending
    );
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&reverse=true&sort=id:desc").await,
        descending,
        "sort overrides reverse"
    );

    // A cursor continues in its own order, past what was committed meanwhile.
    let (ids, next) = ids_and_next(&h, &h.get("transactions?pageSize=4&sort=id:asc").await);
    assert_eq!(ids, [1, 2, 3, 4]);
    h.create(&postings("world", "m:1", 8, "USD"), None).await;
    let (ids, next) = ids_and_next(
        &h,
        &h.get(&format!("transactions?cursor={}", next.unwrap()))
            .await,
    );
    assert_eq!(ids, [5, 6, 7, 8]);
    assert!(next.is_none());
    let (ids, next) = ids_and_next(&h, &h.get("transactions?pageSize=4").await);
    assert_eq!(ids, [8, 7, 6, 5]);
    // pageSize may come with a cursor and changes the following pages' size.
    let (ids, _) = ids_and_next(
        &h,
        &h.get(&format!("transactions?cursor={}&pageSize=2", next.unwrap()))
            .await,
    );
    assert_eq!(ids, [4, 3]);

    // An id window, as a client pages "after id N": ascending from N + 1.
    let after_five = json!({"$gt": {"id": 5}});
    let answer = h
        .get_with_body("transactions?sort=id:asc&pageSize=2", &after_five)
        .await;
    let (ids, next) = ids_and_next(&h, &answer);
    assert_eq!(ids, [6, 7]);
    let (ids, next) = ids_and_next(
        &h,
        &h.get(&format!("transactions?cursor={}", next.unwrap()))
            .await,
    );
    assert_eq!((ids, next), (vec![8], None));
    let window = json!({"$and": [{"$gte": {"id": 2}}, {"$lt": {"id": 4}}]});
    assert_eq!(
        ids_and_next(&h, &h.get_with_body("transactions", &window).await).0,
        [3, 2]
    );
    let empty = json!({"$and": [{"$gt": {"id": 4}}, {"$lt": {"id": 5}}]});
    assert_eq!(
        ids_and_next(&h, &h.get_with_body("transactions", &empty).await).0,
        Vec::<u64>::new()
    );
    h.err(
        &h.get_with_body("transactions", &json!({"$gt": {"reference": "x"}}))
            .await,
        400,
        "VALIDATION",
    );
}

#[tokio::test]
async fn ordered_by_effective_date_or_insertion_date() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    // Ids 1..4 dated out of id order; 2 and 4 share a timestamp (ties go by id).
    for (amount, timestamp) in [
        (1, "2024-03-01T00:00:00Z"),
        (2, "2024-01-01T00:00:00Z"),
        (3, "2024-02-01T00:00:00Z"),
        (4, "2024-01-01T00:00:00Z"),
    ] {
        let body = with(
            postings("world", "m:1", amount, "USD"),
            "timestamp",
            json!(timestamp),
        );
        h.create(&body, None).await;
    }
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&sort=timestamp:asc").await,
        [vec![2, 4, 3], vec![1]]
    );
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&order=effective").await,
        [vec![1, 3, 4], vec![2]],
        "the deprecated order=effective: by timestamp, newest first"
    );
    assert_eq!(
        all_pages(&h, "transactions?pageSize=2&order=effective&reverse=true").await,
        [vec![2, 4], vec![3, 1]]
    );
    // Inserted in id order.
    assert_eq!(
        all_pages(&h, "transactions?pageSize=3&sort=insertedAt:asc").await,
        [vec![1, 2, 3], vec![4]]
    );
    // With a pit (by timestamp) and an order.
    assert_eq!(
        all_pages(
            &h,
            "transactions?pageSize=1&sort=timestamp:desc&pit=2024-02-15T00:00:00Z"
        )
        .await,
        [vec![3], vec![4], vec![2]]
    );
}

#[tokio::test]
async fn head_counts_what_the_list_would_show() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    seven(&h).await;
    let backdated = with(
        postings("world", "m:2", 1, "USD"),
        "timestamp",
        json!("2020-01-01T00:00:00Z"),
    );
    h.create(&backdated, None).await;

    assert_eq!(h.count(&h.head("transactions", None).await), 8);
    let to_m2 = json!({"$match": {"destination": "m:2"}});
    assert_eq!(h.count(&h.head("transactions", Some(&to_m2)).await), 1);
    let encoded: String = json!({"$gt": {"id": 5}})
        .to_string()
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    assert_eq!(
        h.count(&h.head(&format!("transactions?query={encoded}"), None).await),
        3
    );
    assert_eq!(
        h.count(&h.head("transactions?pit=2021-01-01T00:00:00Z", None).await),
        1
    );
    assert_eq!(h.count(&h.head("/v2/default/accounts", None).await), 3);
    assert_eq!(h.head("/v2/nope/transactions", None).await.status, 404);
    // A refused option is a 400 (a HEAD answer has no body to name it in).
    assert_eq!(h.head("transactions?reverse=true", None).await.status, 400);
    assert_eq!(h.head("transactions?pit=soon", None).await.status, 400);
}

#[tokio::test]
async fn options_not_implemented_are_refused_by_name() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    seven(&h).await;
    let (_, cursor) = ids_and_next(&h, &h.get("transactions?pageSize=2").await);
    let cursor = cursor.unwrap();
    let cases: Vec<(String, &str)> = vec![
        ("transactions?oot=2024-01-01T00:00:00Z".into(), "oot"),
        ("transactions?sort=updatedAt:asc".into(), "updatedAt"),
        ("transactions?sort=amount".into(), "amount"),
        ("transactions?sort=id:sideways".into(), "sideways"),
        ("transactions?order=id".into(), "order"),
        ("transactions?reverse=maybe".into(), "reverse"),
        ("transactions?expand=everything".into(), "everything"),
        ("transactions?pit=yesterday".into(), "pit"),
        ("transactions?pageSize=-1".into(), "pageSize"),
        (
            format!("transactions?cursor={cursor}&reverse=true"),
            "reverse",
        ),
        (format!("transactions?cursor={cursor}&sort=id:asc"), "sort"),
        ("transactions?cursor=garbage".into(), "cursor"),
        ("aggregate/balances?oot=2024-01-01T00:00:00Z".into(), "oot"),
        ("aggregate/balances?pageSize=5".into(), "pageSize"),
        (
            "aggregate/balances?useInsertionDate=perhaps".into(),
            "useInsertionDate",
        ),
        (
            "accounts/m:1?useInsertionDate=true".into(),
            "useInsertionDate",
        ),
        ("accounts/m:1?expand=balances".into(), "balances"),
        ("accounts/m:1?pit=later".into(), "pit"),
        ("accounts?sort=balance".into(), "balance"),
        ("accounts?sort=address:up".into(), "up"),
        ("accounts?useInsertionDate=true".into(), "useInsertionDate"),
        ("accounts?expand=everything".into(), "everything"),
    ];
    for (path, named) in cases {
        let message = h.err(&h.get(&path).await, 400, "VALIDATION");
        assert!(
            message.contains(named),
            "{path}: the refusal names {named:?}: {message}"
        );
    }
    // The project's own client sends these; they must keep working.
    let filter = json!({"$match": {"metadata[outbox_event_id]": "x"}});
    let encoded: String = filter
        .to_string()
        .bytes()
        .map(|b| format!("%{b:02X}"))
        .collect();
    let answer = h
        .get_with_body(&format!("transactions?pageSize=2&query={encoded}"), &filter)
        .await;
    assert_eq!(ids_and_next(&h, &answer).0, Vec::<u64>::new());
    let answer = h.get("accounts/m:1?expand=volumes").await;
    h.ok(&answer, 200, "V2AccountResponse");
}

#[tokio::test]
async fn accounts_are_listed_by_address_in_pages() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    for address in ["b:1", "a:1", "c:1", "a:2"] {
        h.create(&postings("world", address, 1, "USD"), None).await;
    }
    let addresses = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["address"].as_str().unwrap().to_owned())
            .collect()
    };
    let answer = h.get("accounts?pageSize=2&expand=volumes").await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(addresses(&page), ["a:1", "a:2"]);
    assert_eq!(page["data"][0]["volumes"]["USD"]["balance"], 1);
    let next = page["next"].as_str().unwrap();
    let answer = h.get(&format!("accounts?cursor={next}")).await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(addresses(&page), ["b:1", "c:1"]);
    assert!(
        page["data"][0]["volumes"].is_object(),
        "the cursor keeps expand"
    );
    let next = page["next"].as_str().unwrap();
    let answer = h.get(&format!("accounts?cursor={next}")).await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(addresses(&page), ["world"]);
    assert_eq!(page["hasMore"], false);

    let answer = h.get("accounts?sort=address:desc&pageSize=3").await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(addresses(&page), ["world", "c:1", "b:1"]);
    assert!(page["data"][0].get("volumes").is_none());
    let answer = h
        .get_with_body("accounts", &json!({"$match": {"address": "a:"}}))
        .await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(addresses(&page), ["a:1", "a:2"]);
}
