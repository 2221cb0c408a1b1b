//! Relay memory with one stopped account, printed as figures (no assertions).
//!
//! An account whose first event the ledger refuses permanently (an idempotency
//! mismatch) stops; the cursor may not pass it for the rest of the run, so every
//! event read after it used to stay in the dispatcher's bookkeeping, and after a
//! restart every one of them was looked up one by one. This runs the real `outbox
//! relay --once` process on a SQLite outbox with that stopped account first and N
//! later events over 1,000 accounts (null ledger), for several N, and prints the
//! process's peak RSS (VmHWM) for each, beside the same outbox without the stopped
//! account (the baseline, same run); then the restart (every later event in the
//! uncertain window) with its time and peak RSS. Flat means the peak does not grow
//! with N.
//!
//! Run: `cargo bench -p outbox-bins --bench relay_memory` (`-- --events N` for the
//! largest N, default 1,000,000).

use std::path::Path;
use std::time::Duration;

use outbox_core::EventId;
use outbox_store_sqlite::{SqliteConfig, connect, enqueue};
use outbox_testkit::bench_args::Args;
use outbox_testkit::fixtures::payout;
use outbox_testkit::null_ledger::null_ledger;
use outbox_testkit::peak_rss::run_measured;

/// An outbox with, optionally, the stopped account's event first, then `later`
/// events round-robin over 1,000 accounts. Returns its URL and the stopped event's id.
fn outbox(dir: &Path, later: usize, stopped: bool) -> (String, Option<EventId>) {
    let path = dir.join(format!("outbox-{}.db", EventId::new()));
    let mut config = SqliteConfig::new(&path);
    config.synchronous_full = false;
    let mut conn = connect(&config).unwrap();
    outbox_store_sqlite::migrate(&mut conn).unwrap();
    let tx = conn.transaction().unwrap();
    let first = stopped.then(|| {
        let e = payout("stopped", 1).with_event_id(EventId::new());
        let id = e.event_id.unwrap();
        enqueue(&tx, &e).unwrap();
        id
    });
    for n in 0..later {
        let e = payout(&(n % 1_000).to_string(), 1_000 + n as u64);
        enqueue(&tx, &e).unwrap();
    }
    tx.commit().unwrap();
    (format!("sqlite://{}", path.display()), first)
}

/// Runs `outbox relay --once` to its end; returns its time, peak RSS (MiB) and the
/// number of stopped accounts it reported.
async fn relay_once(database: &str, ledger_url: &str) -> (Duration, f64, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox"));
    command
        .args(["relay", "--database", database, "--ledger-url", ledger_url])
        .args([
            "--ledger-name",
            "bench",
            "--once",
            "--poll-interval-ms",
            "20",
        ]);
    let run = run_measured(command).await;
    let stopped = run
        .stdout
        .rsplit_once("stopped accounts ")
        .map_or("?", |(_, n)| n.trim())
        .to_owned();
    (run.elapsed, run.peak_mib, stopped)
}

#[tokio::main]
async fn main() {
    let sizes = Args::from_env().growth("--events", 1_000_000);
    let ledger = null_ledger().await;
    let dir = tempfile::TempDir::new().unwrap();
    println!(
        "relay memory, one stopped account first, N later events over 1,000 accounts (SQLite, null ledger, `outbox relay --once`)"
    );
    println!(
        "{:>10}  {:>14}  {:>14}  {:>7}  {:>16}  {:>14}",
        "N", "stopped: peak", "baseline: peak", "ratio", "restart: time", "restart: peak"
    );
    let mut first_peak = None;
    for n in sizes {
        let (baseline_db, _) = outbox(dir.path(), n, false);
        let (_, baseline_peak, _) = relay_once(&baseline_db, &ledger.url).await;
        let (db, stopped) = outbox(dir.path(), n, true);
        ledger.recorder.mismatch(stopped.unwrap().as_uuid());
        let (_, peak, stopped_accounts) = relay_once(&db, &ledger.url).await;
        // The cursor stays before the stopped event: the restart reads every later
        // event again, all inside the uncertain window, and finds them terminal.
        let (restart_time, restart_peak, _) = relay_once(&db, &ledger.url).await;
        first_peak.get_or_insert(peak);
        println!(
            "{n:>10}  {peak:>11.1} MiB  {baseline_peak:>11.1} MiB  {:>7.2}  {:>14.1} s  {restart_peak:>10.1} MiB  (stopped accounts: {stopped_accounts})",
            peak / baseline_peak,
            restart_time.as_secs_f64()
        );
    }
    if let Some(first) = first_peak {
        println!("flatness: compare each N's peak with the first ({first:.1} MiB)");
    }
}
