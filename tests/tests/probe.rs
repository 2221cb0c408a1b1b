//! `outbox probe` as a user runs it: the real binary on a JSON-lines file, against the
//! embedded dev ledger, a dev ledger told to misbehave, and through the proxy window.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::outbox_binary;
use outbox_bins::demo::Scenario;
use outbox_core::{LedgerCommand, NewEvent};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use serde_json::{Value, json};

/// One line of `outbox enqueue` input for `event`, its event id included.
fn line(event: &NewEvent) -> String {
    let mut value = match &event.command {
        LedgerCommand::Post(post) => serde_json::to_value(post).unwrap(),
        LedgerCommand::Revert(revert) => {
            json!({"revert": revert.event_id.to_string(), "metadata": revert.metadata})
        }
    };
    value["account"] = json!(event.account.as_str());
    value["event_id"] = json!(event.event_id.unwrap().to_string());
    value.to_string()
}

fn write(dir: &Path, lines: &[String]) -> PathBuf {
    let file = dir.join("payouts.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

async fn probe(args: &[&str]) -> (Output, Value) {
    let output = tokio::process::Command::new(outbox_binary())
        .arg("probe")
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

fn payloads(report: &Value) -> &Vec<Value> {
    report["payloads"].as_array().unwrap()
}

/// The verdicts of one payload's steps 1..=6, in order.
fn verdicts(payload: &Value) -> Vec<&str> {
    let steps = payload["steps"].as_array().unwrap();
    assert_eq!(
        steps
            .iter()
            .map(|s| s["step"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6],
        "{payload:#}"
    );
    steps
        .iter()
        .map(|s| s["verdict"].as_str().unwrap())
        .collect()
}

fn step(payload: &Value, n: u64) -> &Value {
    payload["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == n)
        .unwrap()
}

fn no_reference_payout() -> String {
    json!({"account": "merchants:9", "postings": [{"source": "merchants:9:available", "destination": "merchants:9:payouts:pending", "amount": 100, "asset": "USD/2"}]}).to_string()
}

/// The reference scenario's payouts (the demo's: merchant 4471's settlement credit,
/// payouts A and B of $485,000.00 each, the reversal of A, plus generated payouts).
fn reference_lines() -> Vec<String> {
    Scenario::build(4, 2).events.iter().map(line).collect()
}

async fn dev_ledger() -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig::default()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_scenario_passes_all_six_steps_against_the_embedded_dev_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), &reference_lines());
    let (output, report) = probe(&["--file", file.to_str().unwrap()]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report["summary"]["ok"], true, "{report:#}");
    assert_eq!(report["summary"]["fail"], 0);
    let payloads = payloads(&report);
    assert_eq!(payloads.len(), reference_lines().len(), "every line probed");
    for payload in payloads {
        assert_eq!(
            verdicts(payload),
            ["PASS"; 6],
            "every scenario event has a reference or is a revert: {payload:#}"
        );
        // Step 5 ran the real relay path and saw the replay as a hit.
        assert!(
            step(payload, 5)["detail"]
                .as_str()
                .unwrap()
                .contains("recorded `replayed`"),
            "{payload:#}"
        );
    }
    let reversal = payloads.iter().find(|p| p["kind"] == "revert").unwrap();
    assert_eq!(
        step(reversal, 6)["answers"][0]["error_code"],
        "ALREADY_REVERT"
    );
    let payout_a = payloads
        .iter()
        .find(|p| p["reference"] == "payout:settlement-2026-10-07:4471")
        .unwrap();
    assert_eq!(step(payout_a, 2)["answers"][0]["idempotency_hit"], true);
    assert_eq!(step(payout_a, 4)["answers"][0]["error_code"], "VALIDATION");
    assert_eq!(step(payout_a, 6)["answers"][0]["error_code"], "CONFLICT");
    assert!(
        report["crash_window"]
            .as_str()
            .unwrap()
            .contains("fault plan")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_line_is_reported_with_its_number_and_the_other_lines_are_probed() {
    let dir = tempfile::tempdir().unwrap();
    let float = json!({"account": "merchants:9", "postings": [{"source": "world", "destination": "merchants:9:available", "amount": 4850.5, "asset": "USD/2"}]}).to_string();
    let file = write(
        dir.path(),
        &[no_reference_payout(), float, "{not json".to_owned()],
    );
    let (output, report) = probe(&["--file", file.to_str().unwrap()]).await;
    assert!(!output.status.success(), "bad lines fail the probe");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("2 bad line(s)"), "{stderr}");
    let bad = report["bad_lines"].as_array().unwrap();
    assert_eq!(bad.len(), 2, "{report:#}");
    assert_eq!(bad[0]["line"], 2);
    assert_eq!(bad[0]["field"], "postings[0].amount");
    assert_eq!(bad[1]["line"], 3);
    assert_eq!(bad[1]["field"], "json");
    let payloads = payloads(&report);
    assert_eq!(payloads.len(), 1);
    assert_eq!(payloads[0]["line"], 1);
    assert_eq!(
        verdicts(&payloads[0]),
        ["PASS", "PASS", "PASS", "PASS", "PASS", "NOT_APPLICABLE"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_the_ledger_refuses_is_reported_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let bad_script = json!({"account": "merchants:9", "script": "send [USD/2 100] (\n source = @world\n destination =\n)"}).to_string();
    let file = write(dir.path(), &[bad_script, no_reference_payout()]);
    let (output, report) = probe(&["--file", file.to_str().unwrap()]).await;
    assert!(!output.status.success());
    let payloads = payloads(&report);
    let refused = step(&payloads[0], 1);
    assert_eq!(refused["verdict"], "REFUSED", "{report:#}");
    assert_eq!(refused["answers"][0]["error_code"], "COMPILATION_FAILED");
    assert!(verdicts(&payloads[0])[1..].iter().all(|v| *v == "SKIPPED"));
    assert_eq!(report["summary"]["refused"], 1);
    // The next payload of the account is probed as usual: the relay moved past it.
    assert_eq!(verdicts(&payloads[1])[..5], ["PASS"; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_without_idempotency_fails_the_probe_loudly() {
    let ledger = dev_ledger().await;
    ledger.faults().ignore_idempotency_keys(true);
    let dir = tempfile::tempdir().unwrap();
    let mut lines = reference_lines();
    lines.push(no_reference_payout());
    let file = write(dir.path(), &lines);
    let (output, report) = probe(&[
        "--file",
        file.to_str().unwrap(),
        "--ledger-url",
        &ledger.url(),
    ])
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("probe FAILED"), "{stderr}");
    let payloads = payloads(&report);
    for payload in payloads {
        assert_eq!(step(payload, 2)["verdict"], "FAIL", "{payload:#}");
    }
    // With a reference, only the reference stopped the second payout.
    let with_reference = &payloads[1];
    assert!(
        step(with_reference, 2)["detail"]
            .as_str()
            .unwrap()
            .contains("only the payload's reference stopped a second payout"),
        "{with_reference:#}"
    );
    // Without one, the replay was a second payout, through the relay path too.
    let bare = payloads.last().unwrap();
    let replayed = step(bare, 2);
    assert!(
        replayed["detail"]
            .as_str()
            .unwrap()
            .contains("posted as a new transaction"),
        "{bare:#}"
    );
    assert_eq!(replayed["transactions"].as_array().unwrap().len(), 2);
    assert_eq!(step(bare, 3)["verdict"], "FAIL");
    let relay = step(bare, 5);
    assert_eq!(relay["verdict"], "FAIL", "{bare:#}");
    assert!(relay["detail"].as_str().unwrap().contains("paid out twice"));
    // The probe ran in ledgers of its own: the misbehaviour was still on afterwards.
    assert!(ledger.faults().plan().ignore_idempotency_key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_that_ignores_the_body_hash_fails_step_4() {
    let ledger = dev_ledger().await;
    ledger.faults().ignore_body_hash(true);
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), &reference_lines());
    let (output, report) = probe(&[
        "--file",
        file.to_str().unwrap(),
        "--ledger-url",
        &ledger.url(),
    ])
    .await;
    assert!(!output.status.success());
    for payload in payloads(&report) {
        assert_eq!(
            verdicts(payload),
            ["PASS", "PASS", "PASS", "FAIL", "PASS", "PASS"],
            "{payload:#}"
        );
        let mismatch = step(payload, 4);
        assert_eq!(mismatch["answers"][0]["idempotency_hit"], true);
        assert!(
            mismatch["detail"]
                .as_str()
                .unwrap()
                .contains("does not compare the body under the key"),
            "{mismatch:#}"
        );
    }
    assert_eq!(report["summary"]["fail"], reference_lines().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_ledger_that_holds_transactions_is_refused_unless_allowed() {
    let ledger = DevLedger::start(DevLedgerConfig {
        create_ledgers: vec!["payouts".into()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let posted = http
        .post(format!("{}/v2/payouts/transactions", ledger.url()))
        .json(&json!({"postings": [{"source": "world", "destination": "a", "amount": 1, "asset": "USD"}]}))
        .send()
        .await
        .unwrap();
    assert!(posted.status().is_success());
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), &[no_reference_payout()]);
    let args = [
        "probe",
        "--file",
        file.to_str().unwrap(),
        "--ledger-url",
        &ledger.url(),
        "--ledger-name",
        "payouts",
    ];
    let refused = tokio::process::Command::new(outbox_binary())
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("invalid ledger_name") && stderr.contains("already holds transactions"),
        "{stderr}"
    );
    assert_eq!(ledger.stats().transactions, 1, "nothing was posted");

    let allowed = tokio::process::Command::new(outbox_binary())
        .args(args)
        .arg("--allow-existing-ledger")
        .output()
        .await
        .unwrap();
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    assert!(
        String::from_utf8_lossy(&allowed.stdout)
            .contains("probe ledgers: payouts, payouts-step3, payouts-step5")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_window_puts_the_kill_between_accept_and_record_on_any_ledger() {
    let ledger = dev_ledger().await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), &reference_lines()[..4]);
    let (output, report) = probe(&[
        "--file",
        file.to_str().unwrap(),
        "--ledger-url",
        &ledger.url(),
        "--crash-window",
        "proxy",
    ])
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report["crash_window"].as_str().unwrap().contains("proxy"));
    for payload in payloads(&report) {
        assert_eq!(step(payload, 5)["verdict"], "PASS", "{payload:#}");
    }
    // The proxy held the answers, not the dev ledger's fault plan.
    assert_eq!(ledger.stats().faults_injected, 0);
}
