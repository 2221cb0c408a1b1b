//! Fan-out webhook intake on SQLite, printed as figures and ratios (no assertions).
//!
//! N webhooks (default 20,000, one ~400-byte message each over 1,000 accounts) are
//! appended by C concurrent callers (default 1 and 32: the dev ledger and the Formance
//! webhooks service keep up to 32 deliveries in flight), each append awaited before
//! the caller sends its next, as a webhook receiver answers only once the rows are
//! durable. Two writers on the same settings (WAL, `synchronous=FULL`), each on a
//! fresh file:
//! - `SqliteFanoutStore::append` (group commit: appends waiting for the connection
//!   share one transaction, a savepoint each);
//! - a raw baseline: the same two statements per append in its own `IMMEDIATE`
//!   transaction on one shared connection (what the store did before group commit).
//!
//! Run: `cargo bench -p outbox-store-sqlite --bench fanout_append`, options after
//! `--`: `--webhooks 20000 --callers 1,32 --reps 3`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::{FanoutMessage, FanoutStore, MessageKind};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore, connect};
use outbox_testkit::bench_args::Args;
use outbox_testkit::fixtures::fanout_message;
use rusqlite::{Connection, TransactionBehavior, params};
use tempfile::TempDir;

const ACCOUNTS: u64 = 1_000;

fn messages(n: usize) -> Vec<FanoutMessage> {
    (0..n as u64)
        .map(|i| {
            fanout_message(
                &format!("0190f2a0-7b1c-7cc2-8a4e-{i:012x}"),
                &(i % ACCOUNTS).to_string(),
                i / ACCOUNTS + 1,
                MessageKind::Committed,
                i + 1,
            )
        })
        .collect()
}

/// Splits `messages` into `callers` interleaved shares, each sent one after another.
fn shares(messages: &Arc<Vec<FanoutMessage>>, callers: usize) -> Vec<Vec<usize>> {
    (0..callers)
        .map(|c| (c..messages.len()).step_by(callers).collect())
        .collect()
}

async fn store_run(dir: &TempDir, messages: &Arc<Vec<FanoutMessage>>, callers: usize) -> Duration {
    let path = dir
        .path()
        .join(format!("store-{callers}-{}.db", uuid::Uuid::now_v7()));
    let store = SqliteFanoutStore::open(SqliteConfig::new(path))
        .await
        .expect("open store");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for share in shares(messages, callers) {
        let (store, messages) = (store.clone(), Arc::clone(messages));
        tasks.push(tokio::spawn(async move {
            for i in share {
                let outcome = store
                    .append(&format!("wh-{i}"), std::slice::from_ref(&messages[i]))
                    .await
                    .expect("append");
                assert_eq!(outcome.stored, 1);
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    started.elapsed()
}

/// The raw baseline's one append: its own `IMMEDIATE` transaction.
fn raw_append(conn: &mut Connection, delivery_id: &str, m: &FanoutMessage) {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .expect("begin");
    let now = 1_764_000_000_000_000_i64;
    tx.prepare_cached(
        "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES (?1, ?2)
         ON CONFLICT (delivery_id) DO NOTHING",
    )
    .expect("prepare")
    .execute(params![delivery_id, now])
    .expect("delivery");
    tx.prepare_cached(
        "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind,
             ledger, ledger_tx_id, traceparent, tracestate, payload, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (dedup_key) DO NOTHING",
    )
    .expect("prepare")
    .execute(params![
        m.dedup_key(),
        m.instruction_id,
        m.account.as_str(),
        m.sequence as i64,
        m.kind.as_str(),
        m.ledger,
        m.ledger_tx_id.map(|t| t as i64),
        m.traceparent,
        m.tracestate,
        m.payload,
        now
    ])
    .expect("message");
    tx.commit().expect("commit");
}

async fn raw_run(dir: &TempDir, messages: &Arc<Vec<FanoutMessage>>, callers: usize) -> Duration {
    let path = dir
        .path()
        .join(format!("raw-{callers}-{}.db", uuid::Uuid::now_v7()));
    let config = SqliteConfig::new(path);
    // Migrated by the store's own open, then written by hand.
    drop(
        SqliteFanoutStore::open(config.clone())
            .await
            .expect("migrate"),
    );
    let conn = Arc::new(Mutex::new(connect(&config).expect("connect")));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for share in shares(messages, callers) {
        let (conn, messages) = (Arc::clone(&conn), Arc::clone(messages));
        tasks.push(tokio::spawn(async move {
            for i in share {
                let (conn, messages) = (Arc::clone(&conn), Arc::clone(&messages));
                tokio::task::spawn_blocking(move || {
                    let mut conn = conn.lock().expect("connection");
                    raw_append(&mut conn, &format!("wh-{i}"), &messages[i]);
                })
                .await
                .expect("raw append");
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    started.elapsed()
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::from_env();
    let n = args.num("--webhooks", 20_000);
    let reps = args.num("--reps", 3);
    let messages = Arc::new(messages(n));
    let dir = TempDir::new().expect("temp dir");
    println!(
        "fan-out intake on SQLite (synchronous=FULL): {n} webhooks of one message, best of {reps}"
    );
    for callers in args.list("--callers", &[1, 32]) {
        let (mut store, mut raw) = (Duration::MAX, Duration::MAX);
        // Interleaved so drift hits both alike.
        for _ in 0..reps {
            raw = raw.min(raw_run(&dir, &messages, callers).await);
            store = store.min(store_run(&dir, &messages, callers).await);
        }
        println!(
            "  {callers:>2} callers: group commit {:>8.0} webhooks/s   one transaction each {:>8.0}   ratio {:.2}×",
            rate(n, store),
            rate(n, raw),
            raw.as_secs_f64() / store.as_secs_f64()
        );
    }
}
