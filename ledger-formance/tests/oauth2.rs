//! OAuth2 client credentials against a tiny axum token endpoint and ledger: the token
//! is cached, refreshed before expiry, fetched anew once on a 401, and token-endpoint
//! failures are classified.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use outbox_core::{ErrorKind, Ledger, Retry};
use outbox_ledger_formance::{AuthConfig, FormanceLedger, OAuth2Config};

#[derive(Default)]
struct Issuer {
    /// Every form the token endpoint received.
    forms: Vec<HashMap<String, String>>,
    /// The token the ledger accepts; `None` after a revocation.
    valid: Option<String>,
    expires_in: Option<u64>,
    /// Status the token endpoint answers instead of a token.
    refuse_with: Option<StatusCode>,
    /// Authorization headers the ledger saw.
    presented: Vec<String>,
    /// The ledger answers 401 to everything.
    ledger_always_401: bool,
}

type Shared = Arc<Mutex<Issuer>>;

async fn token(
    State(issuer): State<Shared>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let mut issuer = issuer.lock().unwrap();
    issuer.forms.push(form);
    if let Some(status) = issuer.refuse_with {
        let body = r#"{"error":"invalid_client","error_description":"unknown client"}"#;
        return (status, [("content-type", "application/json")], body).into_response();
    }
    let token = format!("tok-{}", issuer.forms.len());
    issuer.valid = Some(token.clone());
    let mut answer = serde_json::json!({"access_token": token, "token_type": "Bearer"});
    if let Some(expires_in) = issuer.expires_in {
        answer["expires_in"] = expires_in.into();
    }
    axum::Json(answer).into_response()
}

async fn balances(State(issuer): State<Shared>, headers: HeaderMap) -> Response {
    let mut issuer = issuer.lock().unwrap();
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    issuer.presented.push(presented.clone());
    let accepted = issuer
        .valid
        .as_ref()
        .is_some_and(|t| presented == format!("Bearer {t}"));
    if issuer.ledger_always_401 || !accepted {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    (
        [("content-type", "application/json")],
        r#"{"data":{"USD/2":0}}"#,
    )
        .into_response()
}

async fn start(configure: impl FnOnce(&mut Issuer)) -> (FormanceLedger, Shared) {
    let shared = Shared::default();
    configure(&mut shared.lock().unwrap());
    let router = Router::new()
        .route("/oauth/token", post(token))
        .route("/v2/main/aggregate/balances", get(balances))
        .with_state(shared.clone());
    let addr: SocketAddr = support::serve(router).await;
    let ledger = support::client(addr, |c| {
        let mut oauth = OAuth2Config::new(
            format!("http://{addr}/oauth/token"),
            "relay-1",
            "client-s3cret",
        );
        oauth.scopes = vec!["ledger:read".into(), "ledger:write".into()];
        c.auth = AuthConfig::OAuth2(oauth);
    });
    (ledger, shared)
}

fn fetches(shared: &Shared) -> usize {
    shared.lock().unwrap().forms.len()
}

#[tokio::test]
async fn the_token_is_fetched_once_with_client_credentials_and_cached() {
    let (ledger, shared) = start(|i| i.expires_in = Some(3600)).await;
    for _ in 0..3 {
        ledger.aggregate_balances("world").await.unwrap();
    }
    let issuer = shared.lock().unwrap();
    assert_eq!(issuer.forms.len(), 1, "one fetch for three calls");
    let form = &issuer.forms[0];
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["client_id"], "relay-1");
    assert_eq!(form["client_secret"], "client-s3cret");
    assert_eq!(form["scope"], "ledger:read ledger:write");
    assert!(
        issuer.presented.iter().all(|h| h == "Bearer tok-1"),
        "{:?}",
        issuer.presented
    );
    assert!(!format!("{ledger:?}").contains("s3cret"));
}

#[tokio::test]
async fn concurrent_calls_share_one_fetch() {
    let (ledger, shared) = start(|i| i.expires_in = Some(3600)).await;
    let ledger = Arc::new(ledger);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let ledger = ledger.clone();
            tokio::spawn(async move { ledger.aggregate_balances("world").await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(fetches(&shared), 1);
}

#[tokio::test]
async fn the_token_is_refreshed_before_it_expires() {
    // A one-second token: the 30 s margin is capped at half its life, so it is used
    // for 0.5 s and then replaced.
    let (ledger, shared) = start(|i| i.expires_in = Some(1)).await;
    ledger.aggregate_balances("world").await.unwrap();
    ledger.aggregate_balances("world").await.unwrap();
    assert_eq!(fetches(&shared), 1, "still fresh");
    tokio::time::sleep(Duration::from_millis(600)).await;
    ledger.aggregate_balances("world").await.unwrap();
    assert_eq!(fetches(&shared), 2, "refreshed after half its lifetime");
    assert_eq!(
        shared.lock().unwrap().presented.last().unwrap(),
        "Bearer tok-2"
    );
}

#[tokio::test]
async fn a_401_fetches_a_new_token_once() {
    // No expires_in: the token is kept until the ledger refuses it.
    let (ledger, shared) = start(|_| {}).await;
    ledger.aggregate_balances("world").await.unwrap();
    shared.lock().unwrap().valid = None; // revoked server-side
    ledger.aggregate_balances("world").await.unwrap();
    let issuer = shared.lock().unwrap();
    assert_eq!(issuer.forms.len(), 2);
    assert_eq!(
        issuer.presented,
        ["Bearer tok-1", "Bearer tok-1", "Bearer tok-2"]
    );
}

#[tokio::test]
async fn a_ledger_that_keeps_answering_401_is_a_permanent_error_after_one_refetch() {
    let (ledger, shared) = start(|i| i.ledger_always_401 = true).await;
    let err = ledger.aggregate_balances("world").await.unwrap_err();
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("status"), Some("401"));
    assert_eq!(fetches(&shared), 2, "exactly one refetch, no loop");
    assert!(!err.to_string().contains("tok-"), "{err}");
}

#[tokio::test]
async fn token_endpoint_refusals_are_classified() {
    let (ledger, _) = start(|i| i.refuse_with = Some(StatusCode::UNAUTHORIZED)).await;
    let err = ledger.aggregate_balances("world").await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Config);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(err.context("oauth_error"), Some("invalid_client"));
    assert_eq!(err.context("token_endpoint"), Some("/oauth/token"));
    assert_eq!(err.context("endpoint"), Some("/v2/main/aggregate/balances"));
    assert!(!err.to_string().contains("s3cret"), "{err}");

    let (ledger, _) = start(|i| i.refuse_with = Some(StatusCode::SERVICE_UNAVAILABLE)).await;
    let err = ledger.aggregate_balances("world").await.unwrap_err();
    assert!(err.is_transient(), "{err}");
}
