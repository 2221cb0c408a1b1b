//! Exit codes, connection errors and log lines as a scheduler or a log shipper meets
//! them: a drain that could post nothing exits 4 (not 0), an unreachable PostgreSQL is
//! named with its cause and exits 3, logs written to a pipe carry no colour codes, and
//! `--log-format json` gives one JSON object per line with event id, account and
//! sequence as fields.

#![cfg(feature = "sqlite")]

use std::process::{Command, Output};

use outbox_testkit::ports::free_port;
use serde_json::Value;

fn outbox(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("OUTBOX_") {
            command.env_remove(key);
        }
    }
    command.env("OUTBOX_LOG", "warn").output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An outbox with one payout, and a ledger URL nothing listens on.
fn outbox_and_a_dead_ledger() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::TempDir::new().unwrap();
    let database = format!("sqlite://{}", dir.path().join("outbox.db").display());
    let file = dir.path().join("payout.jsonl");
    std::fs::write(
        &file,
        r#"{"account":"merchants:1","postings":[{"source":"world","destination":"merchants:1","amount":100,"asset":"USD/2"}]}"#,
    )
    .unwrap();
    let out = outbox(&[
        "enqueue",
        "--database",
        &database,
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The progress bar is drawn only on a terminal: a pipe gets nothing.
    assert!(out.stderr.is_empty(), "{:?}", stderr(&out));
    (dir, database, format!("http://127.0.0.1:{}", free_port()))
}

/// `outbox [global…] relay --once` on `database` against `ledger`, with `extra` flags.
fn drain(global: &[&str], database: &str, ledger: &str, extra: &[&str]) -> Output {
    let relay = [
        "relay",
        "--once",
        "--database",
        database,
        "--ledger-url",
        ledger,
        "--ledger-name",
        "payouts",
    ];
    outbox(&[global, &relay[..], extra].concat())
}

#[test]
fn a_drain_that_posted_nothing_exits_4_and_its_log_has_no_colour_codes() {
    let (_dir, database, ledger) = outbox_and_a_dead_ledger();
    let out = drain(&[], &database, &ledger, &["--max-attempts", "2"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("stopped accounts (see `outbox exceptions list`): merchants:1"),
        "{text}"
    );
    assert!(
        text.contains("account(s) stopped with events left undelivered"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "colour codes in a pipe: {text:?}");
}

#[test]
fn json_logs_are_one_object_per_line_with_event_account_and_sequence() {
    let (_dir, database, ledger) = outbox_and_a_dead_ledger();
    let out = drain(
        &["--log-format", "json"],
        &database,
        &ledger,
        &["--max-attempts", "2"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let text = stderr(&out);
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.starts_with("stopped accounts"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let stopped = lines
        .iter()
        .find(|l| l["fields"]["message"] == "permanent failure: account stopped")
        .unwrap_or_else(|| panic!("no stop logged: {text}"));
    assert_eq!(stopped["level"], "ERROR");
    assert_eq!(stopped["fields"]["account"], "merchants:1");
    assert_eq!(stopped["fields"]["sequence"], 1);
    assert!(
        stopped["fields"]["event_id"]
            .as_str()
            .is_some_and(|id| id.len() == 36),
        "{stopped}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["fields"]["exit_code"], 4, "{last}");
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_postgres_is_named_with_its_cause_and_exits_3() {
    let port = free_port();
    let out = outbox(&[
        "migrate",
        "--database",
        &format!("postgres://postgres@127.0.0.1:{port}/test"),
    ]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains(&format!("cannot connect to PostgreSQL at 127.0.0.1:{port}")),
        "{text}"
    );
    assert!(text.contains("refused"), "{text}");
    assert!(!text.contains("pool timed out"), "{text}");
}

#[test]
fn bad_flags_and_input_exit_2() {
    let out = outbox(&["relay", "--once", "--database", "mysql://x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = outbox(&["relay", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The runbook's "resume a stopped account": once the cause is fixed (here, the ledger
/// is back), running the relay again posts what the stopped account held, once and in
/// order, and exits 0.
#[cfg(feature = "dev-ledger")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_account_resumes_when_the_relay_runs_again() {
    use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
    use outbox_store_sqlite::{SqliteConfig, SqliteStore};

    let (dir, database, dead) = outbox_and_a_dead_ledger();
    let out = drain(&[], &database, &dead, &["--max-attempts", "1"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let ledger = outbox_ledger_dev::DevLedger::start(outbox_ledger_dev::DevLedgerConfig {
        create_ledgers: vec!["payouts".to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    let out = drain(&[], &database, &ledger.url(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("accepted 1, replayed 0"), "{text}");
    assert!(text.contains("stopped accounts 0"), "{text}");
    // Posted once, as the auditor rebuilds it from the outbox: the stopped payout now
    // has exactly one ledger transaction and a terminal record.
    let store = SqliteStore::open(SqliteConfig::new(dir.path().join("outbox.db")))
        .await
        .unwrap();
    let reader = FormanceLedger::new(&FormanceConfig::new(ledger.url(), "payouts")).unwrap();
    let report = outbox_testkit::auditor::audit(&store, &reader, &[])
        .await
        .unwrap();
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.ledger_transactions),
        (1, 1, 1),
        "{report}"
    );
    ledger.shutdown().await;
}
