//! Campaign scenarios on Hop 2 (issue 15): the fan-out and the consumer SIGKILLed at
//! random points while messages flow over HTTP; and two broker outages at a random
//! point mid-stream (3 s short / 30 s long) under a fan-out and a consumer that keep
//! running: RabbitMQ stopped (`rabbitmqctl stop_app`) with both on AMQP, and a Kafka
//! broker (Tansu on SQLite storage, on a port of its own) SIGKILLed and started again
//! on the same file with both on Kafka.
//!
//! Real processes on loopback: the dev ledger signs webhooks to `outbox fanout`, which
//! publishes over HTTP to `outbox consume` and its SQLite treasury; the fan-out also
//! catches up from the ledger's log, as a production deployment would. While batches
//! of payouts (some refused for insufficient funds) are relayed, the fan-out or the
//! consumer is killed with SIGKILL at random moments and started again. At the end
//! the auditor, from the outbox alone: every event posted or refused once and in
//! order, the consumer applied each exactly once at its sequence, holds nothing, and
//! its balances are the ledger's. A fan-out or consumer that exits by itself (instead
//! of waiting for the broker) fails the run.
//!
//! `OUTBOX_CHAOS_PROFILE=long` (scripts/chaos.sh long) runs the long sizes;
//! `OUTBOX_TEST_SEED` replays a run (the seed is printed).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::process::Process;
use common::*;
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, WebhookBackoff, WebhookTarget};
use outbox_store_sqlite::{SqliteConfig, SqliteStore};
use outbox_testkit::auditor::{ConsumerView, audit};
use outbox_testkit::ports::free_port;
use outbox_testkit::tansu::DurableBroker;
use outbox_transport_http::WEBHOOK_PATH;

const PUBLISH_SECRET: &str = "chaos-hop2-secret";

/// Sizes of one run.
struct Profile {
    merchants: usize,
    batches: usize,
    batch: usize,
    kills: usize,
    /// How long the broker is down in the outage scenarios.
    outage: Duration,
}

fn profile() -> Profile {
    match std::env::var("OUTBOX_CHAOS_PROFILE").as_deref() {
        Ok("long") => Profile {
            merchants: 200,
            batches: 100,
            batch: 200,
            kills: 60,
            outage: Duration::from_secs(30),
        },
        _ => Profile {
            merchants: 12,
            batches: 10,
            batch: 30,
            kills: 6,
            outage: Duration::from_secs(3),
        },
    }
}

struct Parts {
    outbox: Outbox,
    fanout_port: u16,
    /// The fan-out's destination and the consumer's source (one Hop 2 transport).
    to: String,
    from: String,
    ledger_url: String,
}

impl Parts {
    fn db(&self, file: &str) -> String {
        format!("sqlite://{}", self.outbox.dir().join(file).display())
    }

    async fn fanout(&self) -> Process {
        let args: Vec<String> = [
            "fanout",
            "--listen",
            &format!("127.0.0.1:{}", self.fanout_port),
            "--database",
            &self.db("fanout.db"),
            "--secret",
            SECRET,
            "--to",
            &self.to,
            "--publish-secret",
            PUBLISH_SECRET,
            "--poll-interval-ms",
            "50",
            "--ledger-url",
            &self.ledger_url,
            "--ledger-name",
            LEDGER,
            "--catch-up-interval-secs",
            "1",
            "--catch-up-settle-secs",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Process::start("fanout", &args, "fanout: intake on").await
    }

    async fn consumer(&self) -> Process {
        let args: Vec<String> = [
            "consume",
            "--from",
            &self.from,
            "--secret",
            PUBLISH_SECRET,
            "--database",
            &self.db("treasury.db"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Process::start("consume", &args, "consume: treasury").await
    }

    fn applied(&self) -> i64 {
        let conn = rusqlite::Connection::open(self.outbox.dir().join("treasury.db")).unwrap();
        conn.query_row("SELECT COUNT(*) FROM inbox_messages", [], |r| r.get(0))
            .unwrap_or(0)
    }

    fn balances(&self) -> BTreeMap<String, i128> {
        treasury_balances(&self.outbox.dir().join("treasury.db"))
    }
}

/// What a run does to Hop 2 while batches flow.
enum Disruption {
    /// SIGKILL the fan-out or the consumer at random points (HTTP transport).
    Kills,
    /// Take the broker down for a while, once, at a random point mid-stream.
    BrokerOutage(Broker),
}

/// The broker of an outage scenario.
enum Broker {
    /// The shared RabbitMQ: its app stopped, then started again (AMQP transport).
    RabbitMq,
    /// A Tansu of the run's own on SQLite storage: SIGKILLed, then started again on
    /// the same port and file (Kafka transport).
    Tansu(DurableBroker),
}

impl Broker {
    /// Takes the broker down, keeps it down for `down`, and brings it back.
    async fn outage(&mut self, down: Duration) {
        match self {
            Self::RabbitMq => {
                let stopped = StoppedBroker::stop();
                tokio::time::sleep(down).await;
                drop(stopped);
            }
            Self::Tansu(broker) => {
                let starts = broker.starts;
                broker.kill();
                assert!(
                    std::net::TcpStream::connect(broker.brokers()).is_err(),
                    "the killed Tansu still answers on {}",
                    broker.brokers()
                );
                tokio::time::sleep(down).await;
                broker.restart().await;
                assert_eq!(broker.starts, starts + 1);
            }
        }
    }
}

/// A missing service: a skip, or a failure with `OUTBOX_TEST_REQUIRE=1`.
fn skip(why: &str) {
    assert!(
        std::env::var_os("OUTBOX_TEST_REQUIRE").is_none(),
        "OUTBOX_TEST_REQUIRE=1 and {why}"
    );
    eprintln!("SKIPPED: {why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fanout_and_consumer_sigkilled_at_random_points_lose_and_double_nothing() {
    let consumer_port = free_port();
    run(
        "hop2-sigkill",
        Disruption::Kills,
        format!("http://127.0.0.1:{consumer_port}/hop2/messages"),
        format!("http://127.0.0.1:{consumer_port}"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rabbitmq_outage_mid_stream_loses_and_doubles_nothing() {
    if !rabbitmq_reachable() {
        skip("no RabbitMQ at 127.0.0.1:5672");
        return;
    }
    let exchange = format!("chaos-hop2-{:x}", fastrand::u64(..));
    let url = format!("amqp://guest:guest@127.0.0.1:5672/%2f?exchange={exchange}&queues=4");
    run(
        "hop2-rabbitmq-outage",
        Disruption::BrokerOutage(Broker::RabbitMq),
        url.clone(),
        url,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kafka_broker_sigkilled_mid_stream_loses_and_doubles_nothing() {
    // The broker's log outlives its process: a SIGKILL tests our recovery, not
    // whether an in-memory broker forgets (`outbox_testkit::tansu`).
    let storage = tempfile::tempdir().unwrap();
    let broker = match DurableBroker::start(storage.path()).await {
        Ok(broker) => broker,
        Err(why) => {
            skip(&why);
            return;
        }
    };
    let topic = format!("chaos-hop2-{:x}", fastrand::u64(..));
    let brokers = broker.brokers();
    run(
        "hop2-kafka-kill",
        Disruption::BrokerOutage(Broker::Tansu(broker)),
        format!("kafka://{brokers}/{topic}?partitions=4"),
        format!("kafka://{brokers}/{topic}"),
    )
    .await;
}

fn rabbitmq_reachable() -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], 5672).into(), Duration::from_millis(500))
        .is_ok()
}

/// `rabbitmqctl stop_app` until dropped: the app is started again even when the test
/// fails half-way, so the shared broker is never left stopped.
struct StoppedBroker;

impl StoppedBroker {
    fn stop() -> Self {
        rabbitmqctl(&["stop_app"]);
        Self
    }
}

impl Drop for StoppedBroker {
    fn drop(&mut self) {
        rabbitmqctl(&["start_app"]);
        rabbitmqctl(&["await_startup", "--timeout", "60"]);
    }
}

fn rabbitmqctl(args: &[&str]) {
    let status = std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .status()
        .expect("run rabbitmqctl");
    assert!(status.success(), "rabbitmqctl {args:?}: {status}");
}

async fn run(scenario: &str, mut disruption: Disruption, to: String, from: String) {
    let sizes = profile();
    let (seed, mut rng) = seeded(scenario);

    let fanout_port = free_port();
    let ledger = DevLedger::start(DevLedgerConfig {
        webhooks: vec![WebhookTarget {
            url: format!("http://127.0.0.1:{fanout_port}{WEBHOOK_PATH}"),
            secret: SECRET.to_owned(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(300),
            max_attempts: 1_000,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap();
    let parts = Parts {
        outbox: Outbox::new().await,
        fanout_port,
        to,
        from,
        ledger_url: ledger.url(),
    };
    let mut fanout = Some(parts.fanout().await);
    let mut consumer = Some(parts.consumer().await);

    // Kill points, spread over the batches; an outage in one batch of the middle half.
    let kills = match disruption {
        Disruption::Kills => sizes.kills,
        Disruption::BrokerOutage(_) => 0,
    };
    let mut kill_after: Vec<usize> = (0..kills).map(|_| rng.usize(0..sizes.batches)).collect();
    let outage_at = match disruption {
        Disruption::Kills => None,
        Disruption::BrokerOutage(_) => Some(rng.usize(sizes.batches / 4..=sizes.batches * 3 / 4)),
    };
    // How long the broker was down, and how many events were applied and enqueued then.
    let mut outage = None;
    kill_after.sort_unstable();
    let (mut kills_fanout, mut kills_consumer) = (0, 0);
    let mut enqueued = 0;
    for batch in 0..sizes.batches {
        let events: Vec<_> = (0..sizes.batch)
            .map(|_| {
                let merchant = format!("x{}", rng.usize(0..sizes.merchants));
                // About one payout in five is larger than anything funded: refused.
                match rng.u8(0..10) {
                    0..=4 => fund(&merchant, rng.u64(1_000..50_000)),
                    5..=7 => payout(&merchant, rng.u64(100..2_000)),
                    _ => payout(&merchant, 900_000_000),
                }
            })
            .collect();
        enqueued += events.len();
        parts.outbox.enqueue(&events);
        let relay = tokio::spawn({
            let client = client(&ledger, Duration::from_secs(10));
            let store = parts.outbox.store.clone();
            async move { drain_store(store, client).await }
        });
        while kill_after.first() == Some(&batch) {
            kill_after.remove(0);
            tokio::time::sleep(Duration::from_millis(rng.u64(0..200))).await;
            if rng.bool() {
                fanout.take().unwrap().kill().await;
                kills_fanout += 1;
                fanout = Some(parts.fanout().await);
            } else {
                consumer.take().unwrap().kill().await;
                kills_consumer += 1;
                consumer = Some(parts.consumer().await);
            }
        }
        if let (Some(at), Disruption::BrokerOutage(broker)) = (outage_at, &mut disruption)
            && at == batch
        {
            // Mid-stream: the consumer is taking messages (it has joined, a Kafka group
            // takes a few seconds), and this batch is on its way through the fan-out.
            eventually(
                Duration::from_secs(60),
                "the consumer to take messages",
                || parts.applied() > 0,
            )
            .await;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..200))).await;
            let applied = parts.applied();
            eprintln!(
                "chaos {scenario}: broker down for {:?} at batch {batch} ({applied} of {enqueued} applied)",
                sizes.outage
            );
            broker.outage(sizes.outage).await;
            eprintln!(
                "chaos {scenario}: broker back ({} applied)",
                parts.applied()
            );
            outage = Some((sizes.outage, applied, enqueued));
        }
        relay.await.unwrap();
    }

    let limit = Duration::from_secs(if sizes.kills > 10 { 600 } else { 120 });
    let started = Instant::now();
    let (fanout_running, consumer_running) = (fanout.as_mut().unwrap(), consumer.as_mut().unwrap());
    let mut shown = Instant::now();
    eventually(limit, "the consumer to apply every event", || {
        // Nobody restarts them from here on: an exit is a process that gave up.
        for process in [&mut *fanout_running, &mut *consumer_running] {
            if let Some(status) = process.exited() {
                panic!(
                    "{} exited ({status}) before the consumer applied every event",
                    process.name()
                );
            }
        }
        let applied = parts.applied();
        if shown.elapsed() >= Duration::from_secs(10) {
            // Progress, so a run that times out shows where it stalled.
            eprintln!("chaos {scenario}: {applied} of {enqueued} applied");
            shown = Instant::now();
        }
        applied == enqueued as i64
    })
    .await;
    let settled = started.elapsed();
    let treasury = SqliteStore::open(SqliteConfig::new(parts.outbox.dir().join("treasury.db")))
        .await
        .unwrap();
    let reader = client(&ledger, Duration::from_secs(10));
    let consumers = [ConsumerView {
        name: "treasury".into(),
        inbox: &treasury,
        balances: Some(parts.balances()),
    }];
    let report = audit(&parts.outbox.store, &reader, &consumers)
        .await
        .unwrap();
    // The campaign's figure line (`scripts/chaos.sh` collects the `CHAOS` lines).
    println!(
        "CHAOS {scenario}: seed={seed} events={} accounts={} posted={} refused={} applied={} \
         crash_points={} (fan-out {kills_fanout}, consumer {kills_consumer}) discrepancies={} \
         broker_outage={} settled_after_last_batch={:.1}s",
        report.events,
        sizes.merchants,
        report.posted,
        report.refused,
        report.applied,
        kills_fanout + kills_consumer,
        report.discrepancies.len(),
        outage.map_or("none".to_owned(), |(down, applied, enqueued)| format!(
            "{down:?} (down when {applied} of {enqueued} enqueued were applied)"
        )),
        settled.as_secs_f64()
    );
    report.assert_clean();
    assert_eq!((report.events, report.applied), (enqueued, enqueued));
    assert!(report.refused > 0, "no refusal was exercised: {report}");
    assert_eq!(kills_fanout + kills_consumer, kills);
    assert_eq!(outage.is_some(), outage_at.is_some());
    // The last fan-out process's own count of publishes and loop-level retries (a
    // broker outage shorter than librdkafka's message timeout costs it none).
    for line in fanout.take().unwrap().terminate().await {
        if line.starts_with("fanout ") && line.contains("published") {
            println!("chaos {scenario}: last fan-out process: {line}");
        }
    }
    consumer.take().unwrap().terminate().await;
    ledger.shutdown().await;
}

/// The relay's drain (as `common::drain`) over a clone of the outbox's store.
async fn drain_store(
    store: SqliteStore,
    ledger: outbox_ledger_formance::FormanceLedger,
) -> outbox_core::Summary {
    use std::sync::Arc;
    let relay = store.polling_relay("relay").await.unwrap();
    let dispatcher = outbox_core::Dispatcher::open(
        Arc::new(store.clone()),
        Box::new(relay),
        Arc::new(ledger),
        quick_config(),
    )
    .await
    .unwrap();
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    tokio::time::timeout(
        Duration::from_secs(120),
        dispatcher.run(outbox_core::RunMode::Drain, stopped),
    )
    .await
    .expect("the relay drained in time")
    .unwrap()
}
