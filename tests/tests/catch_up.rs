//! Webhooks lost for good, and the catch-up from the ledger's own log that brings
//! them back, through the real `outbox fanout` and `outbox consume` processes.
//!
//! The dev ledger (in process, on a fixed loopback port, its log in a SQLite file)
//! first signs its webhooks with a secret the intake does not know: the intake answers
//! 401, which the sender takes as final, so those events never reach the fan-out
//! store. The ledger is then restarted with the right secret; the next events arrive,
//! and the consumer holds them behind the lost ones — a gap nothing fills. With
//! `outbox fanout --ledger-url` the fan-out reads the ledger's log and appends what is
//! missing: the auditor finds every event applied once at its sequence, nothing held,
//! the treasury equal to the ledger's balances, and nothing is stored twice.
//!
//! A second case checks that after a normal delivery `outbox fanout catch-up` appends
//! nothing (everything is a duplicate), and that `--since` rescans without moving the
//! checkpoint back.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::process::Process;
use common::*;
use outbox_ledger_dev::RunningDevLedger;
use outbox_testkit::ports::free_port;
use outbox_transport_http::WEBHOOK_PATH;

/// The fan-out's own signing secret towards the consumer.
const PUBLISH_SECRET: &str = "catch-up-hop2-secret";

/// Where each part listens, and the files of this run.
struct Layout {
    outbox: Outbox,
    ledger_addr: SocketAddr,
    fanout_port: u16,
    consumer_port: u16,
}

impl Layout {
    async fn new() -> Self {
        Self {
            outbox: Outbox::new().await,
            ledger_addr: ([127, 0, 0, 1], free_port()).into(),
            fanout_port: free_port(),
            consumer_port: free_port(),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.outbox.dir().join(file)
    }

    fn ledger_url(&self) -> String {
        format!("http://{}", self.ledger_addr)
    }

    fn fanout_db(&self) -> String {
        format!("sqlite://{}", self.path("fanout.db").display())
    }

    /// The dev ledger on its fixed port and file, signing webhooks with `secret`.
    async fn ledger(&self, secret: &str) -> RunningDevLedger {
        restartable_dev_ledger(
            self.ledger_addr,
            self.path("ledger.sqlite"),
            format!("http://127.0.0.1:{}{WEBHOOK_PATH}", self.fanout_port),
            secret,
        )
        .await
    }

    async fn consumer(&self) -> Process {
        let args: Vec<String> = [
            "consume",
            "--from",
            &format!("http://127.0.0.1:{}", self.consumer_port),
            "--secret",
            PUBLISH_SECRET,
            "--database",
            &format!("sqlite://{}", self.path("treasury.db").display()),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Process::start("consume", &args, "consume: treasury").await
    }

    /// `outbox fanout` to the consumer, with `extra` flags.
    async fn fanout(&self, extra: &[&str]) -> Process {
        let args: Vec<String> = [
            "fanout",
            "--listen",
            &format!("127.0.0.1:{}", self.fanout_port),
            "--database",
            &self.fanout_db(),
            "--secret",
            SECRET,
            "--to",
            &format!("http://127.0.0.1:{}/hop2/messages", self.consumer_port),
            "--publish-secret",
            PUBLISH_SECRET,
            "--poll-interval-ms",
            "50",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
        Process::start("fanout", &args, "fanout: intake on").await
    }

    /// Catch-up flags for `outbox fanout` / `outbox fanout catch-up`.
    fn ledger_flags(&self) -> Vec<String> {
        vec![
            "--ledger-url".into(),
            self.ledger_url(),
            "--ledger-name".into(),
            LEDGER.into(),
        ]
    }

    fn count(&self, file: &str, sql: &str) -> i64 {
        let conn = rusqlite::Connection::open(self.path(file)).unwrap();
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn applied(&self) -> i64 {
        self.count("treasury.db", "SELECT COUNT(*) FROM inbox_messages")
    }

    fn held(&self) -> i64 {
        self.count("treasury.db", "SELECT COUNT(*) FROM inbox_held")
    }

    /// The auditor over the outbox, the ledger and the treasury `outbox consume` keeps.
    async fn audit(&self, ledger: &RunningDevLedger) -> outbox_testkit::auditor::AuditReport {
        audit_with_treasury(&self.outbox.store, ledger, &self.path("treasury.db")).await
    }

    fn checkpoint(&self) -> i64 {
        self.count(
            "fanout.db",
            "SELECT COALESCE(MAX(position), -1) FROM fanout_cursors WHERE transport = 'ledger-log:payouts'",
        )
    }
}

/// Waits (bounded) until the ledger has settled `count` webhook deliveries.
async fn webhooks_settled(ledger: &RunningDevLedger, count: u64) {
    eventually(Duration::from_secs(30), "the webhooks to settle", || {
        let stats = ledger.stats();
        stats.webhooks_pending == 0 && stats.webhooks_delivered + stats.webhooks_failed >= count
    })
    .await;
}

fn sqlite(path: &Path, sql: &str) -> BTreeMap<String, i64> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhooks_the_intake_refused_reach_the_consumer_through_catch_up() {
    let run = Layout::new().await;
    let consumer = run.consumer().await;
    let fanout = run.fanout(&[]).await;

    // Phase 1: the ledger signs with a secret the intake does not know. Merchant c0:
    // funding, a payout, a payout refused for insufficient funds (a rejection notice);
    // c1: funding, a payout and its reversal.
    let ledger = run.ledger("a-secret-the-intake-never-had").await;
    let first = run.outbox.enqueue(&[
        fund("c0", 100_000),
        payout("c0", 30_000),
        payout("c0", 900_000_000),
        fund("c1", 50_000),
        payout("c1", 20_000),
    ]);
    run.outbox
        .enqueue(&[revert("merchants:c1", first[4].event_id)]);
    let summary = drain(
        &run.outbox,
        client(&ledger, Duration::from_secs(10)),
        quick_config(),
    )
    .await;
    assert_eq!((summary.accepted, summary.rejected), (5, 1), "{summary:?}");
    webhooks_settled(&ledger, 6).await;
    let stats = ledger.stats();
    assert_eq!(
        (stats.webhooks_delivered, stats.webhooks_failed),
        (0, 6),
        "{stats:?}"
    );
    ledger.shutdown().await;

    // Phase 2: the secret is fixed; the next events' webhooks are delivered. c0 and c1
    // get later events, c2 is new.
    let ledger = run.ledger(SECRET).await;
    run.outbox.enqueue(&[
        payout("c0", 10_000),
        fund("c0", 5_000),
        payout("c1", 1_000),
        fund("c2", 70_000),
        payout("c2", 7_000),
    ]);
    let summary = drain(
        &run.outbox,
        client(&ledger, Duration::from_secs(10)),
        quick_config(),
    )
    .await;
    assert_eq!(summary.accepted, 5, "{summary:?}");
    webhooks_settled(&ledger, 5).await;
    assert_eq!(ledger.stats().webhooks_delivered, 5);

    // The consumer applied c2 and holds c0's and c1's later events behind the lost
    // ones. Without catch-up that gap never fills.
    eventually(Duration::from_secs(30), "c2 applied, the rest held", || {
        run.applied() == 2 && run.held() == 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        (run.applied(), run.held()),
        (2, 3),
        "the gap filled by itself"
    );
    let before = fanout.terminate().await;
    assert!(
        before.iter().any(|l| l.starts_with("fanout http:")),
        "{before:?}"
    );

    // Phase 3: the fan-out runs with catch-up from the ledger's log.
    let mut flags = run.ledger_flags();
    flags.extend(["--catch-up-interval-secs".into(), "1".into()]);
    flags.extend(["--catch-up-settle-secs".into(), "1".into()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let fanout = run.fanout(&flags).await;
    let instructions = 11;
    eventually(Duration::from_secs(60), "every instruction applied", || {
        run.applied() == instructions
    })
    .await;
    // Each instruction applied once at its sequence, nothing held, the money equal to
    // the ledger's; and the kinds intact.
    let report = run.audit(&ledger).await;
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.refused, report.applied),
        (11, 10, 1, 11),
        "{report}"
    );
    let kinds = sqlite(
        &run.path("treasury.db"),
        "SELECT kind, COUNT(*) FROM inbox_messages GROUP BY kind",
    );
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("committed".to_owned(), 9),
            ("rejected".to_owned(), 1),
            ("reverted".to_owned(), 1)
        ])
    );
    // The fan-out store holds each event once: catch-up added only the six missing.
    // It read each of the 11 log entries once, under the entry's delivery id (the five
    // webhooks had brought are recorded there as duplicates), and its checkpoint is
    // the last log id.
    assert_eq!(
        run.count("fanout.db", "SELECT COUNT(*) FROM fanout_messages"),
        instructions
    );
    assert_eq!(
        run.count(
            "fanout.db",
            "SELECT COUNT(*) FROM fanout_deliveries WHERE delivery_id LIKE 'ledger-log:payouts:%'"
        ),
        11
    );
    eventually(Duration::from_secs(10), "the checkpoint at log 11", || {
        run.checkpoint() == 11
    })
    .await;

    fanout.terminate().await;
    let out = consumer.terminate().await;
    let summary = out
        .iter()
        .find(|l| l.contains(": applied "))
        .expect("a consumer summary");
    assert!(summary.contains("applied 11,"), "{summary}");
    assert!(summary.contains("conflicts 0"), "{summary}");
    ledger.shutdown().await;
}

/// Runs `outbox fanout catch-up` with `args` to its end.
async fn catch_up_command(args: &[String]) -> (bool, String, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(outbox_binary())
            .arg("fanout")
            .arg("catch-up")
            .args(args)
            .env("OUTBOX_LOG", "warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("catch-up finished in time")
    .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catch_up_after_normal_webhook_delivery_appends_nothing() {
    let run = Layout::new().await;
    let consumer = run.consumer().await;
    let fanout = run.fanout(&[]).await;
    let ledger = run.ledger(SECRET).await;
    let first = run.outbox.enqueue(&[
        fund("d0", 100_000),
        payout("d0", 30_000),
        payout("d0", 900_000_000),
        fund("d1", 50_000),
    ]);
    run.outbox
        .enqueue(&[revert("merchants:d0", first[1].event_id)]);
    drain(
        &run.outbox,
        client(&ledger, Duration::from_secs(10)),
        quick_config(),
    )
    .await;
    webhooks_settled(&ledger, 5).await;
    eventually(Duration::from_secs(30), "all five applied", || {
        run.applied() == 5
    })
    .await;
    let stored = run.count("fanout.db", "SELECT COUNT(*) FROM fanout_messages");
    assert_eq!(stored, 5);

    let mut args = vec!["--database".to_owned(), run.fanout_db()];
    args.extend(run.ledger_flags());
    let (ok, stdout, stderr) = catch_up_command(&args).await;
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("appended 0, duplicates 5"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        run.count("fanout.db", "SELECT COUNT(*) FROM fanout_messages"),
        stored
    );
    assert_eq!(run.checkpoint(), 5);

    // A rescan from the first log: everything seen already, the checkpoint stays.
    let mut rescan = args.clone();
    rescan.extend(["--since".into(), "1".into(), "--json".into()]);
    let (ok, stdout, stderr) = catch_up_command(&rescan).await;
    assert!(ok, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("--json prints one JSON report ({e}): {stdout}");
    });
    assert_eq!(report["after"], 0, "{report}");
    assert_eq!(report["through"], 5, "{report}");
    assert_eq!(report["appended"], 0, "{report}");
    assert_eq!(report["duplicates"], 5, "{report}");
    assert_eq!(report["checkpoint"], 5, "{report}");
    assert_eq!(run.checkpoint(), 5);
    assert_eq!(
        run.count("fanout.db", "SELECT COUNT(*) FROM fanout_messages"),
        stored
    );

    // Bad input is named.
    let mut bad = vec!["--database".to_owned(), run.fanout_db()];
    bad.extend(["--ledger-url".into(), "ledger:3068".into()]);
    bad.extend(["--ledger-name".into(), LEDGER.into()]);
    let (ok, stdout, stderr) = catch_up_command(&bad).await;
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("base_url") || stderr.contains("ledger-url"),
        "{stderr}"
    );

    // After both scans, each instruction still applied once, nothing held, the treasury
    // the ledger's.
    let report = run.audit(&ledger).await;
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.refused, report.applied),
        (5, 4, 1, 5),
        "{report}"
    );

    fanout.terminate().await;
    let out = consumer.terminate().await;
    let summary = out.iter().find(|l| l.contains(": applied ")).unwrap();
    assert!(summary.contains("applied 5,"), "{summary}");
    ledger.shutdown().await;
}
