//! Reads at a point in time (`pit`): aggregate balances by effective date and by
//! insertion date, account volumes, metadata and transactions as they were, and the
//! features Formance needs for them.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use outbox_ledger_dev::DevLedgerConfig;
use serde_json::{Value, json};

use crate::support::{Harness, contracts, postings, with};

const ACCOUNT: &str = "merchants:4471:available";

fn date(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("a date string"))
        .expect("an RFC 3339 date")
        .with_timezone(&Utc)
}

fn text(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Aggregate balances of `address` at `pit`, by insertion date when `insertion`.
async fn balances_at(h: &Harness, address: &str, pit: DateTime<Utc>, insertion: bool) -> Value {
    let mut path = format!("aggregate/balances?pit={}", text(pit));
    if insertion {
        path.push_str("&useInsertionDate=true");
    }
    let answer = h
        .get_with_body(&path, &json!({"$match": {"address": address}}))
        .await;
    h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"].clone()
}

/// A ledger with one transaction posted now (1000 to [`ACCOUNT`]), then one posted
/// after `mid` but dated a day before the first (250): the backdated one.
struct Backdated {
    h: Harness,
    first: Value,
    backdated: Value,
    /// The first transaction's insertion date: after it, before the backdated one.
    mid: DateTime<Utc>,
}

async fn backdated(config: DevLedgerConfig) -> Backdated {
    let c = contracts().expect("checked by the caller");
    let h = Harness::start_with(c, config).await;
    let first = h
        .create(&postings("world", ACCOUNT, 1000, "USD/2"), None)
        .await;
    let mid = date(&first["insertedAt"]);
    // Insertion dates have microseconds: make sure the next one is later.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let day_before = date(&first["timestamp"]) - TimeDelta::days(1);
    let backdated = h
        .create(
            &with(
                postings("world", ACCOUNT, 250, "USD/2"),
                "timestamp",
                json!(text(day_before)),
            ),
            None,
        )
        .await;
    Backdated {
        h,
        first,
        backdated,
        mid,
    }
}

#[tokio::test]
async fn a_backdated_transaction_keeps_its_date_and_is_inserted_now() {
    if contracts().is_none() {
        return;
    }
    let Backdated {
        first,
        backdated,
        mid,
        ..
    } = backdated(DevLedgerConfig::default()).await;
    let timestamp = date(&backdated["timestamp"]);
    let inserted = date(&backdated["insertedAt"]);
    assert_eq!(timestamp, date(&first["timestamp"]) - TimeDelta::days(1));
    assert!(
        inserted > mid,
        "inserted now, after the first: {backdated:#}"
    );
    assert!(timestamp < inserted);
}

#[tokio::test]
async fn balances_at_a_pit_by_effective_date_and_by_insertion_date() {
    if contracts().is_none() {
        return;
    }
    let Backdated { h, first, mid, .. } = backdated(DevLedgerConfig::default()).await;

    // Between the two insertions: by effective date both count, by insertion date
    // only the first; the difference is exactly the backdated amount.
    let effective = balances_at(&h, ACCOUNT, mid, false).await;
    let inserted = balances_at(&h, ACCOUNT, mid, true).await;
    assert_eq!(effective, json!({"USD/2": 1250}));
    assert_eq!(inserted, json!({"USD/2": 1000}));
    assert_eq!(
        effective["USD/2"].as_i64().unwrap() - inserted["USD/2"].as_i64().unwrap(),
        250
    );
    // world is the other side of both.
    assert_eq!(
        balances_at(&h, "world", mid, false).await,
        json!({"USD/2": -1250})
    );
    // The other spelling upstream takes.
    let answer = h
        .get_with_body(
            &format!("aggregate/balances?pit={}&use_insertion_date=1", text(mid)),
            &json!({"$match": {"address": ACCOUNT}}),
        )
        .await;
    assert_eq!(
        h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"],
        inserted
    );

    // Half a day before the first: only the backdated move is dated by then, and
    // nothing was inserted by then: an empty answer, not a zero.
    let before = date(&first["timestamp"]) - TimeDelta::hours(12);
    assert_eq!(
        balances_at(&h, ACCOUNT, before, false).await,
        json!({"USD/2": 250})
    );
    assert_eq!(balances_at(&h, ACCOUNT, before, true).await, json!({}));
    // Before anything: empty both ways.
    let long_ago = date(&first["timestamp"]) - TimeDelta::days(30);
    assert_eq!(balances_at(&h, ACCOUNT, long_ago, false).await, json!({}));

    // An address matching nothing is empty at any pit, as without one.
    assert_eq!(balances_at(&h, "nobody:here", mid, false).await, json!({}));
    assert_eq!(balances_at(&h, "nobody:here", mid, true).await, json!({}));
    // Patterns work at a pit too.
    assert_eq!(
        balances_at(&h, "merchants:...", mid, true).await,
        json!({"USD/2": 1000})
    );
    // Without pit: current balances, useInsertionDate changes nothing.
    assert_eq!(h.balances(ACCOUNT).await, json!({"USD/2": 1250}));
    let answer = h
        .get_with_body(
            "aggregate/balances?useInsertionDate=true",
            &json!({"$match": {"address": ACCOUNT}}),
        )
        .await;
    assert_eq!(
        h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"],
        json!({"USD/2": 1250})
    );
    let bad = h.get("aggregate/balances?pit=yesterday").await;
    assert!(h.err(&bad, 400, "VALIDATION").contains("pit"));
}

#[tokio::test]
async fn account_volumes_and_metadata_at_a_pit() {
    if contracts().is_none() {
        return;
    }
    let Backdated { h, first, mid, .. } = backdated(DevLedgerConfig::default()).await;
    // Metadata set after `mid` is not there at `mid`.
    let saved = h
        .post(
            &format!("accounts/{ACCOUNT}/metadata"),
            &json!({"tier": "gold"}),
            None,
        )
        .await;
    assert_eq!(saved.status, 204);

    let read = |pit: DateTime<Utc>| {
        let h = &h;
        async move {
            let answer = h
                .get(&format!(
                    "accounts/{ACCOUNT}?pit={}&expand=volumes,effectiveVolumes",
                    text(pit)
                ))
                .await;
            h.ok(&answer, 200, "V2AccountResponse")["data"].clone()
        }
    };
    // As upstream reads an account at a pit: `volumes` by insertion date,
    // `effectiveVolumes` by effective date.
    let at_mid = read(mid).await;
    assert_eq!(
        at_mid["volumes"]["USD/2"],
        json!({"input": 1000, "output": 0, "balance": 1000})
    );
    assert_eq!(
        at_mid["effectiveVolumes"]["USD/2"],
        json!({"input": 1250, "output": 0, "balance": 1250})
    );
    assert_eq!(at_mid["metadata"], json!({}));

    let before = read(date(&first["timestamp"]) - TimeDelta::hours(12)).await;
    assert_eq!(before["volumes"], json!({}));
    assert_eq!(before["effectiveVolumes"]["USD/2"]["balance"], 250);

    let now = h
        .get(&format!(
            "accounts/{ACCOUNT}?expand=volumes,effectiveVolumes"
        ))
        .await;
    let now = h.ok(&now, 200, "V2AccountResponse")["data"].clone();
    assert_eq!(now["volumes"]["USD/2"]["balance"], 1250);
    assert_eq!(now["effectiveVolumes"], now["volumes"]);
    assert_eq!(now["metadata"], json!({"tier": "gold"}));

    // First used (by effective date) after the pit: not found then.
    let long_ago = date(&first["timestamp"]) - TimeDelta::days(30);
    h.err(
        &h.get(&format!("accounts/{ACCOUNT}?pit={}", text(long_ago)))
            .await,
        404,
        "NOT_FOUND",
    );

    // The list at a pit: the same volumes, accounts first used later left out.
    h.create(
        &postings("world", "merchants:9:available", 5, "USD/2"),
        None,
    )
    .await;
    let answer = h
        .get(&format!(
            "accounts?pit={}&expand=volumes,effectiveVolumes",
            text(mid)
        ))
        .await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    let listed: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["address"].as_str().unwrap())
        .collect();
    // merchants:9 was first used now, after mid.
    assert_eq!(listed, [ACCOUNT, "world"]);
    assert_eq!(page["data"][0]["volumes"], at_mid["volumes"]);
    assert_eq!(
        page["data"][0]["effectiveVolumes"],
        at_mid["effectiveVolumes"]
    );
    assert_eq!(page["data"][1]["volumes"]["USD/2"]["balance"], -1000);
    // A metadata filter reads the metadata of the pit.
    let gold = json!({"$match": {"metadata[tier]": "gold"}});
    let answer = h
        .get_with_body(&format!("accounts?pit={}", text(mid)), &gold)
        .await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(page["data"], json!([]));
    let answer = h.get_with_body("accounts", &gold).await;
    let page = h.ok(&answer, 200, "V2AccountsCursorResponse")["cursor"].clone();
    assert_eq!(page["data"][0]["address"], ACCOUNT);
    assert_eq!(h.count(&h.head("accounts", Some(&gold)).await), 1);
    assert_eq!(
        h.count(&h.head(&format!("accounts?pit={}", text(mid)), None).await),
        2
    );
}

#[tokio::test]
async fn transactions_listed_at_a_pit_read_as_they_were() {
    if contracts().is_none() {
        return;
    }
    let Backdated {
        h,
        first,
        backdated,
        mid,
    } = backdated(DevLedgerConfig::default()).await;
    // After `mid`: the first gets metadata and is reverted.
    let id = first["id"].as_u64().unwrap();
    let saved = h
        .post(
            &format!("transactions/{id}/metadata"),
            &json!({"late": "yes"}),
            None,
        )
        .await;
    assert_eq!(saved.status, 204);
    let reverted = h
        .post_raw(&format!("transactions/{id}/revert"), "", None)
        .await;
    h.ok(&reverted, 201, "V2RevertTransactionResponse");

    let list = |path: String| {
        let h = &h;
        async move {
            let answer = h.get(&path).await;
            h.ok(&answer, 200, "V2TransactionsCursorResponse")["cursor"]["data"]
                .as_array()
                .unwrap()
                .clone()
        }
    };
    let at_mid = list(format!("transactions?pit={}", text(mid))).await;
    // By timestamp: the revert (dated now) is after mid; both others are before it.
    let ids: Vec<u64> = at_mid.iter().map(|tx| tx["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [backdated["id"].as_u64().unwrap(), id]);
    let first_then = &at_mid[1];
    assert_eq!(first_then["reverted"], false, "{first_then:#}");
    assert!(first_then.get("revertedAt").is_none());
    assert_eq!(first_then["metadata"], json!({}));

    let now = list("transactions".to_owned()).await;
    let first_now = now.iter().find(|tx| tx["id"] == id).unwrap();
    assert_eq!(first_now["reverted"], true);
    assert_eq!(first_now["metadata"], json!({"late": "yes"}));

    // Filters read the transaction as it was at the pit.
    let late = json!({"$match": {"metadata[late]": "yes"}});
    let answer = h
        .get_with_body(&format!("transactions?pit={}", text(mid)), &late)
        .await;
    assert_eq!(
        h.ok(&answer, 200, "V2TransactionsCursorResponse")["cursor"]["data"],
        json!([])
    );
    assert_eq!(h.list(&late).await.len(), 1);

    let before = date(&first["timestamp"]) - TimeDelta::hours(12);
    let then = list(format!("transactions?pit={}", text(before))).await;
    assert_eq!(then.len(), 1);
    assert_eq!(then[0]["id"], backdated["id"]);
    assert_eq!(
        h.count(
            &h.head(&format!("transactions?pit={}", text(before)), None)
                .await
        ),
        1
    );
    assert_eq!(
        h.count(
            &h.head(&format!("transactions?pit={}", text(mid)), None)
                .await
        ),
        2
    );
    assert_eq!(h.count(&h.head("transactions", None).await), 3);
}

#[tokio::test]
async fn pit_reads_need_the_features_formance_needs() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let created = h
        .post(
            "/v2/nohistory",
            &json!({"features": {"MOVES_HISTORY": "OFF"}}),
            None,
        )
        .await;
    assert_eq!(created.status, 204, "{:#}", created.body);
    let created = h
        .post(
            "/v2/noeffective",
            &json!({"features": {"MOVES_HISTORY_POST_COMMIT_EFFECTIVE_VOLUMES": "DISABLED"}}),
            None,
        )
        .await;
    assert_eq!(created.status, 204, "{:#}", created.body);
    let info = h.get("/v2/nohistory").await;
    assert_eq!(info.body["data"]["features"]["MOVES_HISTORY"], "OFF");
    assert_eq!(
        info.body["data"]["features"]["MOVES_HISTORY_POST_COMMIT_EFFECTIVE_VOLUMES"],
        "SYNC"
    );
    for ledger in ["nohistory", "noeffective"] {
        let posted = h
            .post(
                &format!("/v2/{ledger}/transactions"),
                &postings("world", ACCOUNT, 10, "USD/2"),
                None,
            )
            .await;
        h.ok(&posted, 200, "V2CreateTransactionResponse");
    }
    let pit = text(Utc::now());
    let filter = json!({"$match": {"address": ACCOUNT}});
    let ask = |ledger: &str, insertion: bool| {
        let path = format!(
            "/v2/{ledger}/aggregate/balances?pit={pit}{}",
            if insertion {
                "&useInsertionDate=true"
            } else {
                ""
            }
        );
        let h = &h;
        let filter = &filter;
        async move { h.get_with_body(&path, filter).await }
    };
    let refused = h.err(&ask("nohistory", true).await, 400, "VALIDATION");
    assert_eq!(refused, "missing feature \"MOVES_HISTORY\"");
    let answer = ask("nohistory", false).await;
    assert_eq!(
        h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"],
        json!({"USD/2": 10})
    );
    let refused = h.err(&ask("noeffective", false).await, 400, "VALIDATION");
    assert_eq!(
        refused,
        "missing feature \"MOVES_HISTORY_POST_COMMIT_EFFECTIVE_VOLUMES\""
    );
    let answer = ask("noeffective", true).await;
    assert_eq!(
        h.ok(&answer, 200, "V2AggregateBalancesResponse")["data"],
        json!({"USD/2": 10})
    );
    // Without pit neither feature is needed; volumes are.
    let answer = h
        .get_with_body("/v2/nohistory/aggregate/balances", &filter)
        .await;
    h.ok(&answer, 200, "V2AggregateBalancesResponse");
    h.err(
        &h.get(&format!("/v2/nohistory/accounts/{ACCOUNT}?expand=volumes"))
            .await,
        400,
        "VALIDATION",
    );

    // Features the dev ledger does not implement, or that do not exist, are refused.
    for (features, named) in [
        (json!({"HASH_LOGS": "DISABLED"}), "HASH_LOGS=DISABLED"),
        (json!({"MOVES_HISTORY": "SOMETIMES"}), "SOMETIMES"),
        (json!({"TIME_TRAVEL": "ON"}), "TIME_TRAVEL"),
    ] {
        let refused = h
            .post("/v2/other", &json!({ "features": features }), None)
            .await;
        assert!(h.err(&refused, 400, "VALIDATION").contains(named));
    }
}

#[tokio::test]
async fn a_restart_keeps_insertion_dates_features_and_pit_answers() {
    let Some(c) = contracts() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = DevLedgerConfig {
        data: Some(dir.path().join("ledger.sqlite")),
        ..DevLedgerConfig::default()
    };
    let Backdated {
        h, backdated, mid, ..
    } = backdated(config.clone()).await;
    let created = h
        .post(
            "/v2/nohistory",
            &json!({"features": {"MOVES_HISTORY": "OFF"}}),
            None,
        )
        .await;
    assert_eq!(created.status, 204);
    let effective = balances_at(&h, ACCOUNT, mid, false).await;
    let inserted = balances_at(&h, ACCOUNT, mid, true).await;
    h.ledger.shutdown().await;

    let h = Harness::start_with(c, config).await;
    let read = h.get(&format!("transactions/{}", backdated["id"])).await;
    let read = h.ok(&read, 200, "V2GetTransactionResponse")["data"].clone();
    assert_eq!(read["insertedAt"], backdated["insertedAt"]);
    assert_eq!(read["timestamp"], backdated["timestamp"]);
    assert_eq!(balances_at(&h, ACCOUNT, mid, false).await, effective);
    assert_eq!(balances_at(&h, ACCOUNT, mid, true).await, inserted);
    assert_ne!(effective, inserted);
    let refused = h
        .get(&format!(
            "/v2/nohistory/aggregate/balances?pit={}&useInsertionDate=true",
            text(mid)
        ))
        .await;
    h.err(&refused, 400, "VALIDATION");
}
