//! `outbox reconcile ledger` memory and time at growing outbox sizes, printed as
//! figures (no assertions).
//!
//! For each N, a SQLite outbox of N settlement credits over 1,000 accounts is relayed by the real
//! `outbox relay --once` to an in-memory dev ledger (the ledger then holds N
//! transactions carrying outbox metadata), and the real `outbox reconcile ledger`
//! process checks both sides from an empty checkpoint. Printed per N: the check's time,
//! events per second, its peak RSS (VmHWM), and that peak's ratio to the smallest N's
//! (the baseline, same run). Flat means the check's memory does not grow with the
//! outbox. A second run on the largest N starts from the checkpoint and reads nothing
//! new (its time is the incremental cost).
//!
//! Run: `cargo bench -p outbox-bins --bench reconcile_memory` (`-- --events N` for the
//! largest N, default 1,000,000; the two smaller sizes are N/10 and N/3).

use std::path::Path;

use outbox_ledger_dev::{DevLedger, DevLedgerConfig};
use outbox_store_sqlite::{SqliteConfig, connect, enqueue};
use outbox_testkit::bench_args::Args;
use outbox_testkit::fixtures::settlement;
use outbox_testkit::peak_rss::{Measured, run_measured};

const LEDGER: &str = "bench";

/// A fresh outbox of `n` settlement credits (which the ledger commits: a payout from an
/// empty account would be refused, and the ledger would hold nothing to compare)
/// round-robin over 1,000 accounts; its URL.
fn outbox(dir: &Path, n: usize) -> String {
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
    format!("sqlite://{}", path.display())
}

async fn outbox_command(args: &[&str]) -> Measured {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.args(args).env("OUTBOX_LOG", "error");
    run_measured(command).await
}

#[tokio::main]
async fn main() {
    let largest = Args::from_env().num("--events", 1_000_000);
    let sizes: Vec<usize> = [largest / 10, largest / 3, largest]
        .into_iter()
        .filter(|n| *n > 0)
        .collect();
    let dir = tempfile::TempDir::new().unwrap();
    println!(
        "outbox reconcile ledger over N events on 1,000 accounts (SQLite outbox, in-memory dev ledger holding the N transactions)"
    );
    println!(
        "{:>10}  {:>10}  {:>12}  {:>12}  {:>14}  {:>14}",
        "N", "check", "events/s", "peak RSS", "vs smallest N", "rerun (no new)"
    );
    let mut baseline = None;
    for n in sizes {
        let ledger = DevLedger::start(DevLedgerConfig {
            create_ledgers: vec![LEDGER.to_owned()],
            ..DevLedgerConfig::default()
        })
        .await
        .unwrap();
        let url = ledger.url();
        let database = outbox(dir.path(), n);
        let relay = outbox_command(&[
            "relay",
            "--database",
            &database,
            "--ledger-url",
            &url,
            "--ledger-name",
            LEDGER,
            "--once",
            "--poll-interval-ms",
            "20",
        ])
        .await;
        assert!(relay.success, "the relay failed: {}", relay.stdout);
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
        assert!(first.success, "the check found something: {}", first.stdout);
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
        ledger.shutdown().await;
    }
}
