//! The Formance-specific outcome mappings of `FormanceLedger`, against
//! `outbox-ledger-dev` (a local Formance-v2-compatible ledger) over real HTTP on
//! loopback, with injected faults. What every ledger adapter must do (replays,
//! refusals, bulk independence, ordered runs, revert, lookups, balances, transient
//! answers) is testkit's ledger suite, run on this client in tests/ledger_suite.rs.

use std::time::Duration;

use axum::http::StatusCode;
use outbox_core::{
    Account, Amount, Asset, BalanceDate, Balances, BulkItem, ErrorKind, EventId, Ledger,
    LedgerCommand, Metadata, OUTBOX_EVENT_ID_KEY, Payload, PostBody, PostCommand, PostOutcome,
    Posting, Retry,
};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};

const LEDGER: &str = "main";
const USD: &str = "USD/2";

/// A dev ledger with ledger `main`, taking at most `bulk_max_size` elements per bulk.
async fn dev_ledger(bulk_max_size: usize) -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        bulk_max_size,
        create_ledgers: vec![LEDGER.into()],
        ..DevLedgerConfig::default()
    })
    .await
    .expect("dev ledger starts")
}

fn client_for(dev: &RunningDevLedger, adjust: impl FnOnce(&mut FormanceConfig)) -> FormanceLedger {
    let mut config = FormanceConfig::new(dev.url(), LEDGER);
    config.request_timeout_ms = 5_000;
    adjust(&mut config);
    FormanceLedger::new(&config).expect("valid config")
}

async fn setup() -> (RunningDevLedger, FormanceLedger) {
    let dev = dev_ledger(100).await;
    let ledger = client_for(&dev, |_| {});
    (dev, ledger)
}

fn account(address: &str) -> Account {
    Account::parse(address).unwrap()
}

fn posting(source: &str, destination: &str, amount: u64) -> Posting {
    Posting {
        source: account(source),
        destination: account(destination),
        amount: Amount::new(amount),
        asset: Asset::parse(USD).unwrap(),
    }
}

/// The bytes the relay would send for `event`: the payload encoded at enqueue, split.
fn stored_body(
    event: EventId,
    body: PostBody,
    reference: Option<&str>,
    metadata: Metadata,
) -> Vec<u8> {
    let command = LedgerCommand::Post(PostCommand {
        body,
        reference: reference.map(str::to_owned),
        metadata,
    });
    let payload = Payload::encode(event, &account("merchants:4471"), 1, &command).unwrap();
    payload.split().unwrap().1.to_vec()
}

fn transfer(event: EventId, source: &str, destination: &str, amount: u64) -> Vec<u8> {
    stored_body(
        event,
        PostBody::Postings(vec![posting(source, destination, amount)]),
        None,
        Metadata::new(),
    )
}

/// Credits `address` from `world` and returns the transaction id.
async fn fund(ledger: &FormanceLedger, address: &str, amount: u64) -> u64 {
    let event = EventId::new();
    accepted(
        ledger
            .post(event, &transfer(event, "world", address, amount))
            .await
            .unwrap(),
    )
}

fn accepted(outcome: PostOutcome) -> u64 {
    match outcome {
        PostOutcome::Accepted { transaction_id } => transaction_id,
        other => panic!("expected Accepted, got {other:?}"),
    }
}

fn rejected_code(outcome: PostOutcome) -> String {
    match outcome {
        PostOutcome::Rejected { code, .. } => code,
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[tokio::test]
async fn the_same_key_with_another_body_is_a_permanent_mismatch() {
    let (_dev, ledger) = setup().await;
    let event = EventId::new();
    ledger
        .post(
            event,
            &transfer(event, "world", "merchants:4471:available", 100),
        )
        .await
        .unwrap();
    let err = ledger
        .post(
            event,
            &transfer(event, "world", "merchants:4471:available", 200),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::IdempotencyMismatch);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("event_id"), Some(event.to_string().as_str()));
    assert_eq!(err.context("endpoint"), Some("/v2/main/transactions"));
    assert_eq!(err.context("error_code"), Some("VALIDATION"));
}

#[tokio::test]
async fn reverting_a_missing_transaction_is_a_permanent_not_found() {
    let (_dev, ledger) = setup().await;
    let err = ledger
        .revert(EventId::new(), 9_999, &Metadata::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::NotFound);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("transaction_id"), Some("9999"));
}

#[tokio::test]
async fn a_reference_conflict_from_the_same_event_resolves_as_a_replay() {
    let (_dev, ledger) = setup().await;
    let reference = "payout:settlement-2026-10-07:4471";
    let event = EventId::new();
    let body = stored_body(
        event,
        PostBody::Postings(vec![posting(
            "world",
            "merchants:4471:available",
            48_500_000,
        )]),
        Some(reference),
        Metadata::new(),
    );
    // The race of docs/LEDGER.md#references-and-the-409: the same event landed under another key first, so
    // the idempotency lookup misses and the reference index answers 409.
    let first = accepted(ledger.post(EventId::new(), &body).await.unwrap());
    let outcome = ledger.post(event, &body).await.unwrap();
    assert_eq!(
        outcome,
        PostOutcome::Replayed {
            transaction_id: first
        }
    );

    let found = ledger
        .transaction_by_reference(reference)
        .await
        .unwrap()
        .expect("by reference");
    assert_eq!(found.id, first);
    assert_eq!(found.reference.as_deref(), Some(reference));
}

#[tokio::test]
async fn server_errors_and_throttling_are_transient_with_retry_after() {
    let (dev, ledger) = setup().await;
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:4471:available", 100);

    dev.faults().push_status(
        StatusCode::SERVICE_UNAVAILABLE,
        Some(Duration::from_secs(7)),
        1,
    );
    let err = ledger.post(event, &body).await.unwrap_err();
    assert_eq!(
        err.retry(),
        Retry::Transient {
            after: Some(Duration::from_secs(7))
        }
    );
    assert_eq!(err.kind(), &ErrorKind::Ledger);
    assert_eq!(err.context("status"), Some("503"));
    assert_eq!(err.context("event_id"), Some(event.to_string().as_str()));

    dev.faults().push_status(
        StatusCode::TOO_MANY_REQUESTS,
        Some(Duration::from_secs(2)),
        1,
    );
    let err = ledger.post(event, &body).await.unwrap_err();
    assert_eq!(
        err.retry(),
        Retry::Transient {
            after: Some(Duration::from_secs(2))
        }
    );

    dev.faults()
        .push_status(StatusCode::INTERNAL_SERVER_ERROR, None, 1);
    let err = ledger.post(event, &body).await.unwrap_err();
    assert_eq!(err.retry(), Retry::Transient { after: None });

    // The faults were answered before executing: nothing was committed yet.
    accepted(ledger.post(event, &body).await.unwrap());
}

#[tokio::test]
async fn a_slow_answer_times_out_as_transient() {
    let dev = dev_ledger(100).await;
    let ledger = client_for(&dev, |c| c.request_timeout_ms = 300);
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:4471:available", 100);

    dev.faults().set_delay(Duration::from_millis(1_500));
    let err = ledger.post(event, &body).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Transport);
    assert!(err.is_transient(), "{err}");
    dev.faults().clear();

    // Whether or not the slow request ran, the retry leaves exactly one transaction.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let id = match ledger.post(event, &body).await.unwrap() {
        PostOutcome::Accepted { transaction_id } | PostOutcome::Replayed { transaction_id } => {
            transaction_id
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        ledger
            .transaction_by_event_id(event)
            .await
            .unwrap()
            .unwrap()
            .id,
        id
    );
}

fn items<'a>(bodies: &'a [(EventId, Vec<u8>)]) -> Vec<BulkItem<'a>> {
    bodies
        .iter()
        .map(|(key, body)| BulkItem { key: *key, body })
        .collect()
}

fn credits(n: usize) -> Vec<(EventId, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let event = EventId::new();
            (
                event,
                transfer(
                    event,
                    "world",
                    &format!("merchants:{i}:available"),
                    100 + i as u64,
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn bulk_is_chunked_to_the_configured_size() {
    // The server takes 3 per call; 8 items in chunks of 3 all commit, in order.
    let dev = dev_ledger(3).await;
    let ledger = client_for(&dev, |c| c.bulk_max_size = 3);
    assert_eq!(ledger.capabilities().max_bulk, 3);
    let bodies = credits(8);
    let results = ledger.post_bulk(&items(&bodies)).await.unwrap();
    assert_eq!(results.len(), 8);
    let ids: Vec<u64> = results.into_iter().map(|r| accepted(r.unwrap())).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for ((event, _), id) in bodies.iter().zip(&ids) {
        assert_eq!(
            ledger
                .transaction_by_event_id(*event)
                .await
                .unwrap()
                .unwrap()
                .id,
            *id
        );
    }

    // A client allowed more than the server takes gets the server's 413, permanent.
    let greedy = client_for(&dev, |c| c.bulk_max_size = 5);
    let err = greedy.post_bulk(&items(&credits(5))).await.unwrap_err();
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("error_code"), Some("BULK_SIZE_EXCEEDED"));
}

#[tokio::test]
async fn bulk_sends_every_chunk_even_after_a_refusal() {
    let dev = dev_ledger(100).await;
    let ledger = client_for(&dev, |c| c.bulk_max_size = 2);
    let ok = EventId::new();
    let broke = EventId::new();
    let later = credits(3);
    let mut bodies = vec![
        (ok, transfer(ok, "world", "merchants:1:available", 1)),
        (
            broke,
            transfer(broke, "merchants:empty", "merchants:1:available", 1),
        ),
    ];
    bodies.extend(later.iter().cloned());

    let results = ledger.post_bulk(&items(&bodies)).await.unwrap();
    accepted(results[0].clone().unwrap());
    assert_eq!(
        rejected_code(results[1].clone().unwrap()),
        "INSUFFICIENT_FUND"
    );
    for (result, (event, _)) in results[2..].iter().zip(&later) {
        let id = accepted(result.clone().unwrap());
        assert_eq!(
            ledger
                .transaction_by_event_id(*event)
                .await
                .unwrap()
                .map(|t| t.id),
            Some(id)
        );
    }
}

#[tokio::test]
async fn a_bulk_replay_reads_as_accepted_and_a_bulk_mismatch_is_permanent() {
    let (_dev, ledger) = setup().await;
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:4471:available", 100);
    let first = accepted(ledger.post(event, &body).await.unwrap());

    // No per-element hit flag: the replay is indistinguishable from a first post.
    let results = ledger
        .post_bulk(&[BulkItem {
            key: event,
            body: &body,
        }])
        .await
        .unwrap();
    assert_eq!(
        results[0].clone().unwrap(),
        PostOutcome::Accepted {
            transaction_id: first
        }
    );

    let changed = transfer(event, "world", "merchants:4471:available", 999);
    let results = ledger
        .post_bulk(&[BulkItem {
            key: event,
            body: &changed,
        }])
        .await
        .unwrap();
    let err = results[0].clone().unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::IdempotencyMismatch);
    assert_eq!(err.retry(), Retry::Permanent);
}

#[tokio::test]
async fn a_bulk_reference_conflict_from_the_same_event_resolves_as_a_replay() {
    let (_dev, ledger) = setup().await;
    let event = EventId::new();
    let body = stored_body(
        event,
        PostBody::Postings(vec![posting("world", "merchants:4471:available", 5)]),
        Some("payout:bulk-race"),
        Metadata::new(),
    );
    let first = accepted(ledger.post(EventId::new(), &body).await.unwrap());
    let results = ledger
        .post_bulk(&[BulkItem {
            key: event,
            body: &body,
        }])
        .await
        .unwrap();
    assert_eq!(
        results[0].clone().unwrap(),
        PostOutcome::Replayed {
            transaction_id: first
        }
    );
}

/// Consecutive payouts of one funded account, as the relay would send a hot account's run.
fn payouts(from: &str, amounts: &[u64]) -> Vec<(EventId, Vec<u8>)> {
    amounts
        .iter()
        .map(|amount| {
            let event = EventId::new();
            (event, transfer(event, from, "banks:clearing", *amount))
        })
        .collect()
}

async fn committed_id(ledger: &FormanceLedger, event: EventId) -> Option<u64> {
    ledger
        .transaction_by_event_id(event)
        .await
        .unwrap()
        .map(|tx| tx.id)
}

/// The rest of a failed run (refused before it ran, answer lost after commit) is
/// testkit's ledger suite, `a_failed_run_call_leaves_all_or_nothing` (tests/ledger_suite.rs).
#[tokio::test]
async fn a_run_longer_than_the_bulk_limit_is_refused_before_sending() {
    let dev = dev_ledger(100).await;
    let client = client_for(&dev, |c| c.bulk_max_size = 2);
    fund(&client, "merchants:hot:available", 1_000).await;
    let bodies = payouts("merchants:hot:available", &[1, 1, 1]);
    let err = client.post_run(&items(&bodies)).await.unwrap_err();
    assert_eq!(err.retry(), Retry::Permanent);
    assert!(err.to_string().contains("bulk limit"), "{err}");
    for (event, _) in &bodies {
        assert_eq!(committed_id(&client, *event).await, None);
    }
}

#[tokio::test]
async fn balances_and_account_volumes() {
    let (_dev, ledger) = setup().await;
    fund(&ledger, "merchants:4471:available", 48_500_000).await;
    fund(&ledger, "merchants:4471:reserve", 1_000).await;
    fund(&ledger, "merchants:9:available", 7).await;
    let event = EventId::new();
    let payout = transfer(
        event,
        "merchants:4471:available",
        "merchants:4471:payouts:pending",
        48_500_000,
    );
    accepted(ledger.post(event, &payout).await.unwrap());

    let usd = Asset::parse(USD).unwrap();
    // Formance patterns: an empty segment matches one segment, `...` any depth.
    let one_level = ledger.aggregate_balances("merchants:4471:").await.unwrap();
    assert_eq!(one_level[&usd], 1_000, "available (emptied) + reserve");
    let merchant = ledger
        .aggregate_balances("merchants:4471:...")
        .await
        .unwrap();
    assert_eq!(merchant[&usd], 48_501_000, "payouts:pending included");
    let world = ledger.aggregate_balances("world").await.unwrap();
    assert_eq!(world[&usd], -48_501_007);

    let available = ledger
        .account(&account("merchants:4471:available"))
        .await
        .unwrap()
        .expect("used account");
    let volume = available.volumes[&usd];
    assert_eq!(
        (volume.input, volume.output, volume.balance()),
        (48_500_000, 48_500_000, 0)
    );
    assert_eq!(
        ledger
            .account(&account("merchants:never:used"))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn account_metadata_is_idempotent_under_its_key() {
    let (_dev, ledger) = setup().await;
    let merchant = account("merchants:4471:available");
    fund(&ledger, merchant.as_str(), 1).await;
    let metadata = Metadata::from([("payout_schedule".to_owned(), "daily".to_owned())]);

    ledger
        .save_account_metadata("acct-meta-1", &merchant, &metadata)
        .await
        .unwrap();
    ledger
        .save_account_metadata("acct-meta-1", &merchant, &metadata)
        .await
        .unwrap();
    let read = ledger.account(&merchant).await.unwrap().unwrap();
    assert_eq!(read.metadata["payout_schedule"], "daily");

    let other = Metadata::from([("payout_schedule".to_owned(), "weekly".to_owned())]);
    let err = ledger
        .save_account_metadata("acct-meta-1", &merchant, &other)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::IdempotencyMismatch);
    assert_eq!(err.context("idempotency_key"), Some("acct-meta-1"));
}

#[tokio::test]
async fn lookups_of_unknown_events_and_references_are_none() {
    let (_dev, ledger) = setup().await;
    fund(&ledger, "merchants:1:available", 1).await;
    assert_eq!(
        ledger
            .transaction_by_event_id(EventId::new())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        ledger
            .transaction_by_reference("payout:none")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn the_ledger_is_created_when_asked_and_missing_otherwise() {
    let dev = DevLedger::start(DevLedgerConfig::default())
        .await
        .expect("dev ledger");
    let mut config = FormanceConfig::new(dev.url(), "fresh-ledger");

    let missing = FormanceLedger::connect(&config).await.unwrap();
    let event = EventId::new();
    let err = missing
        .post(event, &transfer(event, "world", "merchants:1", 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::NotFound);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("error_code"), Some("LEDGER_NOT_FOUND"));

    config.create_ledger_if_missing = true;
    let created = FormanceLedger::connect(&config).await.unwrap();
    assert!(
        !created.create_ledger().await.unwrap(),
        "already exists now"
    );
    accepted(
        created
            .post(event, &transfer(event, "world", "merchants:1", 1))
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn a_connection_refused_is_transient() {
    let dev = dev_ledger(100).await;
    let url = dev.url();
    dev.shutdown().await;
    let ledger = FormanceLedger::new(&FormanceConfig::new(url, LEDGER)).unwrap();
    let event = EventId::new();
    let err = ledger
        .post(event, &transfer(event, "world", "merchants:1", 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Transport);
    assert!(err.is_transient(), "{err}");
}

/// Posts `body` (a plain transaction request, as anyone besides the relay might
/// post it) and returns the new transaction id.
async fn post_raw(ledger: &FormanceLedger, body: &serde_json::Value) -> u64 {
    accepted(
        ledger
            .post(EventId::new(), body.to_string().as_bytes())
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn transactions_after_lists_ascending_across_pages() {
    let (_dev, ledger) = setup().await;
    // More than the dev ledger's page cap (100), so the client pages internally.
    let mut posted = Vec::new();
    for i in 0..230u64 {
        posted.push(fund(&ledger, &format!("merchants:{}:available", i % 7), i + 1).await);
    }
    // One without outbox metadata: listed all the same.
    let plain = post_raw(
        &ledger,
        &serde_json::json!({"postings": [{"source": "world", "destination": "treasury", "amount": 5, "asset": USD}]}),
    )
    .await;
    posted.push(plain);
    let ids: Vec<u64> = (1..=231).collect();
    assert_eq!(posted, ids, "the dev ledger numbers transactions from 1");

    let all = ledger.transactions_after(None, 1_000).await.unwrap();
    assert_eq!(all.iter().map(|tx| tx.id).collect::<Vec<_>>(), ids);
    let first = &all[0];
    assert_eq!(
        first.postings,
        [posting("world", "merchants:0:available", 1)]
    );
    assert!(first.metadata.contains_key(OUTBOX_EVENT_ID_KEY));
    assert!(first.timestamp.is_some() && first.inserted_at.is_some());
    assert!(!all[230].metadata.contains_key(OUTBOX_EVENT_ID_KEY));

    let window = ledger.transactions_after(Some(100), 50).await.unwrap();
    assert_eq!(
        window.iter().map(|tx| tx.id).collect::<Vec<_>>(),
        (101..=150).collect::<Vec<_>>()
    );

    // Paging as reconciliation does: after the last id of each page, until empty.
    let mut walked = Vec::new();
    let mut after = None;
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls <= 10, "the walk must end");
        let page = ledger.transactions_after(after, 70).await.unwrap();
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 70);
        after = Some(last.id);
        walked.extend(page.iter().map(|tx| tx.id));
    }
    assert_eq!(walked, ids);
    assert_eq!(calls, 5, "four pages of at most 70, then an empty one");

    assert!(
        ledger
            .transactions_after(Some(231), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(ledger.transactions_after(None, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn balances_at_a_point_in_time_by_both_dates_with_a_backdated_transaction() {
    let (_dev, ledger) = setup().await;
    let usd = Asset::parse(USD).unwrap();
    let address = "merchants:4471:payouts:pending";
    fund(&ledger, address, 48_500_000).await;
    let first = ledger.transactions_after(None, 1).await.unwrap().remove(0);
    let (first_date, mid) = (first.timestamp.unwrap(), first.inserted_at.unwrap());
    // Insertion dates have microseconds: make sure the next one is later.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let day_before = first_date - chrono::TimeDelta::days(1);
    let backdated = post_raw(
        &ledger,
        &serde_json::json!({
            "postings": [{"source": "world", "destination": address, "amount": 25_000, "asset": USD}],
            "timestamp": day_before.to_rfc3339(),
        }),
    )
    .await;
    let read = ledger.transactions_after(Some(first.id), 1).await.unwrap();
    assert_eq!(read[0].id, backdated);
    assert_eq!(read[0].timestamp, Some(day_before));
    assert!(read[0].inserted_at.unwrap() > mid);

    // Between the two insertions the two answers differ by exactly the backdated amount.
    let effective = ledger
        .aggregate_balances_at(address, mid, BalanceDate::Effective)
        .await
        .unwrap();
    let inserted = ledger
        .aggregate_balances_at(address, mid, BalanceDate::Insertion)
        .await
        .unwrap();
    assert_eq!(effective[&usd], 48_525_000);
    assert_eq!(inserted[&usd], 48_500_000);
    assert_eq!(effective[&usd] - inserted[&usd], 25_000);
    // The same pattern the current balances take.
    let merchant = ledger
        .aggregate_balances_at("merchants:4471:...", mid, BalanceDate::Insertion)
        .await
        .unwrap();
    assert_eq!(merchant, inserted);

    // Before the first: only the backdated move is dated by then, and nothing was
    // inserted by then, which is an empty answer, not zero.
    let before = first_date - chrono::TimeDelta::hours(12);
    let effective = ledger
        .aggregate_balances_at(address, before, BalanceDate::Effective)
        .await
        .unwrap();
    assert_eq!(effective, Balances::from([(usd.clone(), 25_000)]));
    let inserted = ledger
        .aggregate_balances_at(address, before, BalanceDate::Insertion)
        .await
        .unwrap();
    assert!(inserted.is_empty(), "{inserted:?}");
    let nobody = ledger
        .aggregate_balances_at("nobody:here", mid, BalanceDate::Effective)
        .await
        .unwrap();
    assert!(nobody.is_empty());
    // Now: both moves, by either date.
    assert_eq!(
        ledger.aggregate_balances(address).await.unwrap()[&usd],
        48_525_000
    );
}

#[tokio::test]
async fn a_ledger_without_the_moves_history_refuses_pit_balances_permanently() {
    let dev = dev_ledger(100).await;
    let created = reqwest::Client::new()
        .post(format!("{}/v2/nohistory", dev.url()))
        .header("content-type", "application/json")
        .body(r#"{"features": {"MOVES_HISTORY": "OFF"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 204);
    let mut config = FormanceConfig::new(dev.url(), "nohistory");
    config.request_timeout_ms = 5_000;
    let ledger = FormanceLedger::new(&config).unwrap();
    fund(&ledger, "merchants:1:available", 10).await;
    let now = chrono::Utc::now();

    let err = ledger
        .aggregate_balances_at("merchants:1:available", now, BalanceDate::Insertion)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Ledger);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.code(), Some("VALIDATION"));
    for named in [
        "useInsertionDate=true",
        "MOVES_HISTORY=ON",
        "missing feature",
    ] {
        assert!(err.message().contains(named), "{err}");
    }
    assert!(err.context("option").unwrap().contains("useInsertionDate"));
    // By effective date this ledger still answers.
    let effective = ledger
        .aggregate_balances_at("merchants:1:available", now, BalanceDate::Effective)
        .await
        .unwrap();
    assert_eq!(effective[&Asset::parse(USD).unwrap()], 10);
}
