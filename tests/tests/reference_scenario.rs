//! The reference scenario (docs/ARCHITECTURE.md) end to end, as a user runs it: `outbox demo` on a fresh folder, then every
//! claim of its summary checked again from the files it left behind, ending with the
//! auditor over them.

mod common;

use std::process::Command;

use common::{audit_with_treasury, outbox_binary, treasury_balances};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig};
use outbox_store_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::Connection;

fn query<T: rusqlite::types::FromSql>(db: &std::path::Path, sql: &str) -> Vec<T> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_scenario_end_to_end() {
    let dir = tempfile::TempDir::new().unwrap();
    let work = dir.path().join("demo");
    let output = Command::new(outbox_binary())
        .args(["demo", "--payouts", "120", "--merchants", "12", "--dir"])
        .arg(&work)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("all consistent."), "{stdout}");

    // Hop 1: payout A (merchant 4471, sequence 2) was replayed after the crash, by the same transaction.
    let outbox = work.join("outbox.db");
    let a_outcomes: Vec<String> = query(
        &outbox,
        "SELECT d.outcome FROM outbox_deliveries d JOIN outbox_events e ON e.event_id = d.event_id
         WHERE e.account = 'merchants:4471' AND e.sequence = 2 ORDER BY d.id",
    );
    assert_eq!(a_outcomes, vec!["replayed".to_owned()]);
    let refused: Vec<String> = query(
        &outbox,
        "SELECT error_code FROM outbox_deliveries WHERE outcome = 'rejected'",
    );
    assert_eq!(refused, vec!["INSUFFICIENT_FUND".to_owned()]);

    // Hop 2: the consumer applied 4471's four instructions in order, the reversal last,
    // and both genuine $485,000 payouts (one reverted) left exactly $485,000 pending.
    let treasury = work.join("treasury.db");
    let kinds: Vec<String> = query(
        &treasury,
        "SELECT kind FROM inbox_messages WHERE account = 'merchants:4471' ORDER BY sequence",
    );
    assert_eq!(
        kinds,
        vec!["committed", "committed", "committed", "reverted"]
    );
    let pending: Vec<i64> = query(
        &treasury,
        "SELECT balance FROM treasury_balances WHERE account = 'merchants:4471:payouts:pending'",
    );
    assert_eq!(pending, vec![48_500_000]);

    // The auditor over the files the demo left, the ledger reopened from its own: every
    // event posted once in per-account order or refused, each applied once by the
    // treasury at its sequence, nothing held, and every treasury balance the ledger's.
    let ledger = DevLedger::start(DevLedgerConfig {
        data: Some(work.join("ledger.db")),
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap();
    let store = SqliteStore::open(SqliteConfig::new(&outbox)).await.unwrap();
    let report = audit_with_treasury(&store, &ledger, &treasury).await;
    report.assert_clean();
    assert!(report.events > 120, "the 120 payouts and more: {report}");
    assert_eq!(
        (report.refused, report.applied),
        (1, report.events),
        "{report}"
    );
    assert!(
        treasury_balances(&treasury).len() > 24,
        "the treasury holds every merchant's accounts"
    );
    ledger.shutdown().await;
}
