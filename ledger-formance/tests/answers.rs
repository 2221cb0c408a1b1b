//! Answers a Formance-compatible server rarely gives on demand (races, protocol
//! oddities), scripted one by one on a tiny axum server.

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use outbox_core::{
    BulkItem, ErrorKind, EventId, Ledger, Metadata, OUTBOX_EVENT_ID_KEY, PostOutcome, Retry,
};
use serde_json::Value;

/// One scripted answer: status, extra headers, body.
type Canned = (u16, Vec<(&'static str, String)>, String);

#[derive(Default)]
struct Script {
    answers: VecDeque<Canned>,
    /// (method, path and query, body) of every request.
    seen: Vec<(Method, String, Bytes)>,
}

type Shared = Arc<Mutex<Script>>;

async fn answer(State(script): State<Shared>, method: Method, uri: Uri, body: Bytes) -> Response {
    let mut script = script.lock().unwrap();
    let target = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), ToString::to_string);
    script.seen.push((method, target, body));
    let (status, headers, body) = script.answers.pop_front().expect("an answer is scripted");
    let mut map = HeaderMap::new();
    map.insert("content-type", "application/json".parse().unwrap());
    for (name, value) in headers {
        map.insert(name, value.parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), map, body).into_response()
}

async fn scripted(answers: Vec<Canned>) -> (outbox_ledger_formance::FormanceLedger, Shared) {
    let shared = Shared::default();
    shared.lock().unwrap().answers = answers.into();
    let addr = support::serve(Router::new().fallback(answer).with_state(shared.clone())).await;
    (support::client(addr, |_| {}), shared)
}

fn tx(id: u64, event: &str) -> String {
    format!(
        r#"{{"postings":[{{"source":"world","destination":"merchants:1","amount":1,"asset":"USD/2"}}],"metadata":{{"{OUTBOX_EVENT_ID_KEY}":"{event}"}},"timestamp":"2025-01-15T10:00:00Z","reference":"ref-1","id":{id},"reverted":false}}"#
    )
}

fn cursor(txs: &[String]) -> String {
    format!(
        r#"{{"cursor":{{"pageSize":2,"hasMore":false,"data":[{}]}}}}"#,
        txs.join(",")
    )
}

const CONFLICT: &str = r#"{"errorCode":"CONFLICT","errorMessage":"duplicate reference \"ref-1\""}"#;
const WITH_REFERENCE: &[u8] = br#"{"postings":[{"source":"world","destination":"merchants:1","amount":1,"asset":"USD/2"}],"reference":"ref-1"}"#;
const NO_REFERENCE: &[u8] =
    br#"{"postings":[{"source":"world","destination":"merchants:1","amount":1,"asset":"USD/2"}]}"#;

#[tokio::test]
async fn a_conflict_without_reference_is_a_concurrent_duplicate_key_and_transient() {
    let (ledger, script) = scripted(vec![(409, vec![], CONFLICT.into())]).await;
    let err = ledger.post(EventId::new(), NO_REFERENCE).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.context("error_code"), Some("CONFLICT"));
    assert_eq!(
        script.lock().unwrap().seen.len(),
        1,
        "no lookup without a reference"
    );
}

#[tokio::test]
async fn a_conflict_whose_reference_nobody_holds_any_more_is_transient() {
    let (ledger, script) = scripted(vec![
        (409, vec![], CONFLICT.into()),
        (200, vec![], cursor(&[])),
    ])
    .await;
    let err = ledger
        .post(EventId::new(), WITH_REFERENCE)
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.context("reference"), Some("ref-1"));
    // The lookup filtered on the reference of the stored body.
    let seen = &script.lock().unwrap().seen;
    assert_eq!(seen[1].0, Method::GET);
    let filter: Value = serde_json::from_slice(&seen[1].2).unwrap();
    assert_eq!(filter["$match"]["reference"], "ref-1");
}

#[tokio::test]
async fn a_conflict_resolves_by_the_holder_event_id() {
    let event = EventId::new();
    let (ledger, _) = scripted(vec![
        (409, vec![], CONFLICT.into()),
        (200, vec![], cursor(&[tx(5, &event.to_string())])),
        (409, vec![], CONFLICT.into()),
        (200, vec![], cursor(&[tx(5, &EventId::new().to_string())])),
    ])
    .await;
    assert_eq!(
        ledger.post(event, WITH_REFERENCE).await.unwrap(),
        PostOutcome::Replayed { transaction_id: 5 }
    );
    match ledger.post(event, WITH_REFERENCE).await.unwrap() {
        PostOutcome::Rejected { code, message } => {
            assert_eq!(code, "CONFLICT");
            assert!(message.contains("duplicate reference"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_failed_conflict_lookup_keeps_its_own_endpoint_and_gains_the_event() {
    let event = EventId::new();
    let (ledger, _) = scripted(vec![
        (409, vec![], CONFLICT.into()),
        (503, vec![("retry-after", "3".into())], String::new()),
    ])
    .await;
    let err = ledger.post(event, WITH_REFERENCE).await.unwrap_err();
    assert_eq!(
        err.retry(),
        Retry::Transient {
            after: Some(std::time::Duration::from_secs(3))
        }
    );
    assert_eq!(err.context("event_id"), Some(event.to_string().as_str()));
    assert_eq!(err.context("status"), Some("503"));
}

#[tokio::test]
async fn the_hit_header_marks_a_replayed_revert() {
    let hit = vec![("idempotency-hit", "true".to_owned())];
    let (ledger, _) = scripted(vec![
        (201, vec![], format!(r#"{{"data":{}}}"#, tx(8, "x"))),
        (201, hit, format!(r#"{{"data":{}}}"#, tx(8, "x"))),
    ])
    .await;
    let key = EventId::new();
    assert_eq!(
        ledger.revert(key, 3, &Metadata::new()).await.unwrap(),
        PostOutcome::Accepted { transaction_id: 8 }
    );
    assert_eq!(
        ledger.revert(key, 3, &Metadata::new()).await.unwrap(),
        PostOutcome::Replayed { transaction_id: 8 }
    );
}

#[tokio::test]
async fn an_unreadable_success_is_a_permanent_ledger_error_saying_it_may_be_committed() {
    let (ledger, _) = scripted(vec![(200, vec![], "<html>ok</html>".into())]).await;
    let err = ledger.post(EventId::new(), NO_REFERENCE).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Ledger);
    assert_eq!(err.retry(), Retry::Permanent);
    assert!(err.message().contains("may be committed"), "{err}");
}

#[tokio::test]
async fn an_http_date_retry_after_is_honoured() {
    let at =
        (chrono::Utc::now() + chrono::Duration::seconds(120)).format("%a, %d %b %Y %H:%M:%S GMT");
    let (ledger, _) = scripted(vec![(
        503,
        vec![("retry-after", at.to_string())],
        String::new(),
    )])
    .await;
    let err = ledger.post(EventId::new(), NO_REFERENCE).await.unwrap_err();
    let Retry::Transient { after: Some(after) } = err.retry() else {
        panic!("{err}")
    };
    assert!((110..=120).contains(&after.as_secs()), "{after:?}");
}

#[tokio::test]
async fn two_transactions_for_one_event_are_an_internal_error() {
    let event = EventId::new().to_string();
    let (ledger, _) = scripted(vec![(200, vec![], cursor(&[tx(9, &event), tx(4, &event)]))]).await;
    let err = ledger
        .transaction_by_event_id(event.parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Internal);
    assert!(err.message().contains("[9, 4]"), "{err}");
}

#[tokio::test]
async fn a_bulk_answer_with_the_wrong_count_is_a_permanent_error() {
    let one = format!(
        r#"{{"data":[{{"responseType":"CREATE_TRANSACTION","logID":1,"data":{}}}]}}"#,
        tx(1, "a")
    );
    let (ledger, _) = scripted(vec![(200, vec![], one)]).await;
    let items = [
        BulkItem {
            key: EventId::new(),
            body: NO_REFERENCE,
        },
        BulkItem {
            key: EventId::new(),
            body: NO_REFERENCE,
        },
    ];
    let err = ledger.post_bulk(&items).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Ledger);
    assert_eq!(err.retry(), Retry::Permanent);
    assert!(err.message().contains("1 results for 2 elements"), "{err}");
}

#[tokio::test]
async fn a_bulk_item_that_is_not_json_fails_alone_and_the_others_are_sent() {
    let two = format!(
        r#"{{"data":[{{"responseType":"CREATE_TRANSACTION","logID":1,"data":{}}},{{"responseType":"CREATE_TRANSACTION","logID":2,"data":{}}}]}}"#,
        tx(1, "a"),
        tx(2, "b")
    );
    let (ledger, script) = scripted(vec![(200, vec![], two)]).await;
    let items = [
        BulkItem {
            key: EventId::new(),
            body: NO_REFERENCE,
        },
        BulkItem {
            key: EventId::new(),
            body: b"{not json",
        },
        BulkItem {
            key: EventId::new(),
            body: NO_REFERENCE,
        },
    ];
    let results = ledger.post_bulk(&items).await.unwrap();
    assert_eq!(results[0], Ok(PostOutcome::Accepted { transaction_id: 1 }));
    assert_eq!(results[1].as_ref().unwrap_err().field(), Some("body"));
    assert_eq!(results[2], Ok(PostOutcome::Accepted { transaction_id: 2 }));

    // The readable elements went out, each with its key and verbatim body, and the
    // call asks the ledger to go on past a failed element (items are independent).
    let seen = &script.lock().unwrap().seen;
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].1.contains("continueOnFailure=true"),
        "{}",
        seen[0].1
    );
    let sent: Value = serde_json::from_slice(&seen[0].2).unwrap();
    let elements = sent.as_array().unwrap();
    assert_eq!(elements.len(), 2);
    assert_eq!(elements[0]["action"], "CREATE_TRANSACTION");
    assert_eq!(elements[0]["ik"], items[0].key.to_string());
    assert_eq!(elements[1]["ik"], items[2].key.to_string());
    assert!(
        std::str::from_utf8(&seen[0].2)
            .unwrap()
            .contains(std::str::from_utf8(NO_REFERENCE).unwrap())
    );
}

#[tokio::test]
async fn an_empty_bulk_sends_nothing() {
    let (ledger, script) = scripted(vec![]).await;
    assert!(ledger.post_bulk(&[]).await.unwrap().is_empty());
    assert!(script.lock().unwrap().seen.is_empty());
}

fn page(txs: &[String], has_more: bool) -> String {
    format!(
        r#"{{"cursor":{{"pageSize":1000,"hasMore":{has_more},"data":[{}]}}}}"#,
        txs.join(",")
    )
}

/// The query pairs of a request target (`/v2/main/transactions?…`).
fn query_of(target: &str) -> Vec<(String, String)> {
    let url = reqwest::Url::parse(&format!("http://x{target}")).unwrap();
    url.query_pairs().into_owned().collect()
}

#[tokio::test]
async fn a_listing_asks_ascending_after_the_last_id_and_pages_past_the_spec_maximum() {
    // 1,500 asked: a page of 1,000 (the spec's maximum) the server cut to 2, then
    // the rest after the last id seen.
    let (ledger, script) = scripted(vec![
        (200, vec![], page(&[tx(8, "a"), tx(9, "b")], true)),
        (200, vec![], page(&[tx(12, "c")], false)),
    ])
    .await;
    let found = ledger.transactions_after(Some(7), 1_500).await.unwrap();
    assert_eq!(found.iter().map(|t| t.id).collect::<Vec<_>>(), [8, 9, 12]);
    assert!(found[0].timestamp.is_some());
    let seen = &script.lock().unwrap().seen;
    assert_eq!(seen.len(), 2, "hasMore false ends the walk");
    for (i, (after, size)) in [(7, "1000"), (9, "1000")].into_iter().enumerate() {
        let (method, target, body) = &seen[i];
        assert_eq!(method, Method::GET);
        assert!(target.starts_with("/v2/main/transactions?"), "{target}");
        let query = query_of(target);
        assert!(
            query.contains(&("sort".into(), "id:asc".into())),
            "{query:?}"
        );
        assert!(
            query.contains(&("pageSize".into(), size.into())),
            "{query:?}"
        );
        let filter: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(filter, serde_json::json!({"$gt": {"id": after}}));
    }
}

#[tokio::test]
async fn a_listing_out_of_order_or_past_the_filter_is_refused() {
    let (ledger, _) = scripted(vec![
        (200, vec![], page(&[tx(9, "a"), tx(8, "b")], false)),
        (200, vec![], page(&[tx(3, "a")], false)),
    ])
    .await;
    let err = ledger.transactions_after(None, 10).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Ledger);
    assert!(!err.is_transient());
    assert!(err.message().contains("ignores the order"), "{err}");
    let err = ledger.transactions_after(Some(5), 10).await.unwrap_err();
    assert!(err.message().contains("listed transaction 3"), "{err}");
}

#[tokio::test]
async fn a_balance_beyond_128_bits_is_refused_naming_the_asset() {
    let (ledger, script) = scripted(vec![(
        200,
        vec![],
        r#"{"data":{"USD/2":1701411834604692317316873037158841057280}}"#.into(),
    )])
    .await;
    let at = chrono::DateTime::parse_from_rfc3339("2026-10-07T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let err = ledger
        .aggregate_balances_at(
            "merchants:4471:...",
            at,
            outbox_core::BalanceDate::Insertion,
        )
        .await
        .unwrap_err();
    assert!(err.message().contains("USD/2"), "{err}");
    assert!(err.message().contains("128 bits"), "{err}");
    let seen = &script.lock().unwrap().seen;
    let query = query_of(&seen[0].1);
    assert!(
        query.contains(&("pit".into(), "2026-10-07T00:00:00Z".into())),
        "{query:?}"
    );
    assert!(
        query.contains(&("useInsertionDate".into(), "true".into())),
        "{query:?}"
    );
}
