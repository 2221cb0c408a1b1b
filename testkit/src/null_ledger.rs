//! A null Formance ledger for benchmarks: answers every create and bulk with success
//! at once, and can record when each event id arrived (for latency figures).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde::Deserialize;
use serde::de::IgnoredAny;
use uuid::Uuid;

#[derive(Debug, Clone)]
pub struct NullLedger {
    pub url: String,
    pub recorder: Arc<Recorder>,
}

/// What the null ledger saw.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Transaction ids handed out so far.
    pub next_id: AtomicU64,
    /// Arrival times per idempotency key (the event id), while `on`.
    on: AtomicBool,
    arrivals: Mutex<Vec<(Uuid, Instant)>>,
    /// Keys answered with an idempotency mismatch (a permanent error that stops the
    /// account), for benchmarks of a stopped account.
    mismatched: Mutex<std::collections::HashSet<Uuid>>,
}

impl Recorder {
    /// Starts recording arrivals (clearing earlier ones).
    pub fn start(&self) {
        self.arrivals.lock().unwrap().clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stops recording and returns the arrivals.
    pub fn stop(&self) -> Vec<(Uuid, Instant)> {
        self.on.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.arrivals.lock().unwrap())
    }

    /// Arrivals recorded so far.
    pub fn count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    /// Answers `key` with an idempotency mismatch from now on.
    pub fn mismatch(&self, key: Uuid) {
        self.mismatched.lock().unwrap().insert(key);
    }

    fn is_mismatched(&self, key: Option<Uuid>) -> bool {
        key.is_some_and(|k| self.mismatched.lock().unwrap().contains(&k))
    }
}

const MISMATCH: &str = "invalid idempotency hash when using idempotency key (null ledger)";

#[derive(Deserialize)]
struct Keyed {
    ik: String,
}

const TX_JSON: &str = r#""postings":[],"metadata":{},"timestamp":"2026-01-01T00:00:00Z","insertedAt":"2026-01-01T00:00:00Z","reverted":false"#;

/// Answers every create and bulk with success at once. While recording, notes when
/// each event id arrived.
pub async fn null_ledger() -> NullLedger {
    async fn bulk(State(recorder): State<Arc<Recorder>>, body: Bytes) -> String {
        let arrived = Instant::now();
        let keys: Vec<Option<Uuid>> = if recorder.on.load(Ordering::Relaxed)
            || !recorder.mismatched.lock().unwrap().is_empty()
        {
            let keyed: Vec<Keyed> = serde_json::from_slice(&body).unwrap_or_default();
            let keys: Vec<Option<Uuid>> =
                keyed.iter().map(|k| Uuid::parse_str(&k.ik).ok()).collect();
            if recorder.on.load(Ordering::Relaxed) {
                let mut arrivals = recorder.arrivals.lock().unwrap();
                arrivals.extend(keys.iter().flatten().map(|id| (*id, arrived)));
            }
            keys
        } else {
            let n = serde_json::from_slice::<Vec<IgnoredAny>>(&body).map_or(0, |v| v.len());
            vec![None; n]
        };
        let first = recorder
            .next_id
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        let results: Vec<String> = keys
            .iter()
            .zip(first + 1..)
            .map(|(key, id)| {
                if recorder.is_mismatched(*key) {
                    format!(
                        r#"{{"responseType":"ERROR","logID":0,"errorCode":"VALIDATION","errorDescription":"{MISMATCH}"}}"#
                    )
                } else {
                    format!(
                        r#"{{"responseType":"CREATE_TRANSACTION","logID":{id},"data":{{"id":{id},{TX_JSON}}}}}"#
                    )
                }
            })
            .collect();
        format!(r#"{{"data":[{}]}}"#, results.join(","))
    }
    async fn create(
        State(recorder): State<Arc<Recorder>>,
        headers: HeaderMap,
    ) -> (StatusCode, String) {
        let arrived = Instant::now();
        let key = headers
            .get("Idempotency-Key")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| Uuid::parse_str(v).ok());
        if recorder.on.load(Ordering::Relaxed)
            && let Some(id) = key
        {
            recorder.arrivals.lock().unwrap().push((id, arrived));
        }
        if recorder.is_mismatched(key) {
            let body = format!(r#"{{"errorCode":"VALIDATION","errorMessage":"{MISMATCH}"}}"#);
            return (StatusCode::BAD_REQUEST, body);
        }
        let id = recorder.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        (
            StatusCode::OK,
            format!(r#"{{"data":{{"id":{id},{TX_JSON}}}}}"#),
        )
    }
    let recorder = Arc::new(Recorder::default());
    let app = Router::new()
        .route("/v2/{ledger}/_bulk", post(bulk))
        .route("/v2/{ledger}/transactions", post(create))
        .with_state(recorder.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    NullLedger { url, recorder }
}
