//! Fan-out throughput against raw producers, printed as figures and ratios (no
//! assertions on time).
//!
//! N messages (default 20,000 over 1,000 accounts, round-robin, ~400-byte ledger
//! transaction payloads with the outbox identity headers) are stored in a fresh
//! `SqliteFanoutStore` (default settings: WAL, `synchronous=FULL`) and drained by
//! `FanoutLoop` (`RunMode::Drain`) into:
//!
//! - Kafka (`KafkaPublisher`, a fresh topic with 8 partitions). Baseline: a raw
//!   rdkafka `FutureProducer` with the publisher's settings (`enable.idempotence=true`,
//!   `acks=all`, murmur2 partitioner), the same keys, headers and payloads, sending all
//!   N and awaiting every delivery report.
//! - RabbitMQ (`AmqpPublisher`, a fresh exchange with 8 queues). Baseline: a raw lapin
//!   channel in confirm mode publishing the same messages (mandatory, persistent, same
//!   properties and routing keys) to the same topology, then awaiting every confirm.
//!
//! Every variant gets its own topic or exchange, and every producer sends one warm-up
//! message before the clock starts (connection, metadata, producer id, topology
//! declaration are not measured). The loop runs with `FanoutConfig`'s defaults (rounds
//! of 1,000, or 5,000 for Kafka, whose publisher pipelines several rounds in order),
//! then for each batch size (1,000 and 5,000) beside the raw producer with a barrier
//! every that many messages (what a per-round wait costs by itself); then where the
//! loop's time goes (store reads, publish calls, cursor saves, the rest), measured by
//! wrapping the store and the publisher; and the CPU each variant took per message, in
//! this process (producer, loop, store reads) and on the whole machine (the broker
//! too), with the cores busy meanwhile: on 2 cores a loop that must also read the store
//! can only match a raw producer that already keeps them busy if the machine has room.
//! Goal: loop with the defaults ≥ 0.9 × raw with
//! everything in flight.
//!
//! Run: `cargo bench -p outbox-bins --features all --bench fanout`, options after `--`:
//! `--messages 20000 --accounts 1000 --partitions 8 --queues 8 --batches 1000,5000
//! --reps 5 --only kafka|amqp --linger MS` (`linger.ms` of every Kafka producer, raw
//! and publisher alike). Brokers: `OUTBOX_KAFKA_BROKERS` (default
//! `127.0.0.1:9092`), `OUTBOX_AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`).
//! An unreachable broker is skipped with a message. Topics, queues and exchanges
//! created here are deleted at the end.

use outbox_testkit::bench_args::Args;
use outbox_testkit::cpu_time::{CpuUse, micros_per};
use outbox_testkit::fixtures::ledger_transaction_payload as payload;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties, ExchangeKind};
use outbox_core::fanout::headers;
use outbox_core::{
    Account, AppendOutcome, FanoutConfig, FanoutLoop, FanoutMessage, FanoutStore, MessageKind,
    Publisher, PublisherCapabilities, RunMode, StoredMessage,
};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore};
use outbox_transport_amqp::{AmqpConfig, AmqpPublisher, Topology};
use outbox_transport_kafka::{KafkaPublisher, PublisherConfig, create_topic};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tokio::sync::watch;
use uuid::Uuid;

const DEFAULT_BROKERS: &str = "127.0.0.1:9092";
const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const CLIENT_ID: &str = "ledger-outbox-bench";

/// `--linger MS`: `linger.ms` for every Kafka producer here (raw and publisher alike);
/// librdkafka's default (5 ms) when absent.
static LINGER_MS: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// The publisher's configuration for `topic`, with `--linger` applied.
fn kafka_config(topic: &str) -> PublisherConfig {
    let mut config = PublisherConfig::new(brokers(), topic);
    config.client_id = CLIENT_ID.to_owned();
    if let Some(Some(linger)) = LINGER_MS.get() {
        config
            .librdkafka
            .insert("linger.ms".to_owned(), linger.clone());
    }
    config
}

// ---------------------------------------------------------------------------------------
// Arguments

// ---------------------------------------------------------------------------------------
// Messages

/// `count` committed messages, account `n % accounts` for message `n`, each account's
/// sequences 1, 2, … in position order.
fn messages(count: usize, accounts: usize) -> Vec<FanoutMessage> {
    (0..count)
        .map(|n| {
            let account = n % accounts;
            let sequence = (n / accounts) as u64 + 1;
            let tx_id = 1_000_000 + n as u64;
            let instruction_id = Uuid::now_v7().to_string();
            FanoutMessage {
                payload: payload(account, sequence, tx_id, &instruction_id),
                instruction_id,
                account: Account::parse(&format!("merchants:{account}")).unwrap(),
                sequence,
                kind: MessageKind::Committed,
                ledger: "payouts".to_owned(),
                ledger_tx_id: Some(tx_id),
                traceparent: None,
                tracestate: None,
            }
        })
        .collect()
}

/// A fresh fan-out store holding `messages` (appended 500 per delivery).
async fn store(dir: &std::path::Path, messages: &[FanoutMessage]) -> SqliteFanoutStore {
    let config = SqliteConfig::new(dir.join(format!("fanout-{}.db", Uuid::now_v7())));
    let store = SqliteFanoutStore::open(config).await.unwrap();
    for (i, chunk) in messages.chunks(500).enumerate() {
        let outcome = store.append(&format!("bench-{i}"), chunk).await.unwrap();
        assert_eq!(outcome.stored, chunk.len());
    }
    store
}

/// One warm-up message (its own account, outside the measured set).
fn warmup_message() -> FanoutMessage {
    let instruction_id = Uuid::now_v7().to_string();
    FanoutMessage {
        payload: payload(999_999, 1, 1, &instruction_id),
        instruction_id,
        account: Account::parse("merchants:warmup").unwrap(),
        sequence: 1,
        kind: MessageKind::Committed,
        ledger: "payouts".to_owned(),
        ledger_tx_id: Some(1),
        traceparent: None,
        tracestate: None,
    }
}

// ---------------------------------------------------------------------------------------
// Instrumented store and publisher: where the loop's time goes

#[derive(Default)]
struct Timer {
    nanos: AtomicU64,
    calls: AtomicU64,
}

impl Timer {
    fn add(&self, since: Instant) {
        self.nanos
            .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

struct TimedStore {
    inner: SqliteFanoutStore,
    read: Timer,
    save: Timer,
}

#[async_trait]
impl FanoutStore for TimedStore {
    async fn append(
        &self,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        self.inner.append(delivery_id, messages).await
    }

    async fn read_after(
        &self,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        let start = Instant::now();
        let read = self.inner.read_after(after, limit).await;
        self.read.add(start);
        read
    }

    async fn load_cursor(&self, transport: &str) -> outbox_core::Result<u64> {
        self.inner.load_cursor(transport).await
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> outbox_core::Result<()> {
        let start = Instant::now();
        let saved = self.inner.save_cursor(transport, position).await;
        self.save.add(start);
        saved
    }

    async fn append_dead_letters(
        &self,
        letters: &[outbox_core::NewDeadLetter],
    ) -> outbox_core::Result<Vec<u64>> {
        self.inner.append_dead_letters(letters).await
    }

    async fn read_dead_letters(
        &self,
        query: &outbox_core::DeadLetterQuery<'_>,
    ) -> outbox_core::Result<Vec<outbox_core::DeadLetter>> {
        self.inner.read_dead_letters(query).await
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &outbox_core::Account,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        self.inner
            .read_set_aside(destination, account, after, limit)
            .await
    }

    async fn request_replay(
        &self,
        destination: &str,
        account: &outbox_core::Account,
    ) -> outbox_core::Result<outbox_core::ReplayRequest> {
        self.inner.request_replay(destination, account).await
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> outbox_core::Result<Vec<outbox_core::ReplayRequest>> {
        self.inner.read_replay_requests(destination, after).await
    }
}

struct TimedPublisher {
    inner: Arc<dyn Publisher>,
    publish: Timer,
}

#[async_trait]
impl Publisher for TimedPublisher {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> PublisherCapabilities {
        self.inner.capabilities()
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<outbox_core::Result<()>> {
        let start = Instant::now();
        let results = self.inner.publish(messages).await;
        self.publish.add(start);
        results
    }
}

/// What one loop drain took, and where.
struct LoopRun {
    elapsed: Duration,
    rounds: u64,
    reads: u64,
    read: Duration,
    publish: Duration,
    save: Duration,
}

impl LoopRun {
    fn breakdown(&self) -> String {
        let other = self
            .elapsed
            .saturating_sub(self.read + self.publish + self.save);
        let pct = |d: Duration| 100.0 * d.as_secs_f64() / self.elapsed.as_secs_f64();
        format!(
            "{} rounds, {} reads: read {:.0} ms ({:.0}%), publish {:.0} ms ({:.0}%), cursor save {:.0} ms ({:.0}%), loop {:.0} ms ({:.0}%)",
            self.rounds,
            self.reads,
            ms(self.read),
            pct(self.read),
            ms(self.publish),
            pct(self.publish),
            ms(self.save),
            pct(self.save),
            ms(other),
            pct(other),
        )
    }
}

/// Drains `store` into `publisher` (warmed up already) with rounds of `batch_size`
/// (both `FanoutConfig` sizes), or with the defaults when `None`.
async fn loop_drain(
    store: SqliteFanoutStore,
    publisher: Arc<dyn Publisher>,
    batch_size: Option<usize>,
    expected: usize,
) -> LoopRun {
    let store = Arc::new(TimedStore {
        inner: store,
        read: Timer::default(),
        save: Timer::default(),
    });
    let publisher = Arc::new(TimedPublisher {
        inner: publisher,
        publish: Timer::default(),
    });
    let defaults = FanoutConfig::default();
    let config = FanoutConfig {
        batch_size: batch_size.unwrap_or(defaults.batch_size),
        pipelined_batch_size: batch_size.unwrap_or(defaults.pipelined_batch_size),
        poll_interval: Duration::from_millis(10),
        ..defaults
    };
    let fanout = FanoutLoop::open(store.clone(), publisher.clone(), config)
        .await
        .unwrap();
    let (_stop, stopped) = watch::channel(false);
    let start = Instant::now();
    let summary = fanout.run(RunMode::Drain, stopped).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(summary.published, expected as u64, "{summary:?}");
    assert_eq!(
        summary.retried + summary.permanent_failures,
        0,
        "{summary:?}"
    );
    LoopRun {
        elapsed,
        rounds: publisher.publish.calls(),
        reads: store.read.calls(),
        read: store.read.total(),
        publish: publisher.publish.total(),
        save: store.save.total(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rate(count: usize, d: Duration) -> f64 {
    count as f64 / d.as_secs_f64()
}

/// The order of the variants in repetition `rep`: rotated, so drift hits all alike.
fn rotated(variants: usize, rep: usize) -> impl Iterator<Item = usize> {
    (0..variants).map(move |i| (i + rep) % variants)
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

// ---------------------------------------------------------------------------------------
// Kafka

fn brokers() -> String {
    std::env::var("OUTBOX_KAFKA_BROKERS").unwrap_or_else(|_| DEFAULT_BROKERS.to_owned())
}

/// The publisher's librdkafka settings (`PublisherConfig::client_config`).
fn raw_producer(config: &PublisherConfig) -> FutureProducer {
    let mut client = ClientConfig::new();
    for (key, value) in &config.librdkafka {
        client.set(key, value);
    }
    client
        .set("bootstrap.servers", &config.brokers)
        .set("client.id", &config.client_id)
        .set("message.timeout.ms", config.message_timeout_ms.to_string())
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .unwrap()
}

fn kafka_send(producer: &FutureProducer, topic: &str, message: &FanoutMessage) -> DeliveryFuture {
    let mut owned = OwnedHeaders::new_with_capacity(8);
    for (name, value) in headers::encode(message) {
        owned = owned.insert(Header {
            key: name,
            value: Some(value.as_str()),
        });
    }
    let record = FutureRecord::to(topic)
        .key(message.account.as_str())
        .payload(message.payload.as_slice())
        .headers(owned);
    producer.send_result(record).map_err(|(e, _)| e).unwrap()
}

async fn kafka_await(pending: Vec<DeliveryFuture>) {
    for delivery in pending {
        delivery.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
}

/// Sends everything, awaiting the deliveries every `round` messages.
async fn kafka_raw(topic: &str, messages: &[FanoutMessage], round: usize) -> Duration {
    let producer = raw_producer(&kafka_config(topic));
    kafka_await(vec![kafka_send(&producer, topic, &warmup_message())]).await;
    let start = Instant::now();
    for chunk in messages.chunks(round) {
        let pending = chunk
            .iter()
            .map(|m| kafka_send(&producer, topic, m))
            .collect();
        kafka_await(pending).await;
    }
    let elapsed = start.elapsed();
    std::thread::spawn(move || drop(producer));
    elapsed
}

async fn kafka_loop(
    topic: &str,
    store: SqliteFanoutStore,
    batch_size: Option<usize>,
    expected: usize,
) -> LoopRun {
    let publisher: Arc<dyn Publisher> = Arc::new(KafkaPublisher::new(kafka_config(topic)).unwrap());
    let warm = publisher.publish(&[warmup_message()]).await;
    assert!(warm.iter().all(Result::is_ok), "{warm:?}");
    let run = loop_drain(store, publisher.clone(), batch_size, expected).await;
    std::thread::spawn(move || drop(publisher));
    run
}

async fn kafka_topic(topic: &str, partitions: i32) -> outbox_core::Result<()> {
    create_topic(&brokers(), topic, partitions, None, Duration::from_secs(5))
        .await
        .map(drop)
}

async fn kafka_delete(topics: &[String]) {
    let admin: AdminClient<DefaultClientContext> = match ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
    {
        Ok(admin) => admin,
        Err(e) => return eprintln!("cleanup: no admin client: {e}"),
    };
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(5)));
    match tokio::time::timeout(
        Duration::from_secs(10),
        admin.delete_topics(&names, &options),
    )
    .await
    {
        Ok(Ok(results)) => {
            for result in results {
                if let Err((topic, code)) = result {
                    eprintln!("cleanup: topic {topic} not deleted: {code:?}");
                }
            }
        }
        Ok(Err(e)) => eprintln!("cleanup: deleting topics failed: {e}"),
        Err(_) => eprintln!("cleanup: deleting topics timed out"),
    }
}

// ---------------------------------------------------------------------------------------
// RabbitMQ

fn amqp_url() -> String {
    std::env::var("OUTBOX_AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned())
}

async fn amqp_connect() -> lapin::Result<Connection> {
    Connection::connect(&amqp_url(), ConnectionProperties::default()).await
}

/// The publisher's topology (`Topology::declare`): a durable direct exchange and
/// `queues` durable single-active-consumer queues bound by index.
async fn amqp_declare(channel: &lapin::Channel, topology: &Topology) {
    channel
        .exchange_declare(
            topology.exchange().into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    for index in 0..topology.queue_count() {
        let queue = topology.queue_name(index);
        let mut arguments = FieldTable::default();
        arguments.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
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
            .unwrap();
        channel
            .queue_bind(
                queue.as_str().into(),
                topology.exchange().into(),
                index.to_string().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
}

/// The publisher's properties (`AmqpPublisher::properties`).
fn amqp_properties(message: &FanoutMessage) -> BasicProperties {
    let mut table = FieldTable::default();
    for (name, value) in headers::encode(message) {
        table.insert(name.into(), AMQPValue::LongString(value.into()));
    }
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/json".into())
        .with_message_id(ShortString::try_new(message.instruction_id.as_str()).unwrap())
        .with_headers(table)
}

async fn amqp_publish(
    channel: &lapin::Channel,
    topology: &Topology,
    message: &FanoutMessage,
) -> lapin::PublisherConfirm {
    let routing_key = topology.routing_key(&message.account);
    channel
        .basic_publish(
            topology.exchange().into(),
            routing_key.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            &message.payload,
            amqp_properties(message),
        )
        .await
        .unwrap()
}

/// Publishes everything on one confirm-mode channel, awaiting the confirms every
/// `round` messages.
async fn amqp_raw(topology: &Topology, messages: &[FanoutMessage], round: usize) -> Duration {
    let connection = amqp_connect().await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    amqp_declare(&channel, topology).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirmed = |c: Confirmation| {
        assert!(
            matches!(&c, Confirmation::Ack(None)),
            "not a plain ack: {c:?}"
        );
    };
    confirmed(
        amqp_publish(&channel, topology, &warmup_message())
            .await
            .await
            .unwrap(),
    );
    let start = Instant::now();
    for chunk in messages.chunks(round) {
        let mut pending = Vec::with_capacity(chunk.len());
        for message in chunk {
            pending.push(amqp_publish(&channel, topology, message).await);
        }
        for confirm in pending {
            confirmed(confirm.await.unwrap());
        }
    }
    let elapsed = start.elapsed();
    let _ = connection.close(200, "bench done".into()).await;
    elapsed
}

async fn amqp_loop(
    exchange: &str,
    queues: u16,
    store: SqliteFanoutStore,
    batch_size: Option<usize>,
    expected: usize,
) -> LoopRun {
    let mut config = AmqpConfig::new(amqp_url(), exchange);
    config.queue_count = queues;
    let publisher: Arc<dyn Publisher> = Arc::new(AmqpPublisher::new(config).unwrap());
    let warm = publisher.publish(&[warmup_message()]).await;
    assert!(warm.iter().all(Result::is_ok), "{warm:?}");
    loop_drain(store, publisher, batch_size, expected).await
}

async fn amqp_delete(topologies: &[Topology]) {
    let work = async {
        let connection = amqp_connect().await?;
        let channel = connection.create_channel().await?;
        for topology in topologies {
            for queue in topology.queue_names() {
                channel
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await?;
            }
            channel
                .exchange_delete(topology.exchange().into(), ExchangeDeleteOptions::default())
                .await?;
        }
        connection.close(200, "cleanup".into()).await
    };
    match tokio::time::timeout(Duration::from_secs(20), work).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("cleanup: deleting queues/exchanges failed: {e}"),
        Err(_) => eprintln!("cleanup: deleting queues/exchanges timed out"),
    }
}

// ---------------------------------------------------------------------------------------
// Sections

/// What a variant runs: a raw producer awaiting every `n` messages, or the loop.
#[derive(Clone, Copy)]
enum Variant {
    Raw(usize),
    /// The loop with rounds of this size, or with `FanoutConfig`'s defaults.
    Loop(Option<usize>),
}

/// Raw with everything in flight first (the baseline), then for each batch size the
/// raw producer with a barrier every that many messages and the loop with it.
fn variants(count: usize, batches: &[usize]) -> Vec<(String, Variant)> {
    let mut variants = vec![
        ("raw, all in flight".to_owned(), Variant::Raw(count.max(1))),
        ("loop, defaults".to_owned(), Variant::Loop(None)),
    ];
    for &batch in batches {
        variants.push((
            format!("raw, barrier every {batch}"),
            Variant::Raw(batch.max(1)),
        ));
        variants.push((
            format!("loop, batch_size {batch}"),
            Variant::Loop(Some(batch.max(1))),
        ));
    }
    variants
}

fn report(
    count: usize,
    variants: &[(String, Variant)],
    times: &[Vec<Duration>],
    runs: &[Vec<LoopRun>],
    cpu: &[CpuUse],
) {
    let raw = rate(count, median(&times[0]));
    println!(
        "  {:<26} {:>9} {:>7}   (median of {} reps; ratio to raw all in flight)",
        "variant",
        "msgs/s",
        "ratio",
        times[0].len()
    );
    for (i, (label, _)) in variants.iter().enumerate() {
        let r = rate(count, median(&times[i]));
        println!("  {label:<26} {r:>9.0} {:>7.2}", r / raw);
    }
    // CPU over all reps: whether the machine had room for the loop's own work
    // (its store reads, spans, bookkeeping) beside the producer and the broker.
    println!(
        "  {:<26} {:>9} {:>10} {:>6}   (CPU per message over all reps: this process, the whole machine; busy cores)",
        "variant", "bench µs", "machine µs", "cores"
    );
    for (i, (label, _)) in variants.iter().enumerate() {
        let messages = count * times[i].len();
        println!(
            "  {label:<26} {:>9.1} {:>10.1} {:>6.2}",
            micros_per(cpu[i].process, messages),
            micros_per(cpu[i].machine_busy, messages),
            cpu[i].cores_busy()
        );
    }
    println!("  where the loop's time goes (median run by elapsed):");
    for (i, (label, _)) in variants.iter().enumerate() {
        let mut sorted: Vec<&LoopRun> = runs[i].iter().collect();
        sorted.sort_by_key(|r| r.elapsed);
        if let Some(run) = sorted.get(sorted.len() / 2) {
            println!(
                "    {label}: {:.0} ms = {}",
                ms(run.elapsed),
                run.breakdown()
            );
        }
    }
}

async fn kafka_section(args: &Args, all: &[FanoutMessage], dir: &std::path::Path, run: &str) {
    let partitions = args.num("--partitions", 8) as i32;
    let batches = args.list("--batches", &[1000, 5000]);
    let reps = args.num("--reps", 5).max(1);
    let linger = match LINGER_MS.get() {
        Some(Some(ms)) => format!("linger.ms={ms}"),
        _ => "linger.ms default (5)".to_owned(),
    };
    println!(
        "Kafka at {} ({partitions} partitions, enable.idempotence=true, acks=all, {linger}):",
        brokers()
    );
    if let Err(e) = kafka_topic(&format!("outbox-bench-{run}-probe"), 1).await {
        println!("  SKIPPED: no Kafka broker reachable at {}: {e}", brokers());
        return;
    }
    let mut topics = vec![format!("outbox-bench-{run}-probe")];
    let variants = variants(all.len(), &batches);
    let mut times: Vec<Vec<Duration>> = variants.iter().map(|_| Vec::new()).collect();
    let mut runs: Vec<Vec<LoopRun>> = variants.iter().map(|_| Vec::new()).collect();
    let mut cpu = vec![CpuUse::default(); variants.len()];
    for rep in 0..reps {
        for i in rotated(variants.len(), rep) {
            let topic = format!("outbox-bench-{run}-k{rep}-{i}");
            kafka_topic(&topic, partitions).await.unwrap();
            topics.push(topic.clone());
            let (elapsed, used) = match variants[i].1 {
                Variant::Raw(round) => CpuUse::measure(kafka_raw(&topic, all, round)).await,
                Variant::Loop(batch) => {
                    let store = store(dir, all).await;
                    let (run, used) =
                        CpuUse::measure(kafka_loop(&topic, store, batch, all.len())).await;
                    let elapsed = run.elapsed;
                    runs[i].push(run);
                    (elapsed, used)
                }
            };
            times[i].push(elapsed);
            cpu[i] += used;
        }
    }
    report(all.len(), &variants, &times, &runs, &cpu);
    kafka_delete(&topics).await;
}

async fn amqp_section(args: &Args, all: &[FanoutMessage], dir: &std::path::Path, run: &str) {
    let queues = args.num("--queues", 8) as u16;
    let batches = args.list("--batches", &[1000, 5000]);
    let reps = args.num("--reps", 5).max(1);
    println!(
        "RabbitMQ at {} ({queues} queues, confirms, mandatory, persistent):",
        AmqpConfig::new(amqp_url(), "x").redacted_uri()
    );
    match tokio::time::timeout(Duration::from_secs(5), amqp_connect()).await {
        Ok(Ok(connection)) => {
            let _ = connection.close(200, "probe".into()).await;
        }
        Ok(Err(e)) => return println!("  SKIPPED: no RabbitMQ reachable: {e}"),
        Err(_) => return println!("  SKIPPED: no RabbitMQ reachable (connect timed out)"),
    }
    let variants = variants(all.len(), &batches);
    let mut topologies = Vec::new();
    let mut times: Vec<Vec<Duration>> = variants.iter().map(|_| Vec::new()).collect();
    let mut runs: Vec<Vec<LoopRun>> = variants.iter().map(|_| Vec::new()).collect();
    let mut cpu = vec![CpuUse::default(); variants.len()];
    for rep in 0..reps {
        for i in rotated(variants.len(), rep) {
            let topology = Topology::new(format!("outbox-bench-{run}-a{rep}-{i}"), queues);
            topologies.push(topology.clone());
            let (elapsed, used) = match variants[i].1 {
                Variant::Raw(round) => CpuUse::measure(amqp_raw(&topology, all, round)).await,
                Variant::Loop(batch) => {
                    let store = store(dir, all).await;
                    let (run, used) = CpuUse::measure(amqp_loop(
                        topology.exchange(),
                        queues,
                        store,
                        batch,
                        all.len(),
                    ))
                    .await;
                    let elapsed = run.elapsed;
                    runs[i].push(run);
                    (elapsed, used)
                }
            };
            times[i].push(elapsed);
            cpu[i] += used;
        }
    }
    report(all.len(), &variants, &times, &runs, &cpu);
    amqp_delete(&topologies).await;
}

fn main() {
    let args = Args::from_env();
    let _ = LINGER_MS.set(args.value("--linger").map(str::to_owned));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let count = args.num("--messages", 20_000);
        let accounts = args.num("--accounts", 1_000).max(1);
        let all = messages(count, accounts);
        let mean_payload = all.iter().map(|m| m.payload.len()).sum::<usize>() / count.max(1);
        let dir = tempfile::TempDir::new().unwrap();
        let run = Uuid::now_v7().simple().to_string();
        println!(
            "Fan-out from SQLite (synchronous=FULL) vs raw producers: {count} messages over {accounts} accounts, \
             payload ~{mean_payload} B + {} headers",
            headers::encode(&all[0]).len()
        );
        let only = args.value("--only").unwrap_or("");
        if only.is_empty() || only == "kafka" {
            kafka_section(&args, &all, dir.path(), &run).await;
        }
        if only.is_empty() || only == "amqp" {
            amqp_section(&args, &all, dir.path(), &run).await;
        }
        println!("goal: loop, defaults / raw, all in flight ≥ 0.90");
    });
}
