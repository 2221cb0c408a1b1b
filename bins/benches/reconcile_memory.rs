//! `outbox reconcile ledger` memory and time at growing outbox sizes, printed as
//! figures (no assertions).
//!
//! For each N, a SQLite outbox of N settlement credits over 1,000 accounts, and a
//! ledger that holds one committed transaction per event (id = the event's row,
//! postings and outbox metadata from its stored payload). That ledger is a small
//! Formance-shaped listing server in this process that reads the transactions from the
//! outbox file page by page, so the ledger's own memory stays out of the figures (the
//! in-memory dev ledger holds about a kilobyte per transaction, as the
//! `dev_ledger_memory` benchmark measures). The real
//! `outbox reconcile ledger` process then checks both sides from an empty checkpoint.
//! Printed per N: the check's time, events per second, its peak RSS (VmHWM), and that
//! peak's ratio to the smallest N's (the baseline, same run). Flat means the check's
//! memory does not grow with the outbox. A second run starts from the checkpoint and
//! reads nothing new (its time is the incremental cost).
//!
//! Run: `cargo bench -p outbox-bins --bench reconcile_memory` (`-- --events N` for the
//! largest N, default 1,000,000; the two smaller sizes are N/10 and N/3).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::routing::get;
use outbox_core::Payload;
use outbox_store_sqlite::{SqliteConfig, connect, enqueue};
use outbox_testkit::bench_args::Args;
use outbox_testkit::fixtures::settlement;
use outbox_testkit::peak_rss::{Measured, run_measured};
use rusqlite::Connection;
use serde_json::{Value, json};

const LEDGER: &str = "bench";

/// A fresh outbox of `n` settlement credits round-robin over 1,000 accounts.
fn outbox(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join(format!("outbox-{n}.db"));
    let mut config = SqliteConfig::new(&path);
    config.synchronous_full = false;
    let mut conn = connect(&config).unwrap();
    outbox_store_sqlite::migrate(&mut conn).unwrap();
    let tx = conn.transaction().unwrap();
    for i in 0..n {
        enqueue(&tx, &settlement(&(i % 1_000).to_string(), 1_000 + i as u64)).unwrap();
    }
    tx.commit().unwrap();
    path
}

/// `GET /v2/bench/transactions?sort=id:asc&pageSize=P` with the body filter
/// `{"$gt":{"id":N}}`, as the Formance client asks: the outbox's rows after N, each
/// as the transaction the relay would have committed.
async fn list(
    State(conn): State<Arc<Mutex<Connection>>>,
    Query(params): Query<Vec<(String, String)>>,
    body: Bytes,
) -> axum::Json<Value> {
    let page_size: i64 = params
        .iter()
        .find(|(k, _)| k == "pageSize")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(15);
    let after = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|f| f["$gt"]["id"].as_i64())
        .unwrap_or(0);
    let page = tokio::task::spawn_blocking(move || {
        let conn = conn.lock().unwrap();
        let mut stmt = conn
            .prepare_cached("SELECT position, payload FROM outbox_events WHERE position > ?1 ORDER BY position LIMIT ?2")
            .unwrap();
        let rows = stmt
            .query_map((after, page_size + 1), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let has_more = page.len() as i64 > page_size;
    let data: Vec<Value> = page
        .into_iter()
        .take(page_size as usize)
        .map(|(id, payload)| {
            let payload = Payload::from_stored(payload);
            let mut tx: Value = serde_json::from_slice(payload.split().unwrap().1).unwrap();
            tx["id"] = json!(id);
            tx["reverted"] = json!(false);
            tx["timestamp"] = json!("2026-12-01T00:00:00Z");
            tx["insertedAt"] = json!("2026-12-01T00:00:00Z");
            tx
        })
        .collect();
    axum::Json(json!({"cursor": {"pageSize": page_size, "hasMore": has_more, "data": data}}))
}

/// The listing server over `path` (one connection for every page); its base URL.
async fn mirror_ledger(path: PathBuf) -> String {
    let conn = connect(&SqliteConfig::new(&path)).unwrap();
    let app = Router::new()
        .route(&format!("/v2/{LEDGER}/transactions"), get(list))
        .with_state(Arc::new(Mutex::new(conn)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn outbox_command(args: &[&str]) -> Measured {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.args(args).env("OUTBOX_LOG", "error");
    run_measured(command).await
}

#[tokio::main]
async fn main() {
    let sizes = Args::from_env().growth("--events", 1_000_000);
    let dir = tempfile::TempDir::new().unwrap();
    println!(
        "outbox reconcile ledger over N events on 1,000 accounts (SQLite outbox; a listing ledger holding one transaction per event, served from the outbox file)"
    );
    println!(
        "{:>10}  {:>10}  {:>12}  {:>12}  {:>14}  {:>14}",
        "N", "check", "events/s", "peak RSS", "vs smallest N", "rerun (no new)"
    );
    let mut baseline = None;
    for n in sizes {
        let path = outbox(dir.path(), n);
        let url = mirror_ledger(path.clone()).await;
        let database = format!("sqlite://{}", path.display());
        let reconcile = [
            "reconcile",
            "ledger",
            "--database",
            &database,
            "--ledger-url",
            &url,
            "--ledger-name",
            LEDGER,
            "--settle-secs",
            "0",
        ];
        let first = outbox_command(&reconcile).await;
        assert!(
            first.success,
            "the check failed or found something: {}",
            first.stdout
        );
        // What the check itself says it read: N transactions, N events.
        let read = first.stdout.lines().next().unwrap_or_default().to_owned();
        let rerun = outbox_command(&reconcile).await;
        let peak = first.peak_mib;
        let base = *baseline.get_or_insert(peak);
        println!(
            "{n:>10}  {:>8.1} s  {:>12.0}  {peak:>8.1} MiB  {:>14.2}  {:>12.2} s",
            first.elapsed.as_secs_f64(),
            n as f64 / first.elapsed.as_secs_f64(),
            peak / base,
            rerun.elapsed.as_secs_f64()
        );
        println!("{:>10}  ({read})", "");
    }
}
