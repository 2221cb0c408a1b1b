//! Shared helpers of the Kafka tests: broker discovery, fresh names, a recording
//! sink, bounded waits and a Tansu broker of our own (`outbox_testkit::tansu`).
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_core::{Account, Error, ErrorKind, FanoutMessage, MessageKind, MessageSink, Result};
pub use outbox_testkit::ports::free_port;
pub use outbox_testkit::tansu::{DurableBroker, OwnBroker};
use outbox_transport_kafka::{SubscriberConfig, create_topic};

pub const STEP: Duration = Duration::from_millis(50);

/// The broker under test (`OUTBOX_KAFKA_BROKERS`, default `127.0.0.1:9092`), or
/// `None` after printing why the test is skipped. With `OUTBOX_TEST_REQUIRE=1` an
/// unreachable broker fails the test instead.
pub fn broker() -> Option<String> {
    let brokers =
        std::env::var("OUTBOX_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    if reachable(&brokers) {
        return Some(brokers);
    }
    if std::env::var("OUTBOX_TEST_REQUIRE").as_deref() == Ok("1") {
        panic!("no Kafka broker at {brokers} and OUTBOX_TEST_REQUIRE=1");
    }
    eprintln!("skipped: no Kafka broker at {brokers}");
    None
}

/// Whether the first broker of the list accepts a TCP connection.
pub fn reachable(brokers: &str) -> bool {
    let first = brokers.split(',').next().unwrap_or_default().trim();
    let Ok(mut addrs) = first.to_socket_addrs() else {
        return false;
    };
    addrs.any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok())
}

/// A name nobody else uses: every test gets its own topic and group.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

/// Creates a fresh topic, retrying while the broker is still coming up.
pub async fn fresh_topic(brokers: &str, prefix: &str, partitions: i32) -> String {
    let topic = unique(prefix);
    ensure_topic(brokers, &topic, partitions).await;
    topic
}

pub async fn ensure_topic(brokers: &str, topic: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match create_topic(brokers, topic, partitions, None, Duration::from_secs(5)).await {
            Ok(_) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("create topic {topic}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("could not create topic {topic} at {brokers}: {e}"),
        }
    }
}

pub fn subscriber_config(brokers: &str, topic: &str, group: &str) -> SubscriberConfig {
    let mut config = SubscriberConfig::new(brokers, topic, group);
    config.session_timeout_ms = 6_000;
    config.retry_initial_ms = 20;
    config.retry_max_ms = 200;
    config.commit_timeout_ms = 10_000;
    config.close_timeout_ms = 10_000;
    if let Ok(debug) = std::env::var("OUTBOX_KAFKA_DEBUG") {
        config.librdkafka.insert("debug".into(), debug);
    }
    config
}

pub fn message(account: &str, sequence: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: format!("0190f2a0-0000-7000-8000-{:012x}", fastrand::u64(..1 << 48)),
        account: Account::parse(account).expect("test account"),
        sequence,
        kind: MessageKind::Committed,
        ledger: "payouts".into(),
        ledger_tx_id: Some(1000 + sequence),
        traceparent: None,
        tracestate: None,
        payload: format!(r#"{{"account":"{account}","sequence":{sequence}}}"#).into_bytes(),
    }
}

/// What a sink decides for one hand-over: the message and how many times it was
/// handed before (0 the first time).
pub type Plan = dyn Fn(&FanoutMessage, usize) -> Result<()> + Send + Sync;

/// A sink that records every hand-over and answers according to its plan.
pub struct RecordingSink {
    pub handed: Mutex<Vec<(String, FanoutMessage)>>,
    pub accepted: Mutex<Vec<(String, FanoutMessage)>>,
    plan: Box<Plan>,
}

impl RecordingSink {
    pub fn accepting() -> Arc<Self> {
        Self::with_plan(|_, _| Ok(()))
    }

    pub fn with_plan(
        plan: impl Fn(&FanoutMessage, usize) -> Result<()> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            handed: Mutex::new(Vec::new()),
            accepted: Mutex::new(Vec::new()),
            plan: Box::new(plan),
        })
    }

    pub fn accepted(&self) -> Vec<(String, FanoutMessage)> {
        self.accepted.lock().unwrap().clone()
    }

    pub fn handed(&self) -> Vec<(String, FanoutMessage)> {
        self.handed.lock().unwrap().clone()
    }
}

#[async_trait]
impl MessageSink for RecordingSink {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        assert_eq!(messages.len(), 1, "kafka hands one message per delivery");
        let message = messages.into_iter().next().unwrap();
        let before = {
            let mut handed = self.handed.lock().unwrap();
            let before = handed.iter().filter(|(id, _)| id == delivery_id).count();
            handed.push((delivery_id.to_owned(), message.clone()));
            before
        };
        (self.plan)(&message, before)?;
        self.accepted
            .lock()
            .unwrap()
            .push((delivery_id.to_owned(), message));
        Ok(())
    }
}

pub fn transient(what: &str) -> Error {
    Error::new(ErrorKind::Storage, what.to_owned()).transient(None)
}

/// Polls `condition` every 50 ms until it holds or `limit` passes (false).
pub async fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(STEP).await;
    }
}

/// `<topic>/<partition>/<offset>` split into its parts.
pub fn place(delivery_id: &str) -> (String, i32, i64) {
    let mut parts = delivery_id.rsplitn(3, '/');
    let offset = parts.next().unwrap().parse().expect("offset");
    let partition = parts.next().unwrap().parse().expect("partition");
    let topic = parts.next().unwrap().to_owned();
    (topic, partition, offset)
}

/// A Tansu broker of this test's own on a free loopback port (killed by its PID), or
/// `None` after printing why the test is skipped. With `OUTBOX_TEST_REQUIRE=1` a
/// missing Tansu binary fails the test instead.
pub async fn own_broker() -> Option<OwnBroker> {
    or_skip(OwnBroker::start().await)
}

/// Like [`own_broker`], with its log in a SQLite file in `dir` (it survives a SIGKILL).
pub async fn durable_broker(dir: &std::path::Path) -> Option<DurableBroker> {
    or_skip(DurableBroker::start(dir).await)
}

fn or_skip<T>(started: std::result::Result<T, String>) -> Option<T> {
    match started {
        Ok(broker) => Some(broker),
        Err(why) if std::env::var("OUTBOX_TEST_REQUIRE").as_deref() == Ok("1") => {
            panic!("{why} and OUTBOX_TEST_REQUIRE=1")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// Test logs (`RUST_LOG=debug`), librdkafka's included, once per binary.
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}
