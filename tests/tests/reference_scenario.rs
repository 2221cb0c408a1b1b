//! The reference scenario (docs/ARCHITECTURE.md) end to end, as a user runs it: `outbox demo` on a fresh folder, then every
//! claim of its summary checked again from the files it left behind.

mod common;

use std::process::Command;

use common::outbox_binary;
use outbox_core::Ledger;
use outbox_ledger_dev::{DevLedger, DevLedgerConfig};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
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
    let applied: Vec<i64> = query(&treasury, "SELECT count(*) FROM inbox_messages");
    let enqueued: Vec<i64> = query(&outbox, "SELECT count(*) FROM outbox_events");
    assert_eq!(
        applied, enqueued,
        "not every instruction was applied exactly once"
    );

    // The ledger's own state, reopened from its file, agrees with the treasury table.
    let ledger = DevLedger::start(DevLedgerConfig {
        data: Some(work.join("ledger.db")),
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap();
    let client = FormanceLedger::new(&FormanceConfig::new(ledger.url(), "payouts")).unwrap();
    let rows: Vec<(String, i64)> = {
        let conn = Connection::open(&treasury).unwrap();
        let mut stmt = conn
            .prepare("SELECT account, balance FROM treasury_balances WHERE account != 'world'")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert!(rows.len() > 24);
    for (account, balance) in rows {
        let on_ledger = client.aggregate_balances(&account).await.unwrap();
        assert_eq!(
            on_ledger.values().copied().sum::<i128>(),
            i128::from(balance),
            "{account}"
        );
    }
    ledger.shutdown().await;
}
