//! Dev ledger resident memory per transaction, printed as figures (no assertions).
//!
//! Starts the real `outbox dev-ledger --data FILE` process and posts N relay-shaped
//! transactions the way the relay does: through the Formance client's `_bulk` path
//! (`continueOnFailure`, chunks of 100, each element with its own idempotency key),
//! with bodies encoded by the outbox at enqueue (`outbox_event_id`, `outbox_account`
//! and `outbox_sequence` beside the caller's `event_type` in the metadata). Over
//! 1,000 merchants, each alternates a settlement (one posting, `world` to its
//! available balance) and a payout (two postings: to its pending payouts and a fee).
//!
//! At each checkpoint N (0 first) it prints the process's VmRSS and VmHWM, the
//! resident bytes per transaction `(VmRSS(N) - VmRSS(0)) / N`, and the marginal
//! bytes per transaction since the previous checkpoint (what one more transaction
//! costs, without the one-time growth of the first requests: code paged in, the
//! allocator's arenas, SQLite's page cache), and copies the data file as it is
//! then (`VACUUM INTO`). Then a fresh process starts on each copy, so it rebuilds
//! its state by replaying the file: the same figures once it answers, the time the
//! replay took and the file's size per transaction.
//!
//! With `-- --webhook`, the ledger also delivers every transaction's webhook to a
//! receiver in this process that answers 200 at once (what the fan-out's webhook
//! endpoint does), and each checkpoint prints the figures twice: right after the
//! posts (deliveries may still be queued) and once every delivery has ended (the
//! ledger's own counters: `outbox_dev_ledger_webhooks_delivered_total` at N, nothing
//! pending), so what the queue holds and what stays for good are told apart. `--webhook-answer-ms MS` makes the
//! receiver answer each delivery after MS milliseconds: a consumer slower than the
//! ledger's writes, so the deliveries queue up.
//!
//! Run: `cargo bench -p outbox-bins --bench dev_ledger_memory` (`-- --at
//! 20000,50000,100000` for other checkpoints, `-- --webhook` for the mode above).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use outbox_core::{
    Account, Amount, Asset, BulkItem, EventId, Ledger, LedgerCommand, Metadata, Payload, PostBody,
    PostCommand, PostOutcome, Posting,
};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
use outbox_testkit::bench_args::Args;
use outbox_testkit::peak_rss::{Resident, resident};
use outbox_testkit::ports::free_port;

const LEDGER: &str = "bench";
const MERCHANTS: usize = 1_000;
/// The dev ledger's default `--bulk-max-size`, which the relay's chunks follow.
const BULK: usize = 100;
/// How long a start (with its replay) may take before the benchmark gives up.
const START_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// How long the webhook queue may take to empty before the benchmark gives up.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// A running `outbox dev-ledger` process on one data file.
struct DevLedgerProcess {
    child: tokio::process::Child,
    url: String,
    /// Its admin server (`/metrics`), when it delivers webhooks.
    admin: Option<String>,
}

impl DevLedgerProcess {
    /// Starts the process on `data` and waits until it answers; returns it with the
    /// time from spawn to its first answer (the replay of the file included).
    /// With `webhook`, it delivers every event there and serves its counters.
    async fn start(data: &Path, webhook: Option<&str>) -> (Self, Duration) {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox"));
        command
            .args([
                "dev-ledger",
                "--listen",
                &listen,
                "--ledger",
                LEDGER,
                "--data",
            ])
            .arg(data);
        let admin = webhook.map(|url| {
            let admin = format!("127.0.0.1:{}", free_port());
            command.args([
                "--webhook",
                url,
                "--webhook-secret",
                "bench-secret",
                "--admin-listen",
                &admin,
            ]);
            admin
        });
        let started = Instant::now();
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn outbox dev-ledger");
        let url = format!("http://{listen}");
        let probe = reqwest::Client::new();
        let ledger_url = format!("{url}/v2/{LEDGER}");
        loop {
            let answer = probe
                .get(&ledger_url)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            if answer.is_ok_and(|a| a.status().is_success()) {
                break;
            }
            assert!(
                started.elapsed() < START_DEADLINE,
                "the dev ledger did not answer within {START_DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (Self { child, url, admin }, started.elapsed())
    }

    /// Waits until `n` webhooks were delivered and none is pending (a no-op
    /// without webhooks). The counters are sampled, so both are read.
    async fn until_webhooks_delivered(&self, n: usize) {
        let Some(admin) = &self.admin else { return };
        let metrics = format!("http://{admin}/metrics");
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            let text = match client.get(&metrics).send().await {
                Ok(answer) => answer.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            let value = |name: &str| {
                text.lines().find_map(|line| {
                    line.strip_prefix(name)
                        .and_then(|v| v.strip_prefix(' '))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                })
            };
            let delivered = value("outbox_dev_ledger_webhooks_delivered_total");
            let pending = value("outbox_dev_ledger_webhooks_pending");
            if delivered >= Some(n as f64) && pending == Some(0.0) {
                return;
            }
            assert!(
                started.elapsed() < DRAIN_DEADLINE,
                "webhook deliveries not done after {DRAIN_DEADLINE:?}: {delivered:?} delivered of {n}, {pending:?} pending"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn resident(&self) -> Resident {
        let pid = self.child.id().expect("a running dev ledger");
        resident(pid).expect("/proc/PID/status of the dev ledger (Linux)")
    }

    /// SIGTERM, then waits (bounded) for it to exit; killed if it does not.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn posting(source: &str, destination: &str, amount: u64) -> Posting {
    Posting {
        source: Account::parse(source).expect("bench account"),
        destination: Account::parse(destination).expect("bench account"),
        amount: Amount::new(amount),
        asset: Asset::parse("USD/2").expect("bench asset"),
    }
}

/// The `n`-th event's key and stored body, as the outbox encodes it: merchants in
/// turn; a merchant's even rounds are settlements, its odd ones payouts (funded by
/// the settlement before).
fn relay_event(n: usize) -> (EventId, Vec<u8>) {
    let merchant = n % MERCHANTS;
    let round = n / MERCHANTS;
    let available = format!("merchants:{merchant}:available");
    let (kind, postings) = if round.is_multiple_of(2) {
        (
            "settlement.received",
            vec![posting("world", &available, 10_000)],
        )
    } else {
        (
            "payout.requested",
            vec![
                posting(
                    &available,
                    &format!("merchants:{merchant}:payouts:pending"),
                    5_000,
                ),
                posting(&available, "platform:fees", 100),
            ],
        )
    };
    let command = LedgerCommand::Post(PostCommand {
        body: PostBody::Postings(postings),
        reference: None,
        metadata: Metadata::from([("event_type".to_owned(), kind.to_owned())]),
    });
    let id = EventId::new();
    let account = Account::parse(&format!("merchants:{merchant}")).expect("bench account");
    let payload = Payload::encode(id, &account, round as u64 + 1, &command).expect("encode");
    let (_, body) = payload.split().expect("a post payload");
    (id, body.to_vec())
}

/// Posts events `from..to` in bulks of [`BULK`]; every one must be committed.
async fn post_events(ledger: &FormanceLedger, from: usize, to: usize) {
    let mut n = from;
    while n < to {
        let events: Vec<(EventId, Vec<u8>)> = (n..to.min(n + BULK)).map(relay_event).collect();
        let items: Vec<BulkItem<'_>> = events
            .iter()
            .map(|(key, body)| BulkItem { key: *key, body })
            .collect();
        let results = ledger.post_bulk(&items).await.expect("a bulk answer");
        for result in results {
            match result {
                Ok(PostOutcome::Accepted { .. }) => {}
                other => panic!("a relay-shaped transaction was not committed: {other:?}"),
            }
        }
        n += events.len();
    }
}

/// A consistent copy of the live data file, as it is now.
fn copy_data(live: &Path, copy: &Path) {
    let conn = rusqlite::Connection::open(live).expect("open the live data file");
    conn.execute(
        "VACUUM INTO ?1",
        [copy.to_str().expect("a UTF-8 temp path")],
    )
    .expect("copy the data file");
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Resident bytes per transaction between `before` (at `from` transactions) and
/// `now` (at `to`).
fn per_transaction(now: Resident, before: Resident, to: usize, from: usize) -> String {
    if to <= from {
        return "-".to_owned();
    }
    let grown = now.rss_kib.saturating_sub(before.rss_kib) as f64 * 1024.0;
    format!("{:.0}", grown / (to - from) as f64)
}

/// The figures at one checkpoint, from the empty ledger's and the previous ones.
struct Row {
    n: usize,
    now: Resident,
}

impl Row {
    fn print(&self, empty: &Row, previous: &Row, extra: &str) {
        println!(
            "{:>8}  {:>7.1} MiB  {:>7.1} MiB  {:>9}  {:>9}  {extra}",
            self.n,
            mib(self.now.rss_kib),
            mib(self.now.peak_kib),
            per_transaction(self.now, empty.now, self.n, empty.n),
            per_transaction(self.now, previous.now, self.n, previous.n),
        );
    }
}

/// A webhook endpoint that accepts every delivery after `answer`; returns its URL.
async fn webhook_receiver(answer: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the webhook receiver");
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || async move {
            tokio::time::sleep(answer).await;
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::main]
async fn main() {
    let args = Args::from_env();
    let mut checkpoints = args.list("--at", &[20_000, 50_000, 100_000]);
    checkpoints.insert(0, 0);
    checkpoints.sort_unstable();
    checkpoints.dedup();
    let webhook = if args.has("--webhook") {
        let answer = Duration::from_millis(args.num("--webhook-answer-ms", 0) as u64);
        Some(webhook_receiver(answer).await)
    } else {
        None
    };
    let dir = tempfile::TempDir::new().unwrap();
    let live = dir.path().join("live.sqlite");

    println!(
        "dev ledger memory: `outbox dev-ledger --data FILE`, relay-shaped transactions (1 or 2 postings, outbox metadata, an idempotency key each) in bulks of {BULK}{}",
        if webhook.is_some() {
            ", each delivered as a webhook to a receiver answering 200"
        } else {
            ""
        }
    );
    println!(
        "{:>8}  {:>11}  {:>11}  {:>9}  {:>9}  {:>10}",
        "N", "live VmRSS", "live VmHWM", "bytes/tx", "marginal", "post tx/s"
    );
    let (process, _) = DevLedgerProcess::start(&live, webhook.as_deref()).await;
    let ledger = FormanceLedger::new(&FormanceConfig::new(&process.url, LEDGER)).unwrap();
    let mut copies: Vec<(usize, PathBuf)> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    // With webhooks: the same checkpoints once every delivery has ended.
    let mut delivered: Vec<Row> = Vec::new();
    for &n in &checkpoints {
        let posted = rows.last().map_or(0, |row| row.n);
        let started = Instant::now();
        post_events(&ledger, posted, n).await;
        let rate = if n > posted {
            format!(
                "{:.0}",
                (n - posted) as f64 / started.elapsed().as_secs_f64()
            )
        } else {
            "-".to_owned()
        };
        let row = Row {
            n,
            now: process.resident(),
        };
        row.print(
            rows.first().unwrap_or(&row),
            rows.last().unwrap_or(&row),
            &format!("{rate:>10}"),
        );
        rows.push(row);
        if webhook.is_some() {
            let started = Instant::now();
            process.until_webhooks_delivered(n).await;
            let row = Row {
                n,
                now: process.resident(),
            };
            row.print(
                delivered.first().unwrap_or(&row),
                delivered.last().unwrap_or(&row),
                &format!(
                    "{:>10}",
                    format!("delivered +{:.1} s", started.elapsed().as_secs_f64())
                ),
            );
            delivered.push(row);
        }
        let copy = dir.path().join(format!("at-{n}.sqlite"));
        copy_data(&live, &copy);
        copies.push((n, copy));
    }
    process.stop().await;

    println!("restart on the file at N (state rebuilt by replaying it)");
    println!(
        "{:>8}  {:>11}  {:>11}  {:>9}  {:>9}  {:>9}  {:>13}",
        "N", "VmRSS", "VmHWM", "bytes/tx", "marginal", "replay s", "file bytes/tx"
    );
    let mut rows: Vec<Row> = Vec::new();
    for (n, copy) in copies {
        let file_bytes = std::fs::metadata(&copy).map_or(0, |m| m.len());
        // Restarted without webhooks: every delivery ended before the copy.
        let (process, replay) = DevLedgerProcess::start(&copy, None).await;
        let row = Row {
            n,
            now: process.resident(),
        };
        let file = if n == 0 {
            "-".to_owned()
        } else {
            format!("{:.0}", file_bytes as f64 / n as f64)
        };
        row.print(
            rows.first().unwrap_or(&row),
            rows.last().unwrap_or(&row),
            &format!("{:>9.1}  {file:>13}", replay.as_secs_f64()),
        );
        rows.push(row);
        process.stop().await;
    }
}
