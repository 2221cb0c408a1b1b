//! Fault injection: 5xx before commit, queued answers, slow and lost answers.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{Harness, contracts, postings, with};

#[tokio::test]
async fn a_ratio_of_5xx_answers_writes_nothing() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.ledger.faults().fail_ratio(0.5, 7);
    let (mut ok, mut failed) = (0, 0);
    for i in 0..40 {
        let answer = h
            .post(
                "transactions",
                &postings("world", "a", 1, "USD"),
                Some(&format!("k{i}")),
            )
            .await;
        match answer.status {
            200 => ok += 1,
            503 => {
                h.err(&answer, 503, "INTERNAL");
                failed += 1;
            }
            other => panic!("unexpected status {other}: {:#}", answer.body),
        }
    }
    assert!(
        ok > 0 && failed > 0,
        "{ok} ok, {failed} failed at ratio 0.5"
    );
    assert_eq!(
        h.ledger.stats().transactions,
        ok,
        "a 5xx before commit wrote nothing"
    );
    assert_eq!(h.ledger.stats().faults_injected, failed);
    // Reads are never faulted.
    h.ok(
        &h.get("transactions").await,
        200,
        "V2TransactionsCursorResponse",
    );

    // The retry of a failed key simply runs now.
    h.ledger.faults().clear();
    for i in 0..40 {
        let answer = h
            .post(
                "transactions",
                &postings("world", "a", 1, "USD"),
                Some(&format!("k{i}")),
            )
            .await;
        assert_eq!(answer.status, 200);
    }
    assert_eq!(h.ledger.stats().transactions, 40);
    assert_eq!(h.ledger.stats().idempotency_hits, ok);
}

#[tokio::test]
async fn queued_answers_with_retry_after_via_the_admin_route() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let plan =
        json!({"queue": [{"status": 429, "retryAfterSecs": 1, "count": 2}, {"status": 500}]});
    let set = h.post("/_dev/faults", &plan, None).await;
    assert_eq!(set.status, 200);
    assert_eq!(set.body["queue"][0]["count"], 2);

    for expected in [429, 429, 500] {
        let answer = h
            .post("transactions", &postings("world", "a", 1, "USD"), Some("q"))
            .await;
        h.err(&answer, expected, "INTERNAL");
        let retry_after = answer
            .headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(retry_after.as_deref(), (expected == 429).then_some("1"));
    }
    let answer = h
        .post("transactions", &postings("world", "a", 1, "USD"), Some("q"))
        .await;
    h.ok(&answer, 200, "V2CreateTransactionResponse");
    assert!(!answer.hit(), "refused attempts stored nothing");
    assert_eq!(h.ledger.stats().transactions, 1);

    // Faults apply to every write route: bulk, revert and metadata too.
    h.ledger
        .faults()
        .push_status(StatusCode::SERVICE_UNAVAILABLE, None, 3);
    let bulk = json!([{"action": "CREATE_TRANSACTION", "data": postings("world", "a", 1, "USD")}]);
    h.err(&h.post("_bulk", &bulk, None).await, 503, "INTERNAL");
    h.err(
        &h.post_raw("transactions/1/revert", "", None).await,
        503,
        "INTERNAL",
    );
    h.err(
        &h.post("accounts/a/metadata", &json!({"k": "v"}), None)
            .await,
        503,
        "INTERNAL",
    );
    assert_eq!(h.ledger.stats().transactions, 1);

    let bad = h
        .post("/_dev/faults", &json!({"errorRatio": 2.0}), None)
        .await;
    h.err(&bad, 400, "VALIDATION");
    let current = h.get("/_dev/faults").await;
    assert_eq!(current.body["queue"], json!([]));
    assert_eq!(
        h.send(h.http.delete(h.url("/_dev/faults"))).await.status,
        204
    );
}

#[tokio::test]
async fn slow_answers() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let delay = Duration::from_millis(300);
    h.ledger.faults().set_delay(delay);
    let started = Instant::now();
    let answer = h
        .post("transactions", &postings("world", "a", 1, "USD"), None)
        .await;
    h.ok(&answer, 200, "V2CreateTransactionResponse");
    assert!(
        started.elapsed() >= delay,
        "answered after {:?}",
        started.elapsed()
    );
    h.ledger.faults().set_delay(Duration::ZERO);
}

#[tokio::test]
async fn an_answer_lost_after_commit_is_recovered_by_the_key() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    h.ledger
        .faults()
        .timeout_after_commit(1, Duration::from_secs(30));
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let body = postings("world", "merchants:4471:available", 48_500_000, "USD/2");
    let lost = impatient
        .post(h.url("transactions"))
        .header("Idempotency-Key", "evt-1")
        .json(&body)
        .send()
        .await;
    assert!(lost.is_err_and(|e| e.is_timeout()), "the client timed out");

    // The write happened (it committed before the answer was held).
    h.wait_stats("the held write", |s| s.transactions == 1)
        .await;
    let listed = h.list(&json!({})).await;
    assert_eq!(listed.len(), 1);

    // The relay's retry with the same key gets the original, not a second posting.
    let retry = h.post("transactions", &body, Some("evt-1")).await;
    assert!(retry.hit());
    assert_eq!(
        h.ok(&retry, 200, "V2CreateTransactionResponse")["data"]["id"],
        listed[0]["id"]
    );
    assert_eq!(
        h.balances("merchants:4471:available").await["USD/2"],
        48_500_000
    );

    // Shutting down releases the held answer instead of waiting 30 s.
    let started = Instant::now();
    h.ledger.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        started.elapsed()
    );
}

/// A ledger without idempotency (a misbehaviour for the outbox probe's tests): the key
/// is ignored, so a replay is run again — a new transaction, or the reference's 409
/// when the body carries a reference already used.
#[tokio::test]
async fn a_ledger_told_to_ignore_idempotency_keys_posts_a_replay_again() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let set = h
        .post("/_dev/faults", &json!({"ignoreIdempotencyKey": true}), None)
        .await;
    assert_eq!(set.status, 200, "{:#}", set.body);
    assert_eq!(set.body["ignoreIdempotencyKey"], true);

    let body = postings("world", "a", 1, "USD");
    let first = h.post("transactions", &body, Some("k")).await;
    let again = h.post("transactions", &body, Some("k")).await;
    let first_id = h.ok(&first, 200, "V2CreateTransactionResponse")["data"]["id"].clone();
    let again_id = h.ok(&again, 200, "V2CreateTransactionResponse")["data"]["id"].clone();
    assert!(!again.hit(), "no idempotency: no hit");
    assert_ne!(first_id, again_id, "the replay posted a new transaction");
    assert_eq!(h.ledger.stats().transactions, 2);
    assert_eq!(h.ledger.stats().idempotency_hits, 0);

    let referenced = with(body.clone(), "reference", json!("payout:1"));
    h.ok(
        &h.post("transactions", &referenced, Some("r")).await,
        200,
        "V2CreateTransactionResponse",
    );
    h.err(
        &h.post("transactions", &referenced, Some("r")).await,
        409,
        "CONFLICT",
    );

    // Back to normal: keys are honoured again (the keys above were never stored).
    h.ledger.faults().clear();
    h.post("transactions", &body, Some("k2")).await;
    assert!(h.post("transactions", &body, Some("k2")).await.hit());
    assert_eq!(h.ledger.stats().transactions, 4);
}

/// A ledger that looks the key up but never compares the body's hash: the same key
/// with a changed body answers the stored transaction as a replay.
#[tokio::test]
async fn a_ledger_told_to_ignore_the_body_hash_replays_a_changed_body() {
    let Some(c) = contracts() else { return };
    let h = Harness::start(c).await;
    let set = h
        .post("/_dev/faults", &json!({"ignoreBodyHash": true}), None)
        .await;
    assert_eq!(set.status, 200, "{:#}", set.body);

    let first = h
        .post(
            "transactions",
            &postings("world", "a", 100, "USD"),
            Some("k"),
        )
        .await;
    let changed = h
        .post(
            "transactions",
            &postings("world", "a", 101, "USD"),
            Some("k"),
        )
        .await;
    assert!(changed.hit(), "the changed body was answered as a replay");
    assert_eq!(
        h.ok(&changed, 200, "V2CreateTransactionResponse")["data"],
        h.ok(&first, 200, "V2CreateTransactionResponse")["data"],
        "the stored transaction, not the changed body"
    );
    assert_eq!(h.ledger.stats().transactions, 1);

    h.ledger.faults().clear();
    h.err(
        &h.post(
            "transactions",
            &postings("world", "a", 101, "USD"),
            Some("k"),
        )
        .await,
        400,
        "VALIDATION",
    );
}
