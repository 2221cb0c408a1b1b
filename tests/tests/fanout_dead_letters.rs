//! Dead letters through the real binaries: `outbox fanout` publishing to a loopback
//! consumer that refuses one account's message with 422, `outbox fanout dead-letters`
//! showing it, `outbox fanout replay` releasing it once the consumer is fixed, and the
//! running `outbox fanout` re-publishing the account in sequence order; in between,
//! `outbox fanout` is SIGKILLed and restarted and keeps the account parked. The fan-out
//! store is a real SQLite file shared by the processes.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::fanout_process::{Fanout, deliver, webhook_body};
use common::*;
use outbox_core::fanout::headers;

const POISONED: &str = "merchants:7002";
const HEALTHY: &str = "merchants:7003";

/// Answers 422 to the poisoned account's sequence 2 until fixed; records the rest.
#[derive(Default)]
struct Consumer {
    fixed: AtomicBool,
    accepted: Mutex<Vec<(String, u64)>>,
}

impl Consumer {
    fn of(&self, account: &str) -> Vec<u64> {
        let accepted = self.accepted.lock().unwrap();
        accepted
            .iter()
            .filter(|(a, _)| a == account)
            .map(|(_, s)| *s)
            .collect()
    }
}

async fn answer(State(consumer): State<Arc<Consumer>>, request: HeaderMap) -> StatusCode {
    let header = |name| {
        request
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let account = header(headers::ACCOUNT);
    let sequence: u64 = header(headers::SEQUENCE).parse().unwrap_or_default();
    if account == POISONED && sequence == 2 && !consumer.fixed.load(Ordering::SeqCst) {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    consumer.accepted.lock().unwrap().push((account, sequence));
    StatusCode::NO_CONTENT
}

async fn consumer() -> (Arc<Consumer>, String) {
    let consumer = Arc::new(Consumer::default());
    let app = Router::new()
        .route("/hop2/messages", post(answer))
        .with_state(consumer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hop2/messages", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (consumer, url)
}

/// Runs an `outbox fanout` subcommand to its end (bounded).
async fn command(args: &[&str]) -> std::process::Output {
    let run = tokio::process::Command::new(outbox_binary())
        .arg("fanout")
        .args(args)
        .env("OUTBOX_LOG", "warn")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the command ends")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_account_is_listed_replayed_by_command_and_delivered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("fanout.db").display());
    let (consumer, destination) = consumer().await;
    let (mut fanout, intake) = Fanout::start(&database, &destination).await;

    let body = webhook_body(&[
        (POISONED, 1, 1),
        (POISONED, 2, 2),
        (HEALTHY, 3, 1),
        (POISONED, 4, 3),
        (HEALTHY, 5, 2),
        (POISONED, 6, 4),
    ]);
    assert_eq!(deliver(&intake, "wh-1", &body).await, 204);
    eventually(Duration::from_secs(30), "the healthy account", || {
        consumer.of(HEALTHY) == [1, 2]
    })
    .await;
    assert_eq!(consumer.of(POISONED), [1], "nothing past the refusal");

    // Listed: the refusal and what waits behind it, in order. The set-aside records are
    // written as the loop meets them, right after the refusal.
    let mut listed = Vec::new();
    for _ in 0..100 {
        let output = command(&["dead-letters", "--database", &database, "--json"]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
        listed = text(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .collect();
        if listed.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let summary: Vec<(String, u64, String, String)> = listed
        .iter()
        .map(|l| {
            (
                l["account"].as_str().unwrap().to_owned(),
                l["sequence"].as_u64().unwrap(),
                l["reason"].as_str().unwrap().to_owned(),
                l["account_state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let parked = |sequence, reason: &str| {
        (
            POISONED.to_owned(),
            sequence,
            reason.to_owned(),
            "parked".to_owned(),
        )
    };
    assert_eq!(
        summary,
        vec![
            parked(2, "refused"),
            parked(3, "set_aside"),
            parked(4, "set_aside")
        ]
    );
    assert_eq!(listed[0]["destination"], destination.as_str());
    assert!(
        listed[0]["error"].as_str().unwrap().contains("422"),
        "{}",
        listed[0]["error"]
    );
    let output = command(&[
        "dead-letters",
        "--database",
        &database,
        "--to",
        &destination,
    ])
    .await;
    let shown = text(&output.stdout);
    assert!(
        shown.contains(&format!(
            "{destination}  {POISONED}  parked: refused sequence 2"
        )),
        "{shown}"
    );

    // SIGKILLed and restarted: the account stays parked, what arrives for it is set
    // aside behind the refusal, everyone else flows.
    fanout.kill().await;
    let (restarted, intake) = Fanout::start(&database, &destination).await;
    fanout = restarted;
    let body = webhook_body(&[(POISONED, 8, 5), (HEALTHY, 9, 3)]);
    assert_eq!(deliver(&intake, "wh-after-kill", &body).await, 204);
    eventually(
        Duration::from_secs(30),
        "the healthy account after the restart",
        || consumer.of(HEALTHY) == [1, 2, 3],
    )
    .await;
    let mut sequences = Vec::new();
    for _ in 0..100 {
        let output = command(&["dead-letters", "--database", &database, "--json"]).await;
        sequences = text(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .map(|l| l["sequence"].as_u64().unwrap())
            .collect();
        if sequences.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sequences,
        [2, 3, 4, 5],
        "the new message waits behind the refusal"
    );
    assert_eq!(consumer.of(POISONED), [1], "still parked after the restart");

    // An account with nothing refused cannot be replayed: the error names the flag.
    let output = command(&[
        "replay",
        "--database",
        &database,
        "--to",
        &destination,
        "--account",
        HEALTHY,
    ])
    .await;
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("invalid account"),
        "{}",
        text(&output.stderr)
    );

    // Fixed consumer, replay requested: the running fanout re-publishes 2..=5 in order.
    consumer.fixed.store(true, Ordering::SeqCst);
    let output = command(&[
        "replay",
        "--database",
        &database,
        "--to",
        &destination,
        "--account",
        POISONED,
    ])
    .await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("replay #1 requested"),
        "{}",
        text(&output.stdout)
    );
    eventually(Duration::from_secs(30), "the replay", || {
        consumer.of(POISONED) == [1, 2, 3, 4, 5]
    })
    .await;
    assert_eq!(consumer.of(HEALTHY), [1, 2, 3], "nothing else sent again");

    // It flows again, and the listing says it was replayed.
    assert_eq!(
        deliver(&intake, "wh-2", &webhook_body(&[(POISONED, 7, 6)])).await,
        204
    );
    eventually(Duration::from_secs(30), "the next message", || {
        consumer.of(POISONED) == [1, 2, 3, 4, 5, 6]
    })
    .await;
    let output = command(&["dead-letters", "--database", &database, "--json"]).await;
    for line in text(&output.stdout).lines() {
        let letter: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(letter["account_state"], "replayed", "{letter}");
        assert_eq!(letter["replayed"], true, "{letter}");
    }
    let status = fanout.terminate().await;
    assert!(status.success(), "{status}: {}", fanout.stderr());
    // The restarted process's own run: it set aside 5, replayed 2..=5, refused nothing.
    assert!(
        fanout
            .stdout()
            .contains("dead-lettered 0 (set aside behind them 1, replayed 4)"),
        "{}",
        fanout.stdout()
    );
}
