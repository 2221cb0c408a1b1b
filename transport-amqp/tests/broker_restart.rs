//! A RabbitMQ restart (`rabbitmqctl stop_app` / `start_app`) in the middle of a
//! stream. Its own test binary with a single test: it stops the shared broker, so it
//! must never run beside the other RabbitMQ tests (cargo runs test binaries one
//! after another). The broker is always started again, even when an assertion
//! fails (`BrokerGuard`).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{FanoutMessage, Publisher};
use outbox_transport_amqp::{AmqpPublisher, AmqpSubscriber};
use tokio::sync::watch;

use common::{Cleanup, RecordingSink};

/// Bound of one `rabbitmqctl` call.
const CTL_TIMEOUT: Duration = Duration::from_secs(90);

/// Undoes what the test did to the shared broker, even when an assertion fails:
/// starts the application again and restores the memory watermark.
struct BrokerGuard {
    stopped: bool,
    /// The watermark to restore (`0.4`, or `absolute 1GB`) after blocking publishers.
    watermark: Option<String>,
}

impl BrokerGuard {
    /// Raises a memory alarm (watermark 0): RabbitMQ stops reading from publishing
    /// connections, so published messages stay unconfirmed.
    async fn block_publishers(&mut self) {
        let current =
            rabbitmqctl_output(&["eval", "vm_memory_monitor:get_vm_memory_high_watermark()."])
                .await;
        self.watermark = Some(watermark_argument(current.trim()));
        rabbitmqctl(&["set_vm_memory_high_watermark", "0"]).await;
    }

    async fn unblock_publishers(&mut self) {
        if let Some(watermark) = self.watermark.take() {
            let mut args = vec!["set_vm_memory_high_watermark"];
            args.extend(watermark.split(' '));
            rabbitmqctl(&args).await;
        }
    }

    async fn stop_app(&mut self) {
        // Marked first: if the command itself times out half-way, drop still restarts.
        self.stopped = true;
        rabbitmqctl(&["stop_app"]).await;
    }

    async fn start_app(&mut self) {
        rabbitmqctl(&["start_app"]).await;
        self.stopped = false;
    }
}

/// `0.4` stays `0.4`; `{absolute,1073741824}` becomes `absolute 1073741824`.
fn watermark_argument(erlang: &str) -> String {
    match erlang
        .strip_prefix("{absolute,")
        .and_then(|r| r.strip_suffix('}'))
    {
        Some(bytes) => format!("absolute {}", bytes.trim()),
        None if erlang.parse::<f64>().is_ok() => erlang.to_owned(),
        None => "0.4".to_owned(),
    }
}

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            let status = std::process::Command::new("timeout")
                .arg("120")
                .arg("rabbitmqctl")
                .args(args)
                .stdout(Stdio::null())
                .status();
            eprintln!("rabbitmqctl {args:?}: {status:?}");
        };
        if self.stopped {
            eprintln!("restoring the broker after a failed test");
            run(&["start_app"]);
        }
        if let Some(watermark) = self.watermark.take() {
            let mut args = vec!["set_vm_memory_high_watermark"];
            args.extend(watermark.split(' '));
            run(&args);
        }
    }
}

async fn rabbitmqctl(args: &[&str]) {
    rabbitmqctl_output(args).await;
}

async fn rabbitmqctl_output(args: &[&str]) -> String {
    let child = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(CTL_TIMEOUT, child)
        .await
        .unwrap_or_else(|_| panic!("rabbitmqctl {args:?} did not finish within {CTL_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("rabbitmqctl {args:?}: {e}"));
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?}: {} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether `rabbitmqctl` can talk to the local node.
async fn can_control_broker() -> bool {
    let probe = tokio::process::Command::new("rabbitmqctl")
        .args(["status"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status();
    matches!(
        tokio::time::timeout(Duration::from_secs(30), probe).await,
        Ok(Ok(status)) if status.success()
    )
}

/// Publishes `messages` one per call, retrying each until confirmed, like the
/// fan-out loop. Returns the confirmed messages and every error seen.
async fn stream(
    publisher: Arc<AmqpPublisher>,
    messages: Vec<FanoutMessage>,
    mut done: watch::Receiver<bool>,
) -> (Vec<FanoutMessage>, Vec<outbox_core::Error>) {
    let mut confirmed = Vec::new();
    let mut errors = Vec::new();
    'messages: for m in messages {
        loop {
            if *done.borrow() {
                break 'messages;
            }
            match publisher.publish(std::slice::from_ref(&m)).await.remove(0) {
                Ok(()) => {
                    confirmed.push(m);
                    break;
                }
                Err(e) => errors.push(e),
            }
            tokio::select! {
                _ = done.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (confirmed, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_mid_stream() {
    let url = require_broker!();
    if !can_control_broker().await {
        if std::env::var("OUTBOX_TEST_REQUIRE").as_deref() == Ok("1") {
            panic!("rabbitmqctl cannot control the local broker and OUTBOX_TEST_REQUIRE=1");
        }
        println!("skipped: rabbitmqctl cannot control the broker at {url}");
        return;
    }
    let config = common::fresh_config(&url, "restart", 3);
    // Dropped last (declared first): the broker is up again before cleanup runs.
    let _cleanup = Cleanup::new(&config);
    let mut broker = BrokerGuard {
        stopped: false,
        watermark: None,
    };

    let publisher = Arc::new(AmqpPublisher::new(config.clone()).unwrap());
    let sink = RecordingSink::new();
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        sink.clone(),
    );
    let accounts: Vec<String> = (1..=4).map(|i| format!("merchants:{i}")).collect();
    let mut confirmed: Vec<FanoutMessage> = Vec::new();

    // Before: a few rounds, all confirmed and received.
    for sequence in 1..=3 {
        let batch: Vec<FanoutMessage> = accounts
            .iter()
            .map(|a| common::message(a, sequence))
            .collect();
        for (r, m) in publisher.publish(&batch).await.into_iter().zip(&batch) {
            r.expect("confirmed before the restart");
            confirmed.push(m.clone());
        }
    }
    let before = confirmed.len();
    assert!(
        common::eventually(Duration::from_secs(20), || async {
            sink.accepted().len() >= before
        })
        .await,
        "received {} of {before} before the restart",
        sink.accepted().len()
    );

    // A concurrent stream through the whole restart.
    let (done_tx, done_rx) = watch::channel(false);
    let streamed: Vec<FanoutMessage> = (1..=1_000)
        .map(|s| common::message("merchants:stream", s))
        .collect();
    let streamer = tokio::spawn(stream(Arc::clone(&publisher), streamed, done_rx));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // In flight at the restart: the broker stops reading publishes (memory alarm),
    // so this batch is sent but never confirmed; the restart must turn it into
    // errors, never into Ok.
    broker.block_publishers().await;
    let in_flight: Vec<FanoutMessage> = accounts.iter().map(|a| common::message(a, 4)).collect();
    let blocked = tokio::spawn({
        let publisher = Arc::clone(&publisher);
        let in_flight = in_flight.clone();
        async move { publisher.publish(&in_flight).await }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !blocked.is_finished(),
        "nothing may be reported before its confirm"
    );

    broker.stop_app().await;
    let results = tokio::time::timeout(Duration::from_secs(30), blocked)
        .await
        .expect("unconfirmed publishes end with the connection")
        .expect("no panic");
    assert_eq!(results.len(), in_flight.len());
    for r in &results {
        let e = r.as_ref().expect_err("unconfirmed when the broker stopped");
        assert!(e.is_transient(), "{e}");
    }
    println!(
        "in flight at the restart: {}",
        results[0].as_ref().unwrap_err()
    );

    // Down: nothing is reported Ok; every error is transient.
    let down = in_flight;
    let results = publisher.publish(&down).await;
    assert_eq!(results.len(), down.len());
    for r in &results {
        let e = r.as_ref().expect_err("no confirm while the broker is down");
        assert!(e.is_transient(), "{e}");
    }

    broker.start_app().await;
    broker.unblock_publishers().await;

    // Up again: the publisher reconnects lazily and the same messages go through.
    let mut pending = down;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !pending.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the publisher did not recover within 60 s"
        );
        let results = publisher.publish(&pending).await;
        let mut still = Vec::new();
        for (r, m) in results.into_iter().zip(pending) {
            match r {
                Ok(()) => confirmed.push(m),
                Err(e) => {
                    assert!(e.is_transient(), "{e}");
                    still.push(m);
                }
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for sequence in 5..=6 {
        let batch: Vec<FanoutMessage> = accounts
            .iter()
            .map(|a| common::message(a, sequence))
            .collect();
        for (r, m) in publisher.publish(&batch).await.into_iter().zip(&batch) {
            r.expect("confirmed after the restart");
            confirmed.push(m.clone());
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = done_tx.send(true);
    let (stream_confirmed, stream_errors) = tokio::time::timeout(Duration::from_secs(30), streamer)
        .await
        .expect("the streamer stops")
        .expect("the streamer did not panic");
    assert!(
        !stream_errors.is_empty(),
        "the stream must have seen the outage as errors"
    );
    assert!(
        stream_errors.iter().all(|e| e.is_transient()),
        "{stream_errors:?}"
    );
    let streamed_before_stop = stream_confirmed.len();
    println!(
        "stream: {streamed_before_stop} confirmed, {} transient errors (first: {})",
        stream_errors.len(),
        stream_errors[0]
    );
    assert!(
        streamed_before_stop >= 2,
        "the stream made progress: {streamed_before_stop}"
    );
    confirmed.extend(stream_confirmed);

    // The subscriber reconnected and received everything that was confirmed.
    let wanted: HashSet<String> = confirmed.iter().map(|m| m.instruction_id.clone()).collect();
    let all = common::eventually(Duration::from_secs(60), || async {
        let got: HashSet<String> = sink
            .accepted()
            .into_iter()
            .map(|m| m.instruction_id)
            .collect();
        wanted.is_subset(&got)
    })
    .await;
    let stopped = running.stop().await;
    let got: HashSet<String> = sink
        .accepted()
        .into_iter()
        .map(|m| m.instruction_id)
        .collect();
    let missing: Vec<&String> = wanted.difference(&got).collect();
    assert!(
        all,
        "{} confirmed messages never received: {missing:?}",
        missing.len()
    );
    stopped.expect("the subscriber survived the restart and stopped cleanly");

    // Per-account order held across the restart (duplicates are allowed: at least once).
    let mut first_seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for m in sink.accepted() {
        if seen.insert(m.instruction_id.clone()) {
            first_seen
                .entry(m.account.as_str().to_owned())
                .or_default()
                .push(m.sequence);
        }
    }
    for (account, sequences) in &first_seen {
        assert!(
            sequences.windows(2).all(|w| w[0] < w[1]),
            "{account} out of order: {sequences:?}"
        );
    }
    assert_eq!(first_seen.get("merchants:1").map(Vec::len), Some(6));
}
