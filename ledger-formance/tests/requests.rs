//! What the client puts on the wire, captured by a tiny axum server: exact bodies,
//! the idempotency header, auth headers, filters, paths.

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use outbox_core::{Account, Asset, ErrorKind, EventId, Ledger, Metadata, PostOutcome, Retry};
use outbox_ledger_formance::{AuthConfig, Secret};
use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
}

type Log = Arc<Mutex<Vec<Seen>>>;

const TX: &str = r#"{"postings":[{"source":"world","destination":"merchants:4471:available","amount":100,"asset":"USD/2"}],"metadata":{},"timestamp":"2025-01-15T10:00:00Z","id":42,"reverted":false}"#;

async fn record(
    State(log): State<Log>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    log.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        query: uri.query().map(str::to_owned),
        headers,
        body,
    });
    let json = |status: StatusCode, body: String| {
        (status, [("content-type", "application/json")], body).into_response()
    };
    match (method.as_str(), path.as_str()) {
        ("GET", "/moved/v2/main/aggregate/balances") => (
            StatusCode::TEMPORARY_REDIRECT,
            [("location", "/v2/main/aggregate/balances")],
        )
            .into_response(),
        ("POST", p) if p.ends_with("/revert") => {
            json(StatusCode::CREATED, format!(r#"{{"data":{TX}}}"#))
        }
        ("POST", p) if p.ends_with("/transactions") => {
            json(StatusCode::OK, format!(r#"{{"data":{TX}}}"#))
        }
        ("POST", p) if p.ends_with("/metadata") => StatusCode::NO_CONTENT.into_response(),
        ("GET", p) if p.ends_with("/aggregate/balances") => json(
            StatusCode::OK,
            r#"{"data":{"USD/2":-48500000,"EUR":36893488147419103232}}"#.into(),
        ),
        ("GET", p) if p.ends_with("/transactions") => json(
            StatusCode::OK,
            r#"{"cursor":{"pageSize":2,"hasMore":false,"data":[]}}"#.into(),
        ),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn recorder() -> (std::net::SocketAddr, Log) {
    let log = Log::default();
    let addr = support::serve(Router::new().fallback(record).with_state(log.clone())).await;
    (addr, log)
}

fn last(log: &Log) -> Seen {
    log.lock()
        .unwrap()
        .last()
        .cloned()
        .expect("a request was recorded")
}

/// The decoded `query` parameter of a request.
fn query_param(seen: &Seen) -> Value {
    let query = seen.query.as_deref().expect("a query string");
    let url = reqwest::Url::parse(&format!("http://x/?{query}")).unwrap();
    let (_, value) = url
        .query_pairs()
        .find(|(k, _)| k == "query")
        .expect("query=");
    serde_json::from_str(&value).unwrap()
}

#[tokio::test]
async fn post_sends_the_stored_bytes_unchanged_under_the_event_id_key() {
    let (addr, log) = recorder().await;
    let ledger = support::client(addr, |_| {});
    let key = EventId::new();
    // Odd spacing and key order: re-serialising would change these bytes.
    let body = br#"{ "metadata" : {"z":"1","a":"2"},  "postings":[{"source":"world","destination":"merchants:4471:available","amount":100,"asset":"USD/2"}] }"#;
    let outcome = ledger.post(key, body).await.unwrap();
    assert_eq!(outcome, PostOutcome::Accepted { transaction_id: 42 });

    let seen = last(&log);
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path, "/v2/main/transactions");
    assert_eq!(&seen.body[..], &body[..]);
    assert_eq!(seen.headers["idempotency-key"], key.to_string().as_str());
    assert_eq!(seen.headers["content-type"], "application/json");
    assert!(
        seen.headers.get("authorization").is_none(),
        "no auth configured"
    );
}

#[tokio::test]
async fn bearer_token_is_sent_and_never_printed() {
    let (addr, log) = recorder().await;
    let ledger = support::client(addr, |c| {
        c.auth = AuthConfig::Bearer {
            token: Secret::new("s3cret-token"),
        };
    });
    ledger.aggregate_balances("merchants:").await.unwrap();
    assert_eq!(last(&log).headers["authorization"], "Bearer s3cret-token");
    assert!(!format!("{ledger:?}").contains("s3cret"), "{ledger:?}");
}

#[tokio::test]
async fn filters_travel_as_query_parameter_and_as_body() {
    let (addr, log) = recorder().await;
    let ledger = support::client(addr, |_| {});

    let balances = ledger.aggregate_balances("merchants:4471:").await.unwrap();
    assert_eq!(balances[&Asset::parse("USD/2").unwrap()], -48_500_000);
    // Beyond u64: amounts are arbitrary precision in Formance.
    assert_eq!(
        balances[&Asset::parse("EUR").unwrap()],
        36_893_488_147_419_103_232
    );
    let seen = last(&log);
    assert_eq!(seen.method, Method::GET);
    assert_eq!(seen.path, "/v2/main/aggregate/balances");
    let filter = json!({"$match": {"address": "merchants:4471:"}});
    assert_eq!(query_param(&seen), filter);
    assert_eq!(serde_json::from_slice::<Value>(&seen.body).unwrap(), filter);

    let event = EventId::new();
    assert_eq!(ledger.transaction_by_event_id(event).await.unwrap(), None);
    let seen = last(&log);
    assert_eq!(seen.path, "/v2/main/transactions");
    let filter = json!({"$match": {"metadata[outbox_event_id]": event.to_string()}});
    assert_eq!(query_param(&seen), filter);
    assert_eq!(serde_json::from_slice::<Value>(&seen.body).unwrap(), filter);

    ledger.aggregate_balances("").await.unwrap();
    let seen = last(&log);
    assert!(
        seen.query.is_none() && seen.body.is_empty(),
        "no filter for every account: {seen:?}"
    );
}

#[tokio::test]
async fn revert_and_account_metadata_shapes() {
    let (addr, log) = recorder().await;
    let ledger = support::client(addr, |_| {});
    let key = EventId::new();
    let metadata = Metadata::from([("reason".to_owned(), "chargeback".to_owned())]);

    let outcome = ledger.revert(key, 7, &metadata).await.unwrap();
    assert_eq!(outcome, PostOutcome::Accepted { transaction_id: 42 });
    let seen = last(&log);
    assert_eq!(seen.path, "/v2/main/transactions/7/revert");
    assert_eq!(seen.headers["idempotency-key"], key.to_string().as_str());
    assert_eq!(
        serde_json::from_slice::<Value>(&seen.body).unwrap(),
        json!({"metadata": {"reason": "chargeback"}})
    );

    let account = Account::parse("merchants:4471:available").unwrap();
    ledger
        .save_account_metadata("meta-key-1", &account, &metadata)
        .await
        .unwrap();
    let seen = last(&log);
    assert_eq!(
        seen.path,
        "/v2/main/accounts/merchants:4471:available/metadata"
    );
    assert_eq!(seen.headers["idempotency-key"], "meta-key-1");
    // The account metadata body is the map itself, not wrapped.
    assert_eq!(
        serde_json::from_slice::<Value>(&seen.body).unwrap(),
        json!({"reason": "chargeback"})
    );
}

#[tokio::test]
async fn a_base_url_with_a_path_prefix_is_kept() {
    let (addr, log) = recorder().await;
    let ledger = support::client(addr, |c| c.base_url = format!("http://{addr}/api/ledger/"));
    ledger
        .post(EventId::new(), br#"{"postings":[]}"#)
        .await
        .unwrap();
    assert_eq!(last(&log).path, "/api/ledger/v2/main/transactions");
}

#[tokio::test]
async fn a_redirect_is_reported_not_followed() {
    let (addr, log) = recorder().await;
    let ledger = support::client(addr, |c| c.base_url = format!("http://{addr}/moved"));
    let err = ledger.aggregate_balances("world").await.unwrap_err();
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.kind(), &ErrorKind::Ledger);
    assert_eq!(err.context("status"), Some("307"));
    assert_eq!(
        err.context("endpoint"),
        Some("/moved/v2/main/aggregate/balances")
    );
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "the redirect was not followed"
    );
}
