//! `outbox audit EVENT_ID` on real services: the real `outbox relay`, `outbox fanout`
//! and `outbox consume` processes, the dev ledger over HTTP (its webhooks signed and
//! delivered to the fan-out), SQLite files (and, in one case, PostgreSQL schemas). Each
//! case runs the audit binary and checks its JSON report and its exit status:
//!
//! - a payout replayed after the relay was SIGKILLed between the ledger's accept and
//!   its record: one ledger transaction, one delivery record marked Idempotency-Hit;
//! - a refused payout: the Rejected record, the rejection notice on the ledger, the
//!   rejected message on Hop 2, the consumer's rejected marker, the exception;
//! - a reversed payout: its revert transaction and the revert's own event;
//! - two genuine payouts of the same amount to the same merchant: two instructions;
//! - a payout the ledger holds twice (posted again under another key): a finding,
//!   non-zero;
//! - an unknown id, a bad id, a database that does not exist: non-zero, named;
//! - the outbox alone: what it knows, and which parts it could not see;
//! - `--verify-log`: an intact chain passes; a corrupted hash or payload fails,
//!   naming the log id where the chain breaks.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::postgres::{PgOutbox, server_url};
use common::process::Process;
use common::*;
use outbox_core::{EventId, NewEvent, OutboxEvent};
use outbox_ledger_dev::{
    DevLedger, DevLedgerConfig, RunningDevLedger, WebhookBackoff, WebhookTarget,
};
use outbox_testkit::ports::free_port;
use outbox_transport_http::WEBHOOK_PATH;
use serde_json::Value;

/// The fan-out's signing secret towards the consumer.
const PUBLISH_SECRET: &str = "audit-hop2-secret";

/// What one `outbox audit` run printed, and how it ended.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "not a JSON report ({e}):\n{}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

/// `outbox audit <args>`, bounded in time; the relay's and ledger's variables unset,
/// so only the flags given count.
async fn audit(args: &[String]) -> Run {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(outbox_binary())
            .arg("audit")
            .args(args)
            .env_remove("OUTBOX_DATABASE")
            .env_remove("OUTBOX_LEDGER__URL")
            .env_remove("OUTBOX_LEDGER__NAME")
            .env_remove("OUTBOX_LEDGER__TOKEN")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("outbox audit finished in time")
    .unwrap();
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// Where each database of one run lives (SQLite files, or PostgreSQL schemas).
struct Databases {
    outbox: String,
    fanout: String,
    consumer: String,
}

/// The whole pipeline: relay → dev ledger → signed webhooks → `outbox fanout` →
/// signed HTTP → `outbox consume`.
struct Pipeline {
    databases: Databases,
    ledger: RunningDevLedger,
    _fanout: Process,
    _consumer: Process,
}

impl Pipeline {
    async fn start(databases: Databases) -> Self {
        let fanout_port = free_port();
        let consumer_port = free_port();
        let consumer = Process::start(
            "consume",
            &strings(&[
                "consume",
                "--from",
                &format!("http://127.0.0.1:{consumer_port}"),
                "--secret",
                PUBLISH_SECRET,
                "--database",
                &databases.consumer,
            ]),
            "consume: treasury",
        )
        .await;
        let fanout = Process::start(
            "fanout",
            &strings(&[
                "fanout",
                "--listen",
                &format!("127.0.0.1:{fanout_port}"),
                "--database",
                &databases.fanout,
                "--secret",
                SECRET,
                "--to",
                &format!("http://127.0.0.1:{consumer_port}/hop2/messages"),
                "--publish-secret",
                PUBLISH_SECRET,
                "--poll-interval-ms",
                "50",
            ]),
            "fanout: intake on",
        )
        .await;
        let ledger = DevLedger::start(DevLedgerConfig {
            webhooks: vec![WebhookTarget {
                url: format!("http://127.0.0.1:{fanout_port}{WEBHOOK_PATH}"),
                secret: SECRET.to_owned(),
            }],
            webhook_backoff: WebhookBackoff {
                initial: Duration::from_millis(20),
                max: Duration::from_millis(200),
                max_attempts: 100,
            },
            create_ledgers: vec![LEDGER.to_owned()],
            ..DevLedgerConfig::default()
        })
        .await
        .unwrap();
        Self {
            databases,
            ledger,
            _fanout: fanout,
            _consumer: consumer,
        }
    }

    /// `outbox relay --once` to the end of the outbox.
    async fn relay(&self) {
        let run = relay_process(&self.databases.outbox, &self.ledger.url(), &["--once"])
            .output()
            .await
            .unwrap();
        assert!(
            run.status.success(),
            "relay: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }

    /// Every flag of a full audit of `event`.
    fn audit_args(&self, event: EventId, extra: &[&str]) -> Vec<String> {
        let mut args = strings(&[
            &event.to_string(),
            "--database",
            &self.databases.outbox,
            "--ledger-url",
            &self.ledger.url(),
            "--ledger-name",
            LEDGER,
            "--fanout-database",
            &self.databases.fanout,
            "--consumer-database",
            &self.databases.consumer,
            "--json",
        ]);
        args.extend(strings(extra));
        args
    }

    /// Waits (bounded) until an audit of each of `events` sees the consumer's marker
    /// and every destination past its messages: Hop 2 has settled for them.
    async fn settled(&self, events: &[&OutboxEvent]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for event in events {
            loop {
                let report = audit(&self.audit_args(event.event_id, &[])).await.json();
                let applied = !report["consumer"]["inbox"].as_array().unwrap().is_empty();
                let messages = report["hop2"]["messages"].as_array().unwrap();
                let published = !messages.is_empty()
                    && messages.iter().all(|m| {
                        let states = m["destinations"].as_array().unwrap();
                        !states.is_empty() && states.iter().all(|d| d["passed"] == true)
                    });
                if applied && published {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "Hop 2 never settled for {}: {report:#}",
                    event.event_id
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// SQLite databases in the outbox's directory.
fn sqlite_databases(outbox: &Outbox) -> Databases {
    let file = |name: &str| -> PathBuf { outbox.dir().join(name) };
    Databases {
        outbox: outbox.url(),
        fanout: format!("sqlite://{}", file("fanout.db").display()),
        consumer: format!("sqlite://{}", file("treasury.db").display()),
    }
}

fn single<'a>(report: &'a Value, section: &str) -> &'a Value {
    let items = report
        .pointer(section)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{section} missing: {report:#}"));
    assert_eq!(items.len(), 1, "{section}: {report:#}");
    &items[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replay_after_a_relay_crash_shows_one_transaction_and_a_hit() {
    let outbox = Outbox::new().await;
    let pipeline = Pipeline::start(sqlite_databases(&outbox)).await;
    let stored = outbox.enqueue(&[
        fund("4471", 100_000_000),
        payout("4471", 48_500_000),
        payout("4471", 1_000),
    ]);
    let target = &stored[1];
    let ledger = &pipeline.ledger;
    ledger
        .faults()
        .hold_after_commit_matching(&target.event_id.to_string(), Duration::from_secs(60));
    let mut first = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .spawn()
        .unwrap();
    let committed = wait_for_ledger_commit(ledger, target.event_id, &mut first).await;
    first.kill().await.unwrap(); // SIGKILL: no chance to record the accept
    assert!(!first.wait().await.unwrap().success());
    ledger.faults().clear();
    pipeline.relay().await;
    pipeline.settled(&[target]).await;

    let run = audit(&pipeline.audit_args(target.event_id, &[])).await;
    assert!(run.success, "{}{}", run.stdout, run.stderr);
    let report = run.json();
    assert_eq!(report["event_id"], target.event_id.to_string());
    assert_eq!(
        (&report["outbox"]["account"], &report["outbox"]["sequence"]),
        (&Value::from("merchants:4471"), &Value::from(2))
    );
    let attempt = single(&report, "/deliveries");
    assert_eq!(
        (
            &attempt["outcome"],
            &attempt["idempotency_hit"],
            &attempt["ledger_tx_id"]
        ),
        (
            &Value::from("replayed"),
            &Value::from(true),
            &Value::from(committed.id)
        ),
        "{report:#}"
    );
    let tx = single(&report, "/ledger/transactions");
    assert_eq!(tx["id"], committed.id);
    assert_eq!(
        tx["metadata"]["outbox_event_id"],
        target.event_id.to_string()
    );
    assert_eq!(tx["postings"][0]["amount"], 48_500_000);
    assert_eq!(tx["reverted"], false);
    let message = single(&report, "/hop2/messages");
    assert_eq!(
        (&message["kind"], &message["ledger_tx_id"]),
        (&Value::from("committed"), &Value::from(committed.id))
    );
    let marker = single(&report, "/consumer/inbox");
    assert_eq!(
        (&marker["consumer"], &marker["kind"]),
        (&Value::from("treasury"), &Value::from("committed"))
    );
    assert_eq!(report["findings"], Value::Array(vec![]));
    assert_eq!(report["consistent"], true);
    assert_eq!(report["not_seen"], Value::Array(vec![]));

    // The readable report says it in words.
    let mut args = pipeline.audit_args(target.event_id, &[]);
    args.retain(|a| a != "--json");
    let text = audit(&args).await;
    assert!(text.success, "{}", text.stderr);
    assert!(
        text.stdout.contains(&format!(
            "replayed, ledger tx {} (Idempotency-Hit",
            committed.id
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("verdict  consistent"),
        "{}",
        text.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rejected_event_shows_the_refusal_the_notice_and_the_rejected_marker() {
    let outbox = Outbox::new().await;
    let pipeline = Pipeline::start(sqlite_databases(&outbox)).await;
    let stored = outbox.enqueue(&[
        fund("7", 10_000),
        payout("7", 1_000_000),
        payout("7", 2_500),
    ]);
    pipeline.relay().await;
    let refused = &stored[1];
    pipeline.settled(&[refused, &stored[2]]).await;

    let run = audit(&pipeline.audit_args(refused.event_id, &[])).await;
    assert!(run.success, "{}{}", run.stdout, run.stderr);
    let report = run.json();
    let attempt = single(&report, "/deliveries");
    assert_eq!(
        (&attempt["outcome"], &attempt["error_code"]),
        (&Value::from("rejected"), &Value::from("INSUFFICIENT_FUND"))
    );
    assert_eq!(report["ledger"]["transactions"], Value::Array(vec![]));
    assert_eq!(
        report["ledger"]["rejection_notice"],
        serde_json::json!({"account": "merchants:7", "code": "INSUFFICIENT_FUND"})
    );
    let message = single(&report, "/hop2/messages");
    assert_eq!(
        (&message["kind"], &message["ledger_tx_id"]),
        (&Value::from("rejected"), &Value::Null)
    );
    let marker = single(&report, "/consumer/inbox");
    assert_eq!(marker["kind"], "rejected");
    let exception = single(&report, "/exceptions");
    assert_eq!(
        (
            &exception["database"],
            &exception["kind"],
            &exception["account"],
            &exception["sequence"]
        ),
        (
            &Value::from("outbox"),
            &Value::from("rejected"),
            &Value::from("merchants:7"),
            &Value::from(2)
        )
    );
    assert_eq!(report["consistent"], true, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reversed_event_shows_its_revert_transaction() {
    let outbox = Outbox::new().await;
    let pipeline = Pipeline::start(sqlite_databases(&outbox)).await;
    let funded = outbox.enqueue(&[fund("4471", 100_000_000), payout("4471", 48_500_000)]);
    let paid = &funded[1];
    let reversal = outbox.enqueue(&[revert("merchants:4471", paid.event_id)]);
    let reversal = &reversal[0];
    pipeline.relay().await;
    pipeline.settled(&[paid, reversal]).await;

    let report = audit(&pipeline.audit_args(paid.event_id, &[])).await.json();
    let tx = single(&report, "/ledger/transactions");
    assert_eq!(tx["reverted"], true, "{report:#}");
    let revert_tx = &tx["revert"];
    assert_eq!(revert_tx["event_id"], reversal.event_id.to_string());
    assert_eq!(
        revert_tx["metadata"]["com.formance.spec/state/reverts"],
        tx["id"].to_string()
    );
    assert_eq!(report["consistent"], true, "{report:#}");

    // The reversal's own audit: a revert command, its transaction reverts the payout's.
    let report = audit(&pipeline.audit_args(reversal.event_id, &[]))
        .await
        .json();
    assert_eq!(report["outbox"]["command"], "revert");
    assert_eq!(report["outbox"]["reverts_event"], paid.event_id.to_string());
    let own = single(&report, "/ledger/transactions");
    assert_eq!(own["id"], revert_tx["id"]);
    assert_eq!(own["reverts"], tx["id"]);
    assert_eq!(single(&report, "/hop2/messages")["kind"], "reverted");
    assert_eq!(single(&report, "/consumer/inbox")["kind"], "reverted");
    assert_eq!(report["consistent"], true, "{report:#}");
}

/// The outbox and the dev ledger (no Hop 2), everything relayed.
async fn outbox_and_ledger(events: &[NewEvent]) -> (Outbox, RunningDevLedger, Vec<OutboxEvent>) {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let stored = outbox.enqueue(events);
    let run = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .output()
        .await
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    (outbox, ledger, stored)
}

fn ledger_args(outbox: &Outbox, ledger: &RunningDevLedger, event: EventId) -> Vec<String> {
    strings(&[
        &event.to_string(),
        "--database",
        &outbox.url(),
        "--ledger-url",
        &ledger.url(),
        "--ledger-name",
        LEDGER,
        "--json",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_genuine_payouts_of_the_same_amount_are_two_instructions_and_two_transactions() {
    let (outbox, ledger, stored) = outbox_and_ledger(&[
        fund("4471", 100_000_000),
        payout("4471", 48_500_000),
        payout("4471", 48_500_000),
    ])
    .await;
    let mut seen = Vec::new();
    for event in &stored[1..] {
        let run = audit(&ledger_args(&outbox, &ledger, event.event_id)).await;
        assert!(run.success, "{}{}", run.stdout, run.stderr);
        let report = run.json();
        let tx = single(&report, "/ledger/transactions");
        assert_eq!(tx["postings"][0]["amount"], 48_500_000);
        assert_eq!(
            tx["postings"][0]["destination"],
            "merchants:4471:payouts:pending"
        );
        assert_eq!(single(&report, "/deliveries")["outcome"], "accepted");
        seen.push((
            report["event_id"].clone(),
            report["outbox"]["sequence"].clone(),
            tx["id"].clone(),
        ));
    }
    assert_ne!(seen[0].0, seen[1].0, "two event ids");
    assert_eq!((&seen[0].1, &seen[1].1), (&Value::from(2), &Value::from(3)));
    assert_ne!(seen[0].2, seen[1].2, "two ledger transactions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payout_the_ledger_holds_twice_is_a_finding_and_a_non_zero_exit() {
    use outbox_core::Ledger;
    let (outbox, ledger, stored) =
        outbox_and_ledger(&[fund("4471", 100_000_000), payout("4471", 1_000)]).await;
    let event = &stored[1];
    // The stored body again under another key: what a relay without idempotency does.
    let (_, body) = event.payload.split().unwrap();
    client(&ledger, Duration::from_secs(10))
        .post(EventId::new(), body)
        .await
        .unwrap();
    let run = audit(&ledger_args(&outbox, &ledger, event.event_id)).await;
    assert!(!run.success, "{}", run.stdout);
    let report = run.json();
    assert_eq!(
        report["ledger"]["transactions"].as_array().unwrap().len(),
        2
    );
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report:#}");
    assert!(
        findings[0]
            .as_str()
            .unwrap()
            .contains("2 ledger transactions carry this event id"),
        "{report:#}"
    );
    assert_eq!(report["consistent"], false);
    assert!(
        run.stderr.contains("FAILED: 2 ledger transactions"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_id_a_bad_id_and_a_missing_database_exit_non_zero_naming_them() {
    let (outbox, ledger, _) = outbox_and_ledger(&[fund("1", 100)]).await;
    let unknown = EventId::new();
    let run = audit(&ledger_args(&outbox, &ledger, unknown)).await;
    assert!(!run.success, "{}", run.stdout);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.contains(&format!(
            "unknown event id {unknown}: the outbox at {}",
            outbox.url()
        )),
        "{}",
        run.stderr
    );

    let run = audit(&strings(&["not-an-id", "--database", &outbox.url()])).await;
    assert!(!run.success);
    assert!(run.stderr.contains("EVENT_ID"), "{}", run.stderr);

    let missing = outbox.dir().join("no-such-fanout.db");
    let run = audit(&strings(&[
        &EventId::new().to_string(),
        "--database",
        &outbox.url(),
        "--fanout-database",
        &format!("sqlite://{}", missing.display()),
    ]))
    .await;
    assert!(!run.success);
    assert!(
        run.stderr.contains("no SQLite database at") && run.stderr.contains("--fanout-database"),
        "{}",
        run.stderr
    );
    assert!(
        !missing.exists(),
        "the audit created the database it was told to read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_only_the_outbox_it_shows_what_the_outbox_knows_and_names_what_it_could_not_see() {
    let (outbox, _ledger, stored) =
        outbox_and_ledger(&[fund("4471", 100_000_000), payout("4471", 48_500_000)]).await;
    let event = &stored[1];
    let run = audit(&strings(&[
        &event.event_id.to_string(),
        "--database",
        &outbox.url(),
        "--json",
    ]))
    .await;
    assert!(run.success, "{}{}", run.stdout, run.stderr);
    let report = run.json();
    let payload = event.payload.as_bytes();
    assert_eq!(report["outbox"]["payload_bytes"], payload.len());
    assert_eq!(
        serde_json::to_vec(&report["outbox"]["payload"]).unwrap(),
        serde_json::to_vec(&serde_json::from_slice::<Value>(payload).unwrap()).unwrap()
    );
    assert_eq!(
        report["outbox"]["payload_sha256"].as_str().unwrap().len(),
        64
    );
    assert_eq!(single(&report, "/deliveries")["outcome"], "accepted");
    for part in ["ledger", "hop2", "consumer"] {
        assert_eq!(report[part], Value::Null, "{part}");
    }
    let parts: Vec<&str> = report["not_seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["part"].as_str().unwrap())
        .collect();
    assert_eq!(parts, ["ledger", "hop2", "consumer"]);
    assert_eq!(report["consistent"], true);

    let text = audit(&strings(&[
        &event.event_id.to_string(),
        "--database",
        &outbox.url(),
    ]))
    .await;
    assert!(text.success);
    assert!(
        text.stdout
            .contains("not seen\n  ledger    no --ledger-url"),
        "{}",
        text.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_log_passes_on_an_intact_chain() {
    let (outbox, ledger, stored) = outbox_and_ledger(&[
        fund("4471", 100_000_000),
        payout("4471", 48_500_000),
        payout("9", 1),
        fund("9", 5),
    ])
    .await;
    let event = &stored[1];
    let mut args = ledger_args(&outbox, &ledger, event.event_id);
    args.push("--verify-log".into());
    let run = audit(&args).await;
    assert!(run.success, "{}{}", run.stdout, run.stderr);
    let report = run.json();
    let tx_id = single(&report, "/ledger/transactions")["id"].clone();
    let log = &report["ledger"]["log"];
    assert_eq!(log["intact"], true, "{report:#}");
    assert_eq!(log["entry"]["idempotency_key"], event.event_id.to_string());
    assert_eq!(log["entry"]["type"], "NEW_TRANSACTION");
    assert_eq!(log["entry"]["transaction_id"], tx_id);
    assert_eq!(log["through"], log["entry"]["id"]);
    assert_eq!(
        log["checked"], log["entry"]["id"],
        "every log from the first one"
    );

    // A refused payout's entry is its rejection notice, keyed `<id>:rejected`.
    let mut args = ledger_args(&outbox, &ledger, stored[2].event_id);
    args.push("--verify-log".into());
    let report = audit(&args).await.json();
    assert_eq!(
        report["ledger"]["log"]["entry"]["type"], "SET_METADATA",
        "{report:#}"
    );
    assert_eq!(report["consistent"], true, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_log_fails_naming_the_log_where_a_corrupted_chain_breaks() {
    let (outbox, ledger, stored) = outbox_and_ledger(&[
        fund("1", 100),
        fund("2", 200),
        fund("3", 300),
        fund("4", 400),
    ])
    .await;
    let event = &stored[3];
    let mut args = ledger_args(&outbox, &ledger, event.event_id);
    args.push("--verify-log".into());
    let intact = audit(&args).await;
    assert!(intact.success, "{}", intact.stderr);
    let entry = intact.json()["ledger"]["log"]["entry"]["id"]
        .as_u64()
        .unwrap();
    assert!(entry >= 3, "{entry}");

    // A stored hash rewritten before the event's entry.
    ledger.faults().corrupt_log_hash(2);
    let run = audit(&args).await;
    assert!(!run.success, "{}", run.stdout);
    let report = run.json();
    let log = &report["ledger"]["log"];
    assert_eq!(
        (&log["intact"], &log["broken_at"]),
        (&Value::from(false), &Value::from(2))
    );
    assert_eq!(log["through"], 1);
    assert_eq!(report["consistent"], false);
    assert!(
        run.stderr.contains("chain BROKEN at log 2"),
        "{}",
        run.stderr
    );

    // A payload rewritten under its original hash: the event's own entry.
    ledger.faults().clear();
    ledger.faults().corrupt_log_data(entry);
    let mut text_args = args.clone();
    text_args.retain(|a| a != "--json");
    let run = audit(&text_args).await;
    assert!(!run.success);
    assert!(
        run.stdout
            .contains(&format!("FAILED   chain BROKEN at log {entry}")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("verdict  INCONSISTENT"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outbox_fanout_and_consumer_audit_a_replayed_payout() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let schema = |suffix: &str| format!("{}?schema={}_{suffix}", server_url(), outbox.schema);
    let databases = Databases {
        outbox: outbox.url(),
        fanout: schema("fanout"),
        consumer: schema("treasury"),
    };
    let pipeline = Pipeline::start(databases).await;
    let stored = outbox
        .enqueue(&[fund("4471", 100_000_000), payout("4471", 48_500_000)])
        .await;
    let target = &stored[1];
    let ledger = &pipeline.ledger;
    ledger
        .faults()
        .hold_after_commit_matching(&target.event_id.to_string(), Duration::from_secs(60));
    let mut first = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .spawn()
        .unwrap();
    let committed = wait_for_ledger_commit(ledger, target.event_id, &mut first).await;
    first.kill().await.unwrap();
    assert!(!first.wait().await.unwrap().success());
    ledger.faults().clear();
    pipeline.relay().await;
    pipeline.settled(&[target]).await;

    let run = audit(&pipeline.audit_args(target.event_id, &["--verify-log"])).await;
    assert!(run.success, "{}{}", run.stdout, run.stderr);
    let report = run.json();
    let attempt = single(&report, "/deliveries");
    assert_eq!(
        (&attempt["outcome"], &attempt["ledger_tx_id"]),
        (&Value::from("replayed"), &Value::from(committed.id))
    );
    assert_eq!(single(&report, "/ledger/transactions")["id"], committed.id);
    assert_eq!(report["ledger"]["log"]["intact"], true);
    assert_eq!(single(&report, "/hop2/messages")["kind"], "committed");
    assert_eq!(single(&report, "/consumer/inbox")["kind"], "committed");
    assert_eq!(report["consistent"], true, "{report:#}");

    drop(pipeline);
    let pool = outbox.store.pool().clone();
    for suffix in ["fanout", "treasury"] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {}_{suffix} CASCADE",
            outbox.schema
        )))
        .execute(&pool)
        .await;
    }
    outbox.drop(None).await;
}
