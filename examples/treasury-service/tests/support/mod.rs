//! What both process tests share: the real services (a fresh PostgreSQL schema and a
//! fresh RabbitMQ exchange with its queues per test), the real binary as a child
//! process, the real AMQP publisher, and the reads the assertions make.

pub mod history;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapin::options::{ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use outbox_core::{FanoutMessage, MessageKind, Publisher};
use outbox_transport_amqp::{AmqpConfig, AmqpPublisher, Topology};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use history::History;

/// A fresh schema and exchange on the real services; `None` (the test is skipped,
/// saying why) when a service is not there, unless `OUTBOX_TEST_REQUIRE` is set.
#[derive(Debug)]
pub struct Env {
    pub postgres: String,
    pub schema: String,
    pub amqp: String,
    pub exchange: String,
    /// The service's consumer name, one per test: its database sessions are
    /// `application_name = treasury-service/<consumer>`.
    pub consumer: String,
    pub pool: PgPool,
}

impl Env {
    pub async fn fresh(name: &str) -> Option<Self> {
        let postgres = std::env::var("OUTBOX_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let amqp = std::env::var("OUTBOX_AMQP_URL")
            .unwrap_or_else(|_| outbox_transport_amqp::DEFAULT_URI.to_owned());
        let unique = uuid::Uuid::now_v7().simple().to_string();
        let schema = format!("treasury_{name}_{unique}");
        let exchange = format!("treasury-{name}-{unique}");
        if let Err(e) = Connection::connect(&amqp, ConnectionProperties::default()).await {
            return missing(&format!("no RabbitMQ at {amqp} ({e})"));
        }
        // The service creates the schema; the test reads it through a pool of its own.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .after_connect({
                let schema = schema.clone();
                move |conn, _| {
                    let set = format!("SET search_path = {schema}");
                    Box::pin(async move {
                        sqlx::raw_sql(sqlx::AssertSqlSafe(set))
                            .execute(conn)
                            .await?;
                        Ok(())
                    })
                }
            })
            .connect(&postgres)
            .await;
        let pool = match pool {
            Ok(pool) => pool,
            Err(e) => return missing(&format!("no PostgreSQL at {postgres} ({e})")),
        };
        Some(Self {
            postgres,
            schema,
            amqp,
            exchange,
            consumer: format!("treasury-{name}"),
            pool,
        })
    }

    pub fn amqp_config(&self) -> AmqpConfig {
        AmqpConfig::new(&self.amqp, &self.exchange)
    }

    /// Publishes each message alone, in the given order (one account's messages stay
    /// in that order on its queue), and checks each was confirmed by the broker.
    pub async fn publish(&self, publisher: &AmqpPublisher, messages: &[FanoutMessage]) {
        for message in messages {
            let results = publisher.publish(std::slice::from_ref(message)).await;
            assert_eq!(results.len(), 1);
            if let Some(Err(e)) = results.into_iter().next() {
                panic!(
                    "publishing {} seq {} failed: {e}",
                    message.account, message.sequence
                );
            }
        }
    }

    /// Messages ready (not in anyone's hands) in the queue `account` is routed to.
    pub async fn ready_in_queue_of(&self, account: &outbox_core::Account) -> u32 {
        let config = self.amqp_config();
        let topology = Topology::new(&config.exchange, config.queue_count);
        let queue = topology.queue_name(topology.queue_index(account));
        let connection = Connection::connect(&self.amqp, ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let declared = channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("the queue exists");
        let _ = connection.close(200, "count".into()).await;
        declared.message_count()
    }

    // ---- reads ----

    /// `merchant_balances` as the service holds it.
    pub async fn balances(&self) -> BTreeMap<(String, String), i64> {
        let rows: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT merchant, asset, available_minor FROM merchant_balances")
                .fetch_all(&self.pool)
                .await
                .unwrap();
        rows.into_iter().map(|(m, a, v)| ((m, a), v)).collect()
    }

    /// Processed markers of the consumer: how many instructions it applied (or
    /// consumed, for a rejection notice). 0 before the service created the tables.
    pub async fn applied_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM inbox_messages WHERE consumer = $1")
            .bind(&self.consumer)
            .fetch_one(&self.pool)
            .await
            .unwrap_or(0)
    }

    /// `(account, sequence)` of every message waiting in the gap queue.
    pub async fn held(&self) -> Vec<(String, i64)> {
        sqlx::query_as(
            "SELECT account, sequence FROM inbox_held WHERE consumer = $1 ORDER BY account, sequence",
        )
        .bind(&self.consumer)
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// `(kind, account, sequence)` of every exception the consumer recorded.
    pub async fn exceptions(&self) -> Vec<(String, String, i64)> {
        sqlx::query_as(
            "SELECT kind, account, sequence FROM exceptions WHERE source = $1 ORDER BY id",
        )
        .bind(&self.consumer)
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// The end state both tests demand: every instruction applied exactly once, in
    /// order; the balances equal the history applied once in sequence order; one
    /// journal row per posting or reversal; nothing held.
    pub async fn assert_converged(&self, history: &History) {
        assert_eq!(
            self.balances().await,
            history.expected_balances(|_| true),
            "balances"
        );

        let markers: Vec<(String, i64, String, String)> = sqlx::query_as(
            "SELECT account, sequence, instruction_id, kind FROM inbox_messages
             WHERE consumer = $1 ORDER BY account, sequence",
        )
        .bind(&self.consumer)
        .fetch_all(&self.pool)
        .await
        .unwrap();
        let mut expected: Vec<_> = history
            .instructions
            .iter()
            .map(|i| {
                let m = &i.message;
                (
                    m.account.to_string(),
                    m.sequence as i64,
                    m.instruction_id.clone(),
                    m.kind.as_str().to_owned(),
                )
            })
            .collect();
        expected.sort();
        assert_eq!(
            markers, expected,
            "each sequence processed once, by its instruction"
        );

        let journal: Vec<(String, String, i64, String, Option<i64>)> = sqlx::query_as(
            "SELECT instruction_id, account, sequence, kind, ledger_tx_id FROM treasury_journal",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap();
        let booked: Vec<_> = history
            .instructions
            .iter()
            .filter(|i| i.message.kind != MessageKind::Rejected)
            .collect();
        assert_eq!(
            journal.len(),
            booked.len(),
            "one journal row per instruction"
        );
        let journal: BTreeSet<_> = journal.into_iter().collect();
        let booked: BTreeSet<_> = booked
            .iter()
            .map(|i| {
                let m = &i.message;
                (
                    m.instruction_id.clone(),
                    m.account.to_string(),
                    m.sequence as i64,
                    m.kind.as_str().to_owned(),
                    m.ledger_tx_id.map(|t| t as i64),
                )
            })
            .collect();
        assert_eq!(journal, booked, "the journal names each booked instruction");

        // Booked in order: per account, journal entries ascend with the sequence.
        let order: Vec<(String, i64)> =
            sqlx::query_as("SELECT account, sequence FROM treasury_journal ORDER BY entry")
                .fetch_all(&self.pool)
                .await
                .unwrap();
        let mut last: BTreeMap<String, i64> = BTreeMap::new();
        for (account, sequence) in order {
            let before = last.insert(account.clone(), sequence).unwrap_or(0);
            assert!(
                sequence > before,
                "{account}: sequence {sequence} booked after {before}"
            );
        }

        assert_eq!(self.held().await, Vec::new(), "nothing held");
    }
}

/// Waits (at most `within`) until `done` says so, failing early if the service
/// exited.
pub async fn wait_until<F, Fut>(service: &mut Service, within: Duration, what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if done().await {
            return;
        }
        if let Some(status) = service.child.try_wait().unwrap() {
            panic!("the service exited ({status}) while waiting until {what}");
        }
        assert!(Instant::now() < deadline, "not {what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The seed of this run's random history: `OUTBOX_TEST_SEED`, or a new one (printed,
/// so a failure can be replayed).
pub fn seed() -> u64 {
    let seed = std::env::var("OUTBOX_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("OUTBOX_TEST_SEED={seed}");
    seed
}

/// Drops the schema, the queues and the exchange when the test ends, failed or not
/// (on a thread of its own: a failing test's runtime may be unwinding).
impl Drop for Env {
    fn drop(&mut self) {
        let (postgres, schema) = (self.postgres.clone(), self.schema.clone());
        let (amqp, config) = (self.amqp.clone(), self.amqp_config());
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let work = async {
                    let connection =
                        Connection::connect(&amqp, ConnectionProperties::default()).await?;
                    let channel = connection.create_channel().await?;
                    let topology = Topology::new(&config.exchange, config.queue_count);
                    for queue in topology.queue_names() {
                        channel
                            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                            .await?;
                    }
                    channel
                        .exchange_delete(
                            config.exchange.as_str().into(),
                            ExchangeDeleteOptions::default(),
                        )
                        .await?;
                    let _ = connection.close(200, "cleanup".into()).await;
                    Ok::<_, lapin::Error>(())
                };
                let amqp = tokio::time::timeout(Duration::from_secs(10), work).await;
                let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
                let postgres = async {
                    let mut conn =
                        <sqlx::PgConnection as sqlx::Connection>::connect(&postgres).await?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                        .execute(&mut conn)
                        .await
                };
                let postgres = tokio::time::timeout(Duration::from_secs(10), postgres).await;
                (amqp, postgres)
            })
        });
        match cleanup.join() {
            Ok((Ok(Ok(())), Ok(Ok(_)))) => {}
            Ok((amqp, postgres)) => {
                eprintln!(
                    "cleanup of {} failed: amqp {amqp:?}, postgres {postgres:?}",
                    self.schema
                )
            }
            Err(_) => eprintln!("cleanup of {} panicked", self.schema),
        }
    }
}

fn missing<T>(why: &str) -> Option<T> {
    if std::env::var_os("OUTBOX_TEST_REQUIRE").is_some() {
        panic!("required service missing (OUTBOX_TEST_REQUIRE): {why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

/// The real `treasury-service` binary, as a child process. Its log (stderr) is
/// passed on to the test's and kept, for the assertions on what it said.
#[derive(Debug)]
pub struct Service {
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Service {
    /// Starts the service on `env` with `extra` flags; returns once it says it
    /// consumes.
    pub async fn start(env: &Env, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_treasury-service"))
            .args(["--database", &env.postgres, "--schema", &env.schema])
            .args(["--amqp", &env.amqp, "--queue", &env.exchange])
            .args(["--consumer", &env.consumer])
            .args(extra)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the treasury service starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the service said it consumes within 30 s")
            .unwrap()
            .unwrap_or_default();
        assert!(line.contains("consuming"), "{line:?}");
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("treasury-service: {line}");
                kept.lock().unwrap().push(line);
            }
        });
        Self { child, log }
    }

    /// What it logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (at most `within`) for the service to exit on its own.
    pub async fn exited(mut self, within: Duration) -> (ExitStatus, Vec<String>) {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the service exited")
            .unwrap();
        // The rest of its stderr, up to the end of the pipe.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let log = self.log.lock().unwrap().clone();
        (status, log)
    }

    /// SIGKILL: no shutdown, no ack of the delivery in hand, no commit in flight.
    pub async fn kill(mut self) -> ExitStatus {
        self.child.start_kill().unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("killed within 10 s")
            .unwrap()
    }

    /// SIGTERM, as a process manager stops it: it finishes the delivery in hand.
    pub async fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("stopped within 20 s of SIGTERM")
            .unwrap()
    }
}
