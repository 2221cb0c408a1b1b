//! Shared helpers of the RabbitMQ tests: broker discovery, a fresh topology per
//! test (deleted on drop, even after a failed assertion), a recording sink.

#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use outbox_core::{
    Account, Error, ErrorKind, FanoutMessage, MessageKind, MessageSink, Result, Subscriber,
};
use outbox_transport_amqp::{AmqpConfig, DEFAULT_URI};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The broker address of the tests (`OUTBOX_AMQP_URL`, else the local default).
pub fn broker_url() -> String {
    std::env::var("OUTBOX_AMQP_URL").unwrap_or_else(|_| DEFAULT_URI.to_owned())
}

/// `Some(url)` when RabbitMQ answers; otherwise skip (or fail under
/// `OUTBOX_TEST_REQUIRE=1`).
pub async fn broker() -> Option<String> {
    let url = broker_url();
    let reachable = tokio::time::timeout(
        Duration::from_secs(5),
        Connection::connect(&url, ConnectionProperties::default()),
    )
    .await;
    match reachable {
        Ok(Ok(connection)) => {
            let _ = connection.close(200, "probe".into()).await;
            Some(url)
        }
        other => {
            let why = match other {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".to_owned(),
            };
            let shown = AmqpConfig::new(url.as_str(), "probe").redacted_uri();
            if std::env::var("OUTBOX_TEST_REQUIRE").as_deref() == Ok("1") {
                panic!("no RabbitMQ at {shown} ({why}) and OUTBOX_TEST_REQUIRE=1");
            }
            println!("skipped: no RabbitMQ at {shown} ({why})");
            None
        }
    }
}

/// Skips the test (returns) when no broker answers.
#[macro_export]
macro_rules! require_broker {
    () => {
        match common::broker().await {
            Some(url) => url,
            None => return,
        }
    };
}

/// A config on a fresh exchange `test-<tag>-<random>` with short waits.
pub fn fresh_config(url: &str, tag: &str, queue_count: u16) -> AmqpConfig {
    AmqpConfig {
        queue_count,
        prefetch: 4,
        consumer_tag_prefix: format!("test-{tag}"),
        connect_timeout_ms: 3_000,
        confirm_timeout_ms: 10_000,
        backoff_initial_ms: 50,
        backoff_max_ms: 500,
        ..AmqpConfig::new(url, format!("test-{tag}-{:016x}", fastrand::u64(..)))
    }
}

pub async fn connect(url: &str) -> (Connection, Channel) {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("test connection");
    let channel = connection.create_channel().await.expect("test channel");
    (connection, channel)
}

/// Deletes the exchange and queues of a config (plus extra queues) when dropped.
pub struct Cleanup {
    url: String,
    exchange: String,
    queues: Vec<String>,
}

impl Cleanup {
    pub fn new(config: &AmqpConfig) -> Self {
        Self {
            url: config.uri.clone(),
            exchange: config.exchange.clone(),
            queues: (0..config.queue_count)
                .map(|i| format!("{}.{i}", config.exchange))
                .collect(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let url = self.url.clone();
        let exchange = self.exchange.clone();
        let queues = self.queues.clone();
        // Drop cannot await; a thread with its own runtime works inside or outside
        // the test's runtime.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async move {
                let work = async {
                    let (connection, channel) = connect(&url).await;
                    for queue in &queues {
                        let _ = channel
                            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                            .await;
                    }
                    let _ = channel
                        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                        .await;
                    let _ = connection.close(200, "cleanup".into()).await;
                };
                if tokio::time::timeout(Duration::from_secs(10), work)
                    .await
                    .is_err()
                {
                    eprintln!("cleanup of {exchange} timed out");
                }
            });
        });
        let _ = done.join();
    }
}

/// Ready messages in `queue` (passive declare; fails if it does not exist).
pub async fn ready_count(url: &str, queue: &str) -> u32 {
    let (connection, channel) = connect(url).await;
    let q = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("queue exists");
    let _ = connection.close(200, "count".into()).await;
    q.message_count()
}

/// Declares what `AmqpConfig` describes, by hand, with the same arguments the
/// crate uses (a mismatch would make the subscriber fail with PRECONDITION_FAILED).
pub async fn declare_like_the_crate(channel: &Channel, config: &AmqpConfig) {
    declare_exchange(channel, &config.exchange).await;
    for i in 0..config.queue_count {
        let mut arguments = FieldTable::default();
        arguments.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
        bind_queue(channel, config, i, arguments).await;
    }
}

pub async fn declare_exchange(channel: &Channel, exchange: &str) {
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare exchange");
}

/// Declares `<exchange>.<index>` with `arguments` and binds it with key `<index>`.
pub async fn bind_queue(channel: &Channel, config: &AmqpConfig, index: u16, arguments: FieldTable) {
    let queue = format!("{}.{index}", config.exchange);
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .expect("declare queue");
    channel
        .queue_bind(
            queue.as_str().into(),
            config.exchange.as_str().into(),
            index.to_string().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind queue");
}

pub fn account(name: &str) -> Account {
    Account::parse(name).expect("valid account")
}

/// A committed message of `account` at `sequence`, with a unique instruction id.
pub fn message(account_name: &str, sequence: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: format!("{:016x}-{account_name}-{sequence}", fastrand::u64(..)),
        account: account(account_name),
        sequence,
        kind: MessageKind::Committed,
        ledger: "payouts".into(),
        ledger_tx_id: Some(1000 + sequence),
        traceparent: None,
        tracestate: None,
        payload: format!(r#"{{"account":"{account_name}","sequence":{sequence}}}"#).into_bytes(),
    }
}

/// A sink that records every call, and refuses chosen instructions transiently a
/// number of times (`u32::MAX`: always) or permanently.
#[derive(Default)]
pub struct RecordingSink {
    /// Every call, in order: (delivery id, message, accepted?).
    calls: Mutex<Vec<(String, FanoutMessage, bool)>>,
    transient_failures: Mutex<HashMap<String, u32>>,
    permanent: Mutex<Option<String>>,
}

impl RecordingSink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn fail_transiently(&self, instruction_id: &str, times: u32) {
        self.transient_failures
            .lock()
            .unwrap()
            .insert(instruction_id.to_owned(), times);
    }

    pub fn fail_permanently(&self, instruction_id: &str) {
        *self.permanent.lock().unwrap() = Some(instruction_id.to_owned());
    }

    /// Accepted messages, in acceptance order.
    pub fn accepted(&self) -> Vec<FanoutMessage> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, ok)| *ok)
            .map(|(_, m, _)| m.clone())
            .collect()
    }

    /// Every call as (delivery id, instruction id, accepted?).
    pub fn calls(&self) -> Vec<(String, String, bool)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(d, m, ok)| (d.clone(), m.instruction_id.clone(), *ok))
            .collect()
    }

    pub fn accepted_with_ids(&self) -> Vec<(String, FanoutMessage)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, ok)| *ok)
            .map(|(d, m, _)| (d.clone(), m.clone()))
            .collect()
    }
}

#[async_trait]
impl MessageSink for RecordingSink {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        assert_eq!(messages.len(), 1, "one message per AMQP delivery");
        let message = messages.into_iter().next().unwrap();
        let id = message.instruction_id.clone();
        let verdict = if self.permanent.lock().unwrap().as_deref() == Some(id.as_str()) {
            Err(Error::new(ErrorKind::Handler, "test: permanent refusal"))
        } else {
            let mut failures = self.transient_failures.lock().unwrap();
            match failures.get_mut(&id) {
                Some(left) if *left > 0 => {
                    if *left != u32::MAX {
                        *left -= 1;
                    }
                    Err(Error::new(ErrorKind::Storage, "test: busy")
                        .transient(Some(Duration::from_millis(20))))
                }
                _ => Ok(()),
            }
        };
        self.calls
            .lock()
            .unwrap()
            .push((delivery_id.to_owned(), message, verdict.is_ok()));
        verdict
    }
}

/// A subscriber running in a task, with its shutdown switch.
pub struct Running {
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
}

pub fn spawn(subscriber: Arc<dyn Subscriber>, sink: Arc<dyn MessageSink>) -> Running {
    let (shutdown, rx) = watch::channel(false);
    let task = tokio::spawn(async move { subscriber.run(sink, rx).await });
    Running { shutdown, task }
}

impl Running {
    /// Signals shutdown and waits (bounded) for `run` to return.
    pub async fn stop(self) -> Result<()> {
        let _ = self.shutdown.send(true);
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("the subscriber stops within 15 s")
            .expect("the subscriber task did not panic")
    }

    /// Waits (bounded) for `run` to return on its own.
    pub async fn finished(self, within: Duration) -> Result<()> {
        let _keep = self.shutdown;
        tokio::time::timeout(within, self.task)
            .await
            .expect("run returned in time")
            .expect("the subscriber task did not panic")
    }
}

/// Polls `check` every 50 ms until it holds or `within` passes; returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
