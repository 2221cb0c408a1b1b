//! Relay drain rate from SQLite, printed as figures and ratios (no assertions).
//!
//! For each ledger (the dev ledger, and a null HTTP ledger that answers 200 at once)
//! and each mode (bulk on, bulk off): the relay dispatcher drains a fresh outbox, and
//! a raw loop reads the same rows and posts the same bodies with the same parallelism
//! but records nothing and moves no cursor. Goals: relay ≥ 0.9 × raw; ≥ 50k events/s
//! to the null ledger with bulk. Beside them (diagnostic) the raw loop with the
//! relay's durable writes done plainly per batch (read horizon, one delivery record
//! per event, cursor): how much of the gap to raw the bookkeeping itself costs.
//!
//! Then a hot account (every event on one account, null ledger): the relay with bulk
//! (ordered runs) and without, beside the many-accounts drain of the same number of
//! events and a hand-rolled single worker posting the same rows one after another in
//! order. Goals: hot ≥ 0.5 × many accounts, and ≥ 1.5 × the hand-rolled worker.
//!
//! Run: `cargo bench -p outbox-bins --bench relay` (`-- --events N --accounts M
//! --hot-events H`);
//! `BENCH_SYNC_NORMAL=1` measures with `synchronous=NORMAL` instead of FULL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{
    Account, Amount, Asset, DispatchConfig, Dispatcher, EventId, LedgerCommand, Metadata, NewEvent,
    PostBody, PostCommand, Posting, RunMode,
};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
use outbox_store_sqlite::{SqliteConfig, SqliteStore, connect, enqueue};
use tokio::sync::watch;

const LEDGER: &str = "bench";

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn event(account: usize, n: usize) -> NewEvent {
    NewEvent::new(
        Account::parse(&format!("merchants:{account}")).unwrap(),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: Account::parse("world").unwrap(),
                destination: Account::parse(&format!("merchants:{account}:available")).unwrap(),
                amount: Amount::new(1_000 + n as u64),
                asset: Asset::parse("USD/2").unwrap(),
            }]),
            reference: None,
            metadata: Metadata::from([("event_type".to_owned(), "bench".to_owned())]),
        }),
    )
    .with_event_id(EventId::new())
}

/// A fresh outbox with `events` events spread round-robin over `accounts` accounts.
fn outbox(dir: &std::path::Path, events: usize, accounts: usize) -> SqliteStore {
    let mut config = SqliteConfig::new(dir.join(format!("outbox-{}.db", EventId::new())));
    config.synchronous_full = std::env::var("BENCH_SYNC_NORMAL").is_err();
    let mut conn = connect(&config).unwrap();
    outbox_store_sqlite::migrate(&mut conn).unwrap();
    let tx = conn.transaction().unwrap();
    for n in 0..events {
        enqueue(&tx, &event(n % accounts, n)).unwrap();
    }
    tx.commit().unwrap();
    tokio::runtime::Handle::current()
        .block_on(SqliteStore::open(config))
        .unwrap()
}

fn client(url: &str) -> Arc<FormanceLedger> {
    Arc::new(FormanceLedger::new(&FormanceConfig::new(url, LEDGER)).unwrap())
}

async fn relay_drain(store: SqliteStore, url: &str, bulk: bool) -> Duration {
    let relay = store.polling_relay("bench").await.unwrap();
    // Drain mode ends with one more look after a poll interval (a CDC relay reads in
    // `wait`): keep it short so the figure is the drain, not that last wait.
    let config = DispatchConfig {
        bulk,
        poll_interval: Duration::from_millis(10),
        ..DispatchConfig::default()
    };
    let dispatcher = Dispatcher::open(Arc::new(store), Box::new(relay), client(url), config)
        .await
        .unwrap();
    let (_stop, stopped) = watch::channel(false);
    let start = Instant::now();
    let summary = dispatcher.run(RunMode::Drain, stopped).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(summary.stopped.len(), 0);
    elapsed
}

/// Reads the same rows in the same batches and posts the same bodies with the same
/// parallelism, recording nothing — or, with `record`, writing the horizon, the
/// delivery records and the cursor plainly after each batch.
async fn raw_loop(store: SqliteStore, url: &str, bulk: bool, record: bool) -> Duration {
    let ledger = client(url);
    let start = Instant::now();
    if record {
        outbox_testkit::raw_drain::raw_drain_recording(&store, ledger.as_ref(), bulk).await;
    } else {
        outbox_testkit::raw_drain::raw_drain(&store, ledger.as_ref(), bulk).await;
    }
    start.elapsed()
}

fn rate(events: usize, d: Duration) -> f64 {
    events as f64 / d.as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let events = arg("--events", 20_000);
        let accounts = arg("--accounts", 1_000);
        let dir = tempfile::TempDir::new().unwrap();
        let null_url = outbox_testkit::null_ledger::null_ledger().await.url;
        println!("Relay drain from SQLite: {events} events over {accounts} accounts (batch 500, bulk ≤ 100, 8 requests in flight)");
        println!(
            "{:<12} {:<6} {:>12} {:>12} {:>8} {:>16} {:>8}",
            "ledger", "bulk", "relay ev/s", "raw ev/s", "ratio", "raw+records ev/s", "ratio"
        );
        for (name, fresh_dev) in [("null", false), ("dev ledger", true)] {
            for bulk in [true, false] {
                // Each side gets its own outbox and, for the dev ledger, its own fresh ledger,
                // so neither sees the other's idempotency keys.
                let mut times = Vec::new();
                for side in 0..3 {
                    let (url, dev) = if fresh_dev {
                        let dev = DevLedger::start(DevLedgerConfig {
                            create_ledgers: vec![LEDGER.to_owned()],
                            ..DevLedgerConfig::default()
                        })
                        .await
                        .unwrap();
                        (dev.url(), Some(dev))
                    } else {
                        (null_url.clone(), None)
                    };
                    let store = tokio::task::block_in_place(|| outbox(dir.path(), events, accounts));
                    let elapsed = match side {
                        0 => relay_drain(store, &url, bulk).await,
                        1 => raw_loop(store, &url, bulk, false).await,
                        _ => raw_loop(store, &url, bulk, true).await,
                    };
                    times.push(elapsed);
                    if let Some(dev) = dev {
                        dev.shutdown().await;
                    }
                }
                let [relay, raw, recording] = [0, 1, 2].map(|i| rate(events, times[i]));
                println!(
                    "{name:<12} {:<6} {relay:>12.0} {raw:>12.0} {:>8.2} {recording:>16.0} {:>8.2}",
                    if bulk { "on" } else { "off" },
                    relay / raw,
                    relay / recording
                );
            }
        }
        println!("goals: relay/raw ≥ 0.90; null ledger with bulk ≥ 50000 ev/s; raw+records (diagnostic): the raw loop writing the horizon, one delivery record per event and the cursor plainly per batch, what durable bookkeeping costs by itself");
        hot_account(dir.path(), &null_url, arg("--hot-events", 5_000), accounts).await;
    });
}

/// One account with every event, to the null ledger: see the module docs.
async fn hot_account(dir: &std::path::Path, url: &str, events: usize, accounts: usize) {
    let fresh = |accounts| tokio::task::block_in_place(|| outbox(dir, events, accounts));
    let many = rate(events, relay_drain(fresh(accounts), url, true).await);
    let hot_runs = rate(events, relay_drain(fresh(1), url, true).await);
    let hot_single = rate(events, relay_drain(fresh(1), url, false).await);
    let worker = {
        let (store, ledger) = (fresh(1), client(url));
        let start = Instant::now();
        outbox_testkit::raw_drain::raw_drain_in_order(&store, ledger.as_ref()).await;
        rate(events, start.elapsed())
    };
    println!();
    println!("Hot account: {events} events on one account, null ledger");
    println!(
        "{:<44} {:>10} {:>10} {:>10}",
        "", "ev/s", "/ many", "/ worker"
    );
    for (name, figure) in [
        (format!("relay, {accounts} accounts, bulk (baseline)"), many),
        (
            "relay, one account, bulk (ordered runs)".to_owned(),
            hot_runs,
        ),
        ("relay, one account, --no-bulk".to_owned(), hot_single),
        ("hand-rolled single worker, in order".to_owned(), worker),
    ] {
        println!(
            "{name:<44} {figure:>10.0} {:>10.2} {:>10.2}",
            figure / many,
            figure / worker
        );
    }
    println!("goals: one account with bulk ≥ 0.50 × many accounts and ≥ 1.50 × the worker");
}
