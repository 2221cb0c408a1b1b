//! The PostgreSQL treasury consumer behind the real HTTP subscriber on loopback,
//! fed by the real HTTP publisher.
//!
//! - Under a hostile but valid stream (30 % redeliveries, shuffled, 8 concurrent
//!   senders, shared balance rows such as `world` and fee accounts) it raises no false
//!   alarm (no `stale_sequence` exception), deadlocks never (counted by the server, in
//!   a database the test creates for itself), and applies every instruction exactly
//!   once: markers and balances equal what was sent.
//! - A message that can never be applied (a body that is not JSON, a float amount) is
//!   answered 4xx, permanent, even when it arrives ahead of a gap; it is never held
//!   where it would poison the message that fills the gap.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_bins::consumer::{PgTreasuryConsumer, TreasuryConsumer};
use outbox_core::{
    Account, Error, FanoutMessage, MessageKind, MessageSink, Publisher, Retry, Subscriber,
};
use outbox_store_postgres::PgConfig;
use outbox_store_sqlite::SqliteConfig;
use outbox_transport_http::{HttpPublisher, HttpSubscriber, PublisherConfig, SubscriberConfig};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const SECRET: &str = "hop2-hostile-secret";
const CONSUMER: &str = "treasury";
const MERCHANTS: u64 = 6;
const SEQUENCES_PER_MERCHANT: u64 = 150;
/// Share of instructions delivered twice, in percent.
const REDELIVERED_PERCENT: u64 = 30;
const SENDERS: usize = 8;
/// Balance rows every merchant's transactions touch: where lock order matters.
const SHARED_ROWS: [&str; 5] = [
    "world",
    "fees:platform",
    "fees:network",
    "fees:fx",
    "treasury:settlement",
];
/// Bound on the attempts of one message (a transient answer is retried).
const MAX_ATTEMPTS: usize = 50;

fn server_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A database of the test's own, so `pg_stat_database` counts only its deadlocks.
/// Dropped (with its sessions) when the guard goes.
struct OwnDatabase {
    name: String,
}

impl OwnDatabase {
    /// `None` (after saying so) when no server answers and `OUTBOX_TEST_REQUIRE` is unset.
    async fn create() -> Option<Self> {
        let mut admin = match PgConnection::connect(&server_url()).await {
            Ok(conn) => conn,
            Err(e) if std::env::var_os("OUTBOX_TEST_REQUIRE").is_none() => {
                eprintln!("SKIPPED: no PostgreSQL at {} ({e})", server_url());
                return None;
            }
            Err(e) => panic!("PostgreSQL is required (OUTBOX_TEST_REQUIRE) but unreachable: {e}"),
        };
        let name = format!("outbox_hostile_{}", uuid::Uuid::now_v7().simple());
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        admin.close().await.expect("close");
        Some(Self { name })
    }

    /// The server URL with this database in place of the default one.
    fn url(&self) -> String {
        let server = server_url();
        let (base, _) = server
            .rsplit_once('/')
            .expect("a postgres:// URL with a database");
        format!("{base}/{}", self.name)
    }

    /// Deadlocks the server detected in this database, once every session of it has
    /// ended (a backend reports its statistics at the latest when it exits).
    async fn deadlocks(&self) -> i64 {
        let mut admin = PgConnection::connect(&server_url()).await.expect("connect");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let sessions: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                    .bind(&self.name)
                    .fetch_one(&mut admin)
                    .await
                    .expect("sessions");
            if sessions == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{sessions} sessions of {} still open",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A fresh snapshot of the statistics, not one cached by this session.
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut admin)
            .await
            .expect("clear snapshot");
        let deadlocks: i64 =
            sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = $1")
                .bind(&self.name)
                .fetch_one(&mut admin)
                .await
                .expect("pg_stat_database");
        admin.close().await.expect("close");
        deadlocks
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop cannot be async, nor block on the test's runtime: a thread with a
        // runtime of its own drops the database.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime
                .block_on(async {
                    let mut admin = PgConnection::connect(&server_url()).await?;
                    sqlx::query(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await?;
                    admin.close().await
                })
                .ok()
        })
        .join();
        if !matches!(dropped, Ok(Some(()))) {
            eprintln!("note: test database {} was not dropped", self.name);
        }
    }
}

/// The HTTP subscriber serving `sink` on a loopback port.
struct Serving {
    subscriber: Arc<HttpSubscriber>,
    stop: watch::Sender<bool>,
    task: JoinHandle<outbox_core::Result<()>>,
}

impl Serving {
    async fn start(sink: Arc<dyn MessageSink>) -> Self {
        let subscriber = Arc::new(
            HttpSubscriber::bind(SubscriberConfig::new(([127, 0, 0, 1], 0).into(), SECRET))
                .await
                .expect("bind the subscriber"),
        );
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn({
            let subscriber = Arc::clone(&subscriber);
            async move { subscriber.run(sink, stopped).await }
        });
        Self {
            subscriber,
            stop,
            task,
        }
    }

    fn publisher(&self) -> HttpPublisher {
        let mut config = PublisherConfig::new(self.subscriber.url(), SECRET);
        config.timeout = Duration::from_secs(30);
        HttpPublisher::new(config).expect("publisher")
    }

    async fn stop(self) {
        self.stop.send(true).expect("subscriber running");
        let served = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the subscriber stopped in time")
            .expect("subscriber task");
        assert!(served.is_ok(), "{served:?}");
    }
}

/// One ledger posting: (source, destination, amount in minor units).
type Posting = (String, String, u64);

fn posting_json(postings: &[Posting]) -> serde_json::Value {
    postings
        .iter()
        .map(|(source, destination, amount)| {
            json!({ "source": source, "destination": destination, "amount": amount, "asset": "USD/2" })
        })
        .collect()
}

fn message(
    id: &str,
    account: &str,
    sequence: u64,
    kind: MessageKind,
    tx: Option<u64>,
    payload: Vec<u8>,
) -> FanoutMessage {
    FanoutMessage {
        instruction_id: id.to_owned(),
        account: Account::parse(account).expect("account"),
        sequence,
        kind,
        ledger: "payouts".to_owned(),
        ledger_tx_id: tx,
        traceparent: None,
        tracestate: None,
        payload,
    }
}

/// What was sent, and what the consumer must hold afterwards.
struct Stream {
    deliveries: Vec<FanoutMessage>,
    /// `(account, sequence, instruction id, kind)` of every instruction.
    instructions: Vec<(String, u64, String, String)>,
    balances: BTreeMap<(String, String), i64>,
}

/// Each merchant's sequences 1..=N: mostly committed transactions moving money between
/// the merchant's rows and the shared rows, some reverts, some rejection notices; 30 %
/// of them twice; all shuffled.
fn hostile_stream(rng: &mut fastrand::Rng) -> Stream {
    let mut deliveries = Vec::new();
    let mut instructions = Vec::new();
    let mut balances: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut tx = 0;
    for merchant in 1..=MERCHANTS {
        let account = format!("merchants:{merchant}");
        let own = [format!("{account}:available"), format!("{account}:pending")];
        for sequence in 1..=SEQUENCES_PER_MERCHANT {
            let id = format!("hostile-{merchant}-{sequence}");
            let kind = match rng.u8(..20) {
                0 | 1 => MessageKind::Rejected,
                2 => MessageKind::Reverted,
                _ => MessageKind::Committed,
            };
            let (ledger_tx, payload) = if kind == MessageKind::Rejected {
                let notice = json!({
                    "outbox_rejected_code": "INSUFFICIENT_FUND",
                    "outbox_event_id": id,
                    "outbox_account": account,
                    "outbox_sequence": sequence.to_string(),
                });
                (None, serde_json::to_vec(&notice).unwrap())
            } else {
                tx += 1;
                // Two to four postings, each between a shared row and a merchant row or
                // between two shared rows, in a random order: the rows one transaction
                // touches, and the order its postings name them, differ every time.
                let postings: Vec<Posting> = (0..rng.usize(2..=4))
                    .map(|_| {
                        let shared = SHARED_ROWS[rng.usize(..SHARED_ROWS.len())].to_owned();
                        let other = if rng.bool() {
                            own[rng.usize(..own.len())].clone()
                        } else {
                            let mut other = shared.clone();
                            while other == shared {
                                other = SHARED_ROWS[rng.usize(..SHARED_ROWS.len())].to_owned();
                            }
                            other
                        };
                        let amount = rng.u64(1..100_000);
                        if rng.bool() {
                            (shared, other, amount)
                        } else {
                            (other, shared, amount)
                        }
                    })
                    .collect();
                for (source, destination, amount) in &postings {
                    let amount = i64::try_from(*amount).unwrap();
                    *balances
                        .entry((source.clone(), "USD/2".to_owned()))
                        .or_default() -= amount;
                    *balances
                        .entry((destination.clone(), "USD/2".to_owned()))
                        .or_default() += amount;
                }
                let body = json!({
                    "id": tx,
                    "postings": posting_json(&postings),
                    "metadata": {
                        "outbox_event_id": id,
                        "outbox_account": account,
                        "outbox_sequence": sequence.to_string(),
                    },
                });
                (Some(tx), serde_json::to_vec(&body).unwrap())
            };
            let m = message(&id, &account, sequence, kind, ledger_tx, payload);
            if rng.u64(..100) < REDELIVERED_PERCENT {
                deliveries.push(m.clone());
            }
            deliveries.push(m);
            instructions.push((account.clone(), sequence, id, kind.as_str().to_owned()));
        }
    }
    rng.shuffle(&mut deliveries);
    Stream {
        deliveries,
        instructions,
        balances,
    }
}

/// What the senders saw.
#[derive(Default)]
struct Answers {
    /// Transient answers (5xx) that made a sender retry, with the first few errors.
    retried: AtomicUsize,
    first_retries: Mutex<Vec<String>>,
}

impl Answers {
    fn note(&self, error: &Error) {
        let mut first = self.first_retries.lock().unwrap();
        if first.len() < 3 {
            first.push(error.to_string());
        }
    }
}

/// `SENDERS` tasks pull from one shuffled queue and publish each message, retrying a
/// transient answer (bounded); a permanent one fails the test.
async fn send_concurrently(
    publisher: Arc<HttpPublisher>,
    deliveries: Vec<FanoutMessage>,
) -> Arc<Answers> {
    let queue = Arc::new(Mutex::new(VecDeque::from(deliveries)));
    let answers = Arc::new(Answers::default());
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let (publisher, queue, answers) = (
                Arc::clone(&publisher),
                Arc::clone(&queue),
                Arc::clone(&answers),
            );
            tokio::spawn(async move {
                loop {
                    let next = queue.lock().unwrap().pop_front();
                    let Some(m) = next else { return };
                    for attempt in 1..=MAX_ATTEMPTS {
                        match publisher.publish(std::slice::from_ref(&m)).await.remove(0) {
                            Ok(()) => break,
                            Err(e) if e.is_transient() && attempt < MAX_ATTEMPTS => {
                                answers.retried.fetch_add(1, Ordering::Relaxed);
                                answers.note(&e);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(e) => panic!("{} not delivered: {e}", m.instruction_id),
                        }
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.expect("sender");
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_stream_raises_no_false_alarm_and_never_deadlocks() {
    let Some(db) = OwnDatabase::create().await else {
        return;
    };
    let seed = std::env::var("OUTBOX_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("hostile stream seed {seed} (OUTBOX_TEST_SEED replays it)");
    let stream = hostile_stream(&mut fastrand::Rng::with_seed(seed));
    let consumer =
        PgTreasuryConsumer::open(PgConfig::new(db.url()), CONSUMER, Duration::from_secs(3600))
            .await
            .expect("open the consumer");
    let serving = Serving::start(Arc::new(consumer.clone())).await;
    let publisher = Arc::new(serving.publisher());

    let started = Instant::now();
    let sent = stream.deliveries.len();
    let answers = send_concurrently(publisher, stream.deliveries).await;
    eprintln!(
        "{sent} deliveries of {} instructions in {:?}",
        stream.instructions.len(),
        started.elapsed()
    );
    serving.stop().await;

    let mut expected = stream.instructions.clone();
    expected.sort();
    let applied = consumer.applied().await.expect("applied");
    let balances = consumer.balances().await.expect("balances");
    let mut conn = PgConnection::connect(&db.url()).await.expect("connect");
    let exceptions: Vec<(String, String, i64, String)> =
        sqlx::query_as("SELECT kind, account, sequence, detail FROM exceptions ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .expect("exceptions");
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_held")
        .fetch_one(&mut conn)
        .await
        .expect("held");
    conn.close().await.expect("close");
    let applied_count = outbox_bins::consumer::ConsumerStats::get(&consumer.stats().applied);
    drop(consumer);
    let deadlocks = db.deadlocks().await;

    let stale = exceptions
        .iter()
        .filter(|(kind, ..)| kind == "stale_sequence")
        .count();
    let retried = answers.retried.load(Ordering::Relaxed);
    let first_retries = answers.first_retries.lock().unwrap().clone();
    eprintln!(
        "stale_sequence exceptions: {stale}, exceptions in all: {}, deadlocks: {deadlocks}, answers retried: {retried}",
        exceptions.len()
    );
    assert!(
        stale == 0 && exceptions.is_empty() && deadlocks == 0 && retried == 0,
        "seed {seed}: {stale} stale_sequence exceptions, {} exceptions in all (first: {:?}), \
         {deadlocks} deadlocks, {retried} answers retried (first: {first_retries:?})",
        exceptions.len(),
        exceptions.first(),
    );
    // Exactly once: one marker per instruction, at its sequence, with its outcome,
    // nothing left waiting, and the balances the sent postings add up to.
    assert_eq!(held, 0, "messages left in the gap queue");
    assert_eq!(applied, expected, "processed markers");
    assert_eq!(applied_count, expected.len() as u64, "applied counter");
    assert_eq!(balances, stream.balances, "treasury balances");
}

/// The three messages of the refusal cases, for `account`: a float amount at sequence
/// 2 (ahead of a gap), a body that is not JSON at sequence 1, and a good sequence 1.
fn unappliable_and_good(account: &str) -> [FanoutMessage; 3] {
    let good = json!({
        "id": 3,
        "postings": posting_json(&[("world".to_owned(), format!("{account}:available"), 700)]),
    });
    [
        message(
            "float-2",
            account,
            2,
            MessageKind::Committed,
            Some(1),
            br#"{"id":1,"postings":[{"source":"world","destination":"a","amount":1.5,"asset":"USD/2"}]}"#
                .to_vec(),
        ),
        message(
            "not-json-1",
            account,
            1,
            MessageKind::Committed,
            Some(2),
            b"<html>not a ledger transaction".to_vec(),
        ),
        message(
            "good-1",
            account,
            1,
            MessageKind::Committed,
            Some(3),
            serde_json::to_vec(&good).unwrap(),
        ),
    ]
}

/// Publishes the float and the non-JSON message (each must come back 4xx, permanent,
/// naming the field), then the good one (must apply), through the HTTP subscriber;
/// and checks the sink's own error is permanent, so a Kafka or AMQP subscriber would
/// not spin on it either.
async fn unappliable_messages_are_refused(sink: Arc<dyn MessageSink>, account: &str) {
    let [float, not_json, good] = unappliable_and_good(account);
    let serving = Serving::start(Arc::clone(&sink)).await;
    let publisher = serving.publisher();
    for (m, field) in [(&float, "postings[0].amount"), (&not_json, "payload")] {
        let answer = publisher.publish(std::slice::from_ref(m)).await.remove(0);
        let err: Error = answer.expect_err(&format!("{} was taken", m.instruction_id));
        let status: u16 = err.context("status").unwrap_or("none").parse().unwrap_or(0);
        assert!(
            (400..500).contains(&status) && err.retry() == Retry::Permanent,
            "{}: expected a permanent 4xx, got {err}",
            m.instruction_id
        );
        assert!(err.to_string().contains(field), "{err}");
    }
    let answer = publisher
        .publish(std::slice::from_ref(&good))
        .await
        .remove(0);
    assert!(
        answer.is_ok(),
        "the good sequence 1 was refused: {answer:?}"
    );
    serving.stop().await;
    let direct = sink
        .accept("direct", vec![float])
        .await
        .expect_err("a float amount was taken");
    assert_eq!(direct.retry(), Retry::Permanent, "{direct}");
    assert_eq!(direct.field(), Some("postings[0].amount"), "{direct}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unappliable_messages_are_answered_4xx_by_the_pg_consumer() {
    let Some(db) = OwnDatabase::create().await else {
        return;
    };
    let consumer =
        PgTreasuryConsumer::open(PgConfig::new(db.url()), CONSUMER, Duration::from_secs(3600))
            .await
            .expect("open the consumer");
    let account = "merchants:9";
    unappliable_messages_are_refused(Arc::new(consumer.clone()), account).await;
    assert_eq!(
        consumer.applied().await.unwrap(),
        vec![(
            account.to_owned(),
            1,
            "good-1".to_owned(),
            "committed".to_owned()
        )]
    );
    assert_eq!(
        consumer.balances().await.unwrap(),
        BTreeMap::from([
            (("world".to_owned(), "USD/2".to_owned()), -700),
            ((format!("{account}:available"), "USD/2".to_owned()), 700),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unappliable_messages_are_answered_4xx_by_the_sqlite_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let consumer = TreasuryConsumer::open(
        SqliteConfig::new(dir.path().join("consumer.db")),
        CONSUMER,
        Duration::from_secs(3600),
    )
    .await
    .expect("open the consumer");
    let account = "merchants:9";
    unappliable_messages_are_refused(Arc::new(consumer.clone()), account).await;
    assert_eq!(
        consumer.applied().unwrap(),
        vec![(
            account.to_owned(),
            1,
            "good-1".to_owned(),
            "committed".to_owned()
        )]
    );
    assert_eq!(consumer.balances().unwrap().len(), 2);
}
