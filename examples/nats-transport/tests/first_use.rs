//! A publisher and a subscriber that meet a stream for the first time at the same
//! moment (a new deployment, the transport suite's every case) both declare it: the
//! subscriber must come up and consume, whichever of the two creates the stream.
//! Uses the shared server (`OUTBOX_NATS_URL`, default nats://127.0.0.1:4222).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{FanoutMessage, MessageKind, MessageSink, Publisher, Subscriber};
use outbox_example_nats_transport::{NatsConfig, NatsPublisher, NatsSubscriber};
use outbox_testkit::transport_cases::message;
use tokio::sync::watch;

/// Fresh streams raced; the race is lost in a few per hundred when it can be lost.
const ROUNDS: usize = 40;

#[derive(Default)]
struct Received(Mutex<Vec<String>>);

#[async_trait]
impl MessageSink for Received {
    async fn accept(
        &self,
        _delivery: &str,
        messages: Vec<FanoutMessage>,
    ) -> outbox_core::Result<()> {
        let mut seen = self.0.lock().unwrap();
        seen.extend(messages.into_iter().map(|m| m.instruction_id));
        Ok(())
    }
}

fn shared_url() -> String {
    std::env::var("OUTBOX_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

async fn reachable(url: &str) -> bool {
    let connect = async_nats::connect(url);
    matches!(
        tokio::time::timeout(Duration::from_secs(5), connect).await,
        Ok(Ok(_))
    )
}

/// Waits (30 s at most) until `id` arrived, or the subscriber task ended first.
async fn arrival(
    received: &Received,
    id: &str,
    task: &tokio::task::JoinHandle<outbox_core::Result<()>>,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !received.0.lock().unwrap().iter().any(|r| r == id) {
        if task.is_finished() {
            return Err("the subscriber ended before the message arrived".to_owned());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("the message did not arrive within 30 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// One round: a new stream, the subscriber started and the message published at
/// once: the message must arrive and the subscriber stop cleanly when asked.
async fn round(url: &str) -> Result<(), String> {
    let id = fastrand::u64(..);
    let mut config = NatsConfig::new(
        url,
        format!("OUTBOX_FIRST_{id:016x}"),
        format!("outbox.first.{id:016x}"),
    );
    config.fetch_wait = Duration::from_millis(200);
    let sent = message("merchants:1", 1, MessageKind::Committed);
    let received = Arc::new(Received::default());
    let subscriber = NatsSubscriber::new(config.clone()).unwrap();
    let publisher = NatsPublisher::new(config.clone()).unwrap();
    let (stop, shutdown) = watch::channel(false);
    let sink: Arc<dyn MessageSink> = received.clone();
    let task = tokio::spawn(async move { subscriber.run(sink, shutdown).await });
    let published = publisher.publish(std::slice::from_ref(&sent)).await;
    let outcome = match published.into_iter().next() {
        Some(Err(e)) => Err(format!("publish: {e}")),
        _ => arrival(&received, &sent.instruction_id, &task).await,
    };
    let _ = stop.send(true);
    let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
    let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
    let _ = async_nats::jetstream::new(client)
        .delete_stream(&config.stream)
        .await;
    match ended {
        Ok(Ok(Ok(()))) => outcome,
        ended => Err(format!(
            "{}the subscriber ended with {ended:?}",
            outcome.err().map(|e| format!("{e}; ")).unwrap_or_default()
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_and_subscriber_may_both_declare_a_new_stream_at_once() {
    let url = shared_url();
    if !reachable(&url).await {
        assert!(
            std::env::var("OUTBOX_TEST_REQUIRE").as_deref() != Ok("1"),
            "OUTBOX_TEST_REQUIRE=1 and no NATS server at {url}"
        );
        eprintln!("skipped: no NATS server at {url}");
        return;
    }
    let mut failures = Vec::new();
    for i in 0..ROUNDS {
        if let Err(why) = round(&url).await {
            failures.push(format!("round {i}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ROUNDS} rounds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
