//! `outbox check` as a release pipeline runs it: the real binary against a healthy
//! deployment (SQLite and PostgreSQL: outbox relayed to the dev ledger, a consumer
//! inbox that applied it, a fan-out store), then with each control broken in turn.
//! Each broken control fails exactly its own check, naming it, with a non-zero exit.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use common::postgres::PgOutbox;
use common::*;
use outbox_bins::demo::Scenario;
use outbox_core::{
    Dispatcher, EventId, InboxEngine, InboxMessage, MessageKind, OutboxEvent, RunMode, Store,
};
use outbox_ledger_dev::RunningDevLedger;
use outbox_store_postgres::PgInbox;
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore, SqliteInbox, SqliteStore};
use rusqlite::Connection;
use serde_json::Value;
use tokio::sync::watch;

const CONSUMER: &str = "treasury";

/// The message Hop 2 brings the consumer for `event`.
fn message(event: &OutboxEvent) -> InboxMessage {
    let kind = match event.payload.split().unwrap().0 {
        outbox_core::PayloadKind::Post => MessageKind::Committed,
        outbox_core::PayloadKind::Revert { .. } => MessageKind::Reverted,
    };
    InboxMessage {
        instruction_id: event.event_id.to_string(),
        account: event.account.clone(),
        sequence: event.sequence,
        kind,
        payload: b"{}".to_vec(),
    }
}

async fn check(args: &[String]) -> (Output, Value) {
    let output = tokio::process::Command::new(outbox_binary())
        .arg("check")
        .args(args)
        .arg("--json")
        .env("OUTBOX_LOG", "error")
        .output()
        .await
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, report)
}

fn statuses(report: &Value) -> Vec<(u64, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["number"].as_u64().unwrap(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// All PASS or NOT CHECKED (with a reason), in money order, exit 0; checks 1–4 PASS.
fn assert_healthy(output: &Output, report: &Value) {
    assert!(
        output.status.success(),
        "{report:#}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report["ok"], true);
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Commit", "Relay", "Dedup", "Order", "Audit"]);
    for check in report["checks"].as_array().unwrap() {
        for part in check["parts"].as_array().unwrap() {
            match part["status"].as_str().unwrap() {
                "PASS" => {}
                "NOT_CHECKED" => assert!(
                    !part["detail"].as_str().unwrap().is_empty(),
                    "NOT CHECKED says why: {part:#}"
                ),
                other => panic!("{other}: {part:#}"),
            }
        }
    }
    let statuses = statuses(report);
    assert!(statuses[..4].iter().all(|(_, s)| s == "PASS"), "{report:#}");
    let retention = report["checks"][4]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["control"].as_str().unwrap().contains("retention"))
        .expect("a retention part");
    assert_eq!(retention["status"], "NOT_CHECKED");
}

/// The retention part of check 5.
fn retention_part(report: &Value) -> Value {
    report["checks"][4]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["control"].as_str().unwrap().contains("retention"))
        .expect("a retention part")
        .clone()
}

/// Stores a retention policy through the real command.
async fn retention_set(database: &str, keep: &str, ledger_keeps: &str) {
    let out = tokio::process::Command::new(outbox_binary())
        .args(["retention", "set", "--database", database])
        .args(["--keep", keep, "--ledger-keeps", ledger_keeps])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Only check `number` failed, through the part whose control contains `control`,
/// with a remedy; the exit is non-zero and names the check.
fn assert_only_failure(output: &Output, report: &Value, number: u64, control: &str) {
    assert!(!output.status.success(), "{report:#}");
    assert_eq!(report["ok"], false);
    for (n, status) in statuses(report) {
        if n == number {
            assert_eq!(status, "FAIL", "check {n}: {report:#}");
        } else {
            assert_ne!(status, "FAIL", "check {n} failed too: {report:#}");
        }
    }
    let check = &report["checks"][(number - 1) as usize];
    let failed: Vec<&Value> = check["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "FAIL")
        .collect();
    assert_eq!(failed.len(), 1, "{check:#}");
    assert!(
        failed[0]["control"].as_str().unwrap().contains(control),
        "{control:?} not named: {check:#}"
    );
    assert!(!failed[0]["remedy"].as_str().unwrap_or_default().is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let name = check["name"].as_str().unwrap();
    assert!(
        stderr.contains(&format!("check FAILED: {number}. {name}")),
        "{stderr}"
    );
}

// -- SQLite ------------------------------------------------------------------------

struct SqliteDeployment {
    outbox: Outbox,
    consumer: PathBuf,
    fanout: PathBuf,
    stored: Vec<OutboxEvent>,
    _ledger: RunningDevLedger,
}

impl SqliteDeployment {
    /// The reference scenario enqueued, relayed to a dev ledger, applied by a
    /// consumer's inbox; a fan-out store beside them.
    async fn start() -> Self {
        let outbox = Outbox::new().await;
        let stored = outbox.enqueue(&Scenario::build(4, 2).events);
        let ledger = dev_ledger(None).await;
        let summary = drain(
            &outbox,
            client(&ledger, Duration::from_secs(10)),
            quick_config(),
        )
        .await;
        // The scenario holds one payout the ledger refuses (INSUFFICIENT_FUND).
        assert_eq!(
            (summary.accepted, summary.rejected),
            (stored.len() as u64 - 1, 1)
        );
        let consumer = outbox.dir().join("consumer.db");
        SqliteStore::open(SqliteConfig::new(&consumer))
            .await
            .unwrap();
        let mut conn = Connection::open(&consumer).unwrap();
        let engine = InboxEngine::new(CONSUMER);
        for event in &stored {
            let tx = conn.transaction().unwrap();
            let mut inbox = SqliteInbox::new(&tx);
            let mut impact = |_: &mut SqliteInbox<'_>, _: &InboxMessage| Ok(());
            engine
                .accept(&mut inbox, message(event), &mut impact)
                .await
                .unwrap();
            tx.commit().unwrap();
        }
        let fanout = outbox.dir().join("fanout.db");
        SqliteFanoutStore::open(SqliteConfig::new(&fanout))
            .await
            .unwrap();
        Self {
            outbox,
            consumer,
            fanout,
            stored,
            _ledger: ledger,
        }
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--database".into(),
            self.outbox.url(),
            "--consumer-database".into(),
            format!("sqlite://{}", self.consumer.display()),
            "--fanout-database".into(),
            format!("sqlite://{}", self.fanout.display()),
        ]
    }

    fn outbox_sql(&self, sql: &str) {
        Connection::open(&self.outbox.path)
            .unwrap()
            .execute_batch(sql)
            .unwrap();
    }

    fn consumer_sql(&self, sql: &str) {
        Connection::open(&self.consumer)
            .unwrap()
            .execute_batch(sql)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_sqlite_deployment_passes_every_check() {
    let d = SqliteDeployment::start().await;
    let (output, report) = check(&d.args()).await;
    assert_healthy(&output, &report);
    let relay = &report["checks"][1]["parts"];
    assert!(
        relay[2]["detail"]
            .as_str()
            .unwrap()
            .contains("5 of the 5 most recent payloads"),
        "{relay:#}"
    );
    // The check wrote nothing: no row, no delivery, no inbox marker of its own.
    let conn = Connection::open(&d.outbox.path).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM outbox_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, d.stored.len());
    let consumer = Connection::open(&d.consumer).unwrap();
    let markers: i64 = consumer
        .query_row("SELECT count(*) FROM inbox_messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(markers as usize, d.stored.len());
}

/// With a stored policy the retention part is checked, not skipped: the outbox keeps
/// at least as long as the ledger says it keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_retention_policy_is_checked_against_the_ledgers() {
    let d = SqliteDeployment::start().await;
    retention_set(&d.outbox.url(), "400d", "400d").await;
    let (output, report) = check(&d.args()).await;
    assert!(output.status.success(), "{report:#}");
    let part = retention_part(&report);
    assert_eq!(part["status"], "PASS", "{part:#}");
    assert!(
        part["detail"].as_str().unwrap().contains("400d"),
        "{part:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_consumer_database_dedup_is_not_checked_and_says_why() {
    let d = SqliteDeployment::start().await;
    let (output, report) = check(&d.args()[..2]).await;
    assert!(output.status.success());
    assert_eq!(report["checks"][2]["status"], "NOT_CHECKED");
    assert!(
        report["checks"][2]["parts"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("--consumer-database")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schema_behind_fails_commit() {
    let d = SqliteDeployment::start().await;
    d.outbox_sql("PRAGMA user_version = 2");
    let (output, report) = check(&d.args()).await;
    assert_only_failure(
        &output,
        &report,
        1,
        "outbox schema at the current migration",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_progress_on_the_event_rows_fails_relay() {
    let d = SqliteDeployment::start().await;
    d.outbox_sql("ALTER TABLE outbox_events ADD COLUMN sent_at INTEGER");
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 2, "relay progress in relay_cursors");
    assert!(
        report["checks"][1]["parts"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("sent_at")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_without_idempotency_fails_relay() {
    let d = SqliteDeployment::start().await;
    let broken = dev_ledger(None).await;
    broken.faults().ignore_idempotency_keys(true);
    let mut args = d.args();
    args.extend(["--ledger-url".into(), broken.url()]);
    let (output, report) = check(&args).await;
    assert_only_failure(&output, &report, 2, "the ledger's idempotency");
    let detail = report["checks"][1]["parts"][2]["detail"].as_str().unwrap();
    assert!(detail.contains("step 2"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_inbox_keyed_on_something_else_fails_dedup() {
    let d = SqliteDeployment::start().await;
    d.consumer_sql(
        "CREATE TABLE inbox_by_sequence (
             consumer TEXT NOT NULL, instruction_id TEXT NOT NULL, account TEXT NOT NULL,
             sequence INTEGER NOT NULL, kind TEXT NOT NULL, applied_at INTEGER NOT NULL,
             PRIMARY KEY (consumer, account, sequence)) WITHOUT ROWID;
         INSERT INTO inbox_by_sequence SELECT * FROM inbox_messages;
         DROP TABLE inbox_messages;
         ALTER TABLE inbox_by_sequence RENAME TO inbox_messages;",
    );
    let (output, report) = check(&d.args()).await;
    assert_only_failure(
        &output,
        &report,
        3,
        "inbox keyed on (consumer, instruction_id)",
    );
    assert!(
        report["checks"][2]["parts"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("(account, consumer, sequence)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sequence_gap_fails_order_naming_the_account() {
    let d = SqliteDeployment::start().await;
    // A row written around enqueue, skipping a number (enqueue itself cannot).
    let last = d
        .stored
        .iter()
        .filter(|e| e.account.as_str() == "merchants:4471")
        .map(|e| e.sequence)
        .max()
        .unwrap();
    let event = payout("4471", 100);
    let (id, payload) = event.encode(last + 2).unwrap();
    Connection::open(&d.outbox.path)
        .unwrap()
        .execute(
            "INSERT INTO outbox_events (event_id, account, sequence, payload, created_at) VALUES (?1, 'merchants:4471', ?2, ?3, 0)",
            rusqlite::params![id.to_string(), (last + 2) as i64, payload.as_bytes()],
        )
        .unwrap();
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 4, "gapless from 1");
    let detail = report["checks"][3]["parts"][0]["detail"].as_str().unwrap();
    assert_eq!(
        detail,
        format!("merchants:4471 is missing sequence {}", last + 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_ahead_of_the_outbox_fails_order() {
    let d = SqliteDeployment::start().await;
    d.consumer_sql(
        "UPDATE inbox_accounts SET last_applied = last_applied + 5 WHERE account = 'merchants:1001'",
    );
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 4, "high-water marks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_held_past_the_alarm_fails_order() {
    let d = SqliteDeployment::start().await;
    let hour_ago = chrono::Utc::now().timestamp_micros() - 3_600_000_000;
    d.consumer_sql(&format!(
        "INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
         VALUES ('{CONSUMER}', 'merchants:1001', 99, '{}', 'committed', x'7b7d', {hour_ago})",
        EventId::new()
    ));
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 4, "no held gap older than the alarm");
    // Younger than a longer alarm, it holds nothing.
    let mut args = d.args();
    args.extend(["--gap-alarm-secs".into(), "7200".into()]);
    let (output, _) = check(&args).await;
    assert!(output.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_outbox_triggers_dropped_fail_audit() {
    let d = SqliteDeployment::start().await;
    d.outbox_sql("DROP TRIGGER outbox_events_no_update; DROP TRIGGER outbox_events_no_delete;");
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 5, "of outbox_events refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_delivery_delete_trigger_dropped_fails_audit() {
    let d = SqliteDeployment::start().await;
    d.outbox_sql("DROP TRIGGER outbox_deliveries_no_delete");
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 5, "of outbox_deliveries refused");
    let part = &report["checks"][4]["parts"][1];
    assert!(
        part["detail"]
            .as_str()
            .unwrap()
            .starts_with("DELETE succeeded")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fanout_triggers_dropped_fail_audit() {
    let d = SqliteDeployment::start().await;
    Connection::open(&d.fanout)
        .unwrap()
        .execute_batch("DROP TRIGGER fanout_messages_no_update")
        .unwrap();
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 5, "of fanout_messages refused");
}

// -- PostgreSQL ----------------------------------------------------------------------

struct PgDeployment {
    outbox: PgOutbox,
    consumer: PgOutbox,
    stored: Vec<OutboxEvent>,
    _ledger: RunningDevLedger,
}

impl PgDeployment {
    /// As the SQLite one; the fan-out tables are those of the outbox's schema.
    async fn start() -> Option<Self> {
        let outbox = PgOutbox::new().await?;
        let consumer = PgOutbox::new().await?;
        let stored = outbox.enqueue(&Scenario::build(4, 2).events).await;
        let ledger = dev_ledger(None).await;
        let relay = outbox.store.polling_relay("relay").await.unwrap();
        let dispatcher = Dispatcher::open(
            Arc::new(outbox.store.clone()),
            Box::new(relay),
            Arc::new(client(&ledger, Duration::from_secs(10))),
            quick_config(),
        )
        .await
        .unwrap();
        // A daemon stopped once everything is delivered: a drain would end early while
        // a long transaction elsewhere on the server holds the reader's horizon back.
        let (stop, stopped) = watch::channel(false);
        let running = tokio::spawn(dispatcher.run(RunMode::Daemon, stopped));
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        for event in &stored {
            while outbox
                .store
                .deliveries(event.event_id)
                .await
                .unwrap()
                .is_empty()
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the relay never delivered {}",
                    event.event_id
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        stop.send(true).unwrap();
        let summary = running.await.unwrap().unwrap();
        // The scenario holds one payout the ledger refuses (INSUFFICIENT_FUND).
        assert_eq!(
            (summary.accepted, summary.rejected),
            (stored.len() as u64 - 1, 1)
        );
        let engine = InboxEngine::new(CONSUMER);
        for event in &stored {
            let mut tx = consumer.store.pool().begin().await.unwrap();
            let mut impact = |_: &mut PgInbox<'_>, _: &InboxMessage| Ok(());
            engine
                .accept(&mut PgInbox::new(&mut tx), message(event), &mut impact)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        Some(Self {
            outbox,
            consumer,
            stored,
            _ledger: ledger,
        })
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--database".into(),
            self.outbox.url(),
            "--consumer-database".into(),
            self.consumer.url(),
            "--fanout-database".into(),
            self.outbox.url(),
        ]
    }

    async fn outbox_sql(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(self.outbox.store.pool())
            .await
            .unwrap();
    }

    async fn consumer_sql(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(self.consumer.store.pool())
            .await
            .unwrap();
    }

    async fn drop(self) {
        self.outbox.drop(None).await;
        self.consumer.drop(None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_postgres_deployment_passes_every_check() {
    let Some(d) = PgDeployment::start().await else {
        return;
    };
    let (output, report) = check(&d.args()).await;
    assert_healthy(&output, &report);
    assert_eq!(report["checks"][4]["parts"].as_array().unwrap().len(), 5);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(d.outbox.store.pool())
        .await
        .unwrap();
    assert_eq!(rows as usize, d.stored.len(), "the check left no row");
    retention_set(&d.outbox.url(), "forever", "400d").await;
    let (output, report) = check(&d.args()).await;
    assert!(output.status.success(), "{report:#}");
    assert_eq!(retention_part(&report)["status"], "PASS", "{report:#}");
    d.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schema_behind_fails_commit() {
    let Some(d) = PgDeployment::start().await else {
        return;
    };
    d.outbox_sql(
        "DELETE FROM outbox_schema_migrations WHERE version = (SELECT max(version) FROM outbox_schema_migrations)",
    )
    .await;
    let (output, report) = check(&d.args()).await;
    assert_only_failure(
        &output,
        &report,
        1,
        "outbox schema at the current migration",
    );
    d.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_progress_on_the_event_rows_fails_relay() {
    let Some(d) = PgDeployment::start().await else {
        return;
    };
    d.outbox_sql("ALTER TABLE outbox_events ADD COLUMN relayed boolean")
        .await;
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 2, "relay progress in relay_cursors");
    d.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_inbox_keyed_on_something_else_fails_dedup() {
    let Some(d) = PgDeployment::start().await else {
        return;
    };
    d.consumer_sql(
        "ALTER TABLE inbox_messages DROP CONSTRAINT inbox_messages_pkey;
         ALTER TABLE inbox_messages ADD PRIMARY KEY (consumer, account, sequence);",
    )
    .await;
    let (output, report) = check(&d.args()).await;
    assert_only_failure(
        &output,
        &report,
        3,
        "inbox keyed on (consumer, instruction_id)",
    );
    d.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sequence_gap_fails_order_naming_the_account() {
    let Some(d) = PgDeployment::start().await else {
        return;
    };
    // A counter moved outside an enqueue: the next enqueue skips a number.
    d.outbox_sql(
        "UPDATE outbox_sequences SET last_sequence = last_sequence + 1 WHERE account = 'merchants:1002'",
    )
    .await;
    let next = d.outbox.enqueue(&[payout("1002", 1)]).await;
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 4, "gapless from 1");
    assert_eq!(
        report["checks"][3]["parts"][0]["detail"],
        format!(
            "merchants:1002 is missing sequence {}",
            next[0].sequence - 1
        )
    );
    d.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outbox_trigger_dropped_fails_audit() {
    let Some(d) = PgDeployment::start().await else {
        return;
    };
    d.outbox_sql("DROP TRIGGER outbox_events_append_only ON outbox_events")
        .await;
    let (output, report) = check(&d.args()).await;
    assert_only_failure(&output, &report, 5, "of outbox_events refused");
    d.drop().await;
}
