//! A running `outbox fanout` process and signed webhooks for its intake.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_ledger_formance::sign;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{SECRET, outbox_binary};

/// Our Hop 2 signing secret (`--publish-secret`).
pub const HOP2_SECRET: &str = "hop2-publish-secret";

/// A ledger webhook with one committed transaction per `(account, tx, sequence)`.
pub fn webhook_body(transactions: &[(&str, u64, u64)]) -> Vec<u8> {
    let transactions: Vec<String> = transactions
        .iter()
        .map(|(account, tx, sequence)| {
            format!(
                r#"{{"id":{tx},"metadata":{{"outbox_account":"{account}","outbox_event_id":"0190f2a0-7b1c-7cc2-8a4e-{tx:012}","outbox_sequence":"{sequence}"}},"postings":[{{"amount":100,"asset":"USD/2","destination":"{account}:payouts:pending","source":"{account}:available"}}]}}"#
            )
        })
        .collect();
    format!(
        r#"{{"idempotency_key":"","date":"2026-10-07T10:00:00.000000Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{{"accountMetadata":{{}},"ledger":"payouts","transactions":[{}]}}}}"#,
        transactions.join(",")
    )
    .into_bytes()
}

/// POSTs a signed webhook to the intake (plain HTTP/1.1 over loopback); the status.
pub async fn deliver(intake: &str, id: &str, body: &[u8]) -> u16 {
    try_deliver(intake, id, body)
        .await
        .expect("connect to the intake")
}

/// [`deliver`], answering the connection error when nothing listens at the intake
/// (the process is gone).
pub async fn try_deliver(intake: &str, id: &str, body: &[u8]) -> std::io::Result<u16> {
    let rest = intake.strip_prefix("http://").expect("http intake");
    let (authority, path) = rest.split_once('/').expect("a path");
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(SECRET, id, timestamp, body);
    let head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         formance-webhook-id: {id}\r\nformance-webhook-timestamp: {timestamp}\r\n\
         formance-webhook-signature: {signature}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("the intake answers")
        .unwrap();
    Ok(answer
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}")))
}

/// A running `outbox fanout` with its output collected; killed if dropped.
pub struct Fanout {
    pub child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

fn collect(stream: impl tokio::io::AsyncRead + Unpin + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

impl Fanout {
    /// Starts `outbox fanout` on `database` publishing to `to` (an HTTP destination
    /// signed with [`HOP2_SECRET`]); returns it and its intake URL once bound.
    pub async fn start(database: &str, to: &str) -> (Self, String) {
        let mut child = Command::new(outbox_binary())
            .args(["fanout", "--listen", "127.0.0.1:0", "--database", database])
            .args([
                "--secret",
                SECRET,
                "--to",
                to,
                "--publish-secret",
                HOP2_SECRET,
            ])
            .args(["--poll-interval-ms", "50"])
            .env("OUTBOX_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn outbox fanout");
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        let mut fanout = Self {
            child,
            stdout,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = fanout.stdout.lock().unwrap().iter().find_map(|line| {
                line.strip_prefix("fanout: intake on ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned)
            });
            if let Some(intake) = ready {
                return (fanout, intake);
            }
            if let Some(status) = fanout.child.try_wait().unwrap() {
                panic!(
                    "outbox fanout exited ({status}) at start: {:?}",
                    fanout.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "outbox fanout never became ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().join("\n")
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// SIGKILL: nothing is saved on the way out.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("SIGKILL outbox fanout");
    }

    /// SIGTERM, then waits (bounded) for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("outbox fanout stops after SIGTERM")
            .unwrap()
    }
}
