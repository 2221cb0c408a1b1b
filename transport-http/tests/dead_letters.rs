//! One permanently refused message does not stall a destination: the real
//! `HttpPublisher` and `FanoutLoop` on the real fan-out stores (a SQLite file and a
//! fresh PostgreSQL schema), publishing to a loopback receiver that answers 422 to one
//! account's message while thousands of other accounts' messages follow, with a
//! look-ahead far smaller than that.
//!
//! PostgreSQL: `OUTBOX_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); without a server the Postgres case says
//! "skipped" and passes, unless `OUTBOX_TEST_REQUIRE=1`.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use outbox_core::fanout::headers;
use outbox_core::{
    Account, DeadLetter, DeadLetterQuery, DeadLetterReason, DeadLetterState, FanoutConfig,
    FanoutLoop, FanoutMessage, FanoutStore, Publisher, RunMode,
};
use outbox_store_postgres::{PgConfig, PgFanoutStore};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore};
use outbox_transport_http::{HttpPublisher, MESSAGES_PATH, PublisherConfig};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::sync::watch;

use common::{HOP2_SECRET, committed};

const POISONED: &str = "merchants:0";
/// Healthy accounts, each with `HEALTHY_SEQUENCES` messages.
const HEALTHY: u64 = 1500;
const HEALTHY_SEQUENCES: u64 = 2;
const DEADLINE: Duration = Duration::from_secs(90);

/// The consumer endpoint: answers 422 to the poisoned account's sequence 2 until it is
/// fixed, 204 to everything else, and records what it accepted in arrival order.
#[derive(Default)]
struct Receiver {
    fixed: AtomicBool,
    accepted: Mutex<Vec<(String, u64)>>,
}

impl Receiver {
    fn accepted_of(&self, account: &str) -> Vec<u64> {
        let accepted = self.accepted.lock().unwrap();
        accepted
            .iter()
            .filter(|(a, _)| a == account)
            .map(|(_, s)| *s)
            .collect()
    }

    /// Accounts other than the poisoned one, with the sequences each received.
    fn healthy(&self) -> BTreeMap<String, Vec<u64>> {
        let mut healthy: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (account, sequence) in self.accepted.lock().unwrap().iter() {
            if account != POISONED {
                healthy.entry(account.clone()).or_default().push(*sequence);
            }
        }
        healthy
    }
}

async fn answer(State(receiver): State<Arc<Receiver>>, headers: HeaderMap) -> StatusCode {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let account = header(headers::ACCOUNT);
    let sequence: u64 = header(headers::SEQUENCE).parse().unwrap_or_default();
    if account == POISONED && sequence == 2 && !receiver.fixed.load(Ordering::SeqCst) {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    receiver.accepted.lock().unwrap().push((account, sequence));
    StatusCode::NO_CONTENT
}

async fn start_receiver() -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver::default());
    let app = Router::new()
        .route(MESSAGES_PATH, post(answer))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{MESSAGES_PATH}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (receiver, url)
}

/// The poisoned account's sequences 1 and 2 first, then the healthy accounts, with
/// the poisoned account's 3, 4, 5 among them.
fn stream() -> Vec<FanoutMessage> {
    let mut tx = 0;
    let mut next = |account: &str, sequence: u64| {
        tx += 1;
        committed(account, sequence, tx)
    };
    let mut messages = vec![next(POISONED, 1), next(POISONED, 2)];
    for sequence in 1..=HEALTHY_SEQUENCES {
        for account in 1..=HEALTHY {
            messages.push(next(&format!("merchants:{account}"), sequence));
        }
        messages.push(next(POISONED, sequence + 2));
    }
    messages.push(next(POISONED, HEALTHY_SEQUENCES + 3));
    messages
}

async fn append_all(store: &dyn FanoutStore, messages: &[FanoutMessage]) {
    for (i, chunk) in messages.chunks(500).enumerate() {
        store.append(&format!("wh-{i}"), chunk).await.unwrap();
    }
}

/// Small rounds, a look-ahead of two rounds: the buffer holds about 100 messages.
fn small_look_ahead() -> FanoutConfig {
    FanoutConfig {
        batch_size: 50,
        look_ahead: 2,
        rounds_in_flight: 1,
        poll_interval: Duration::from_millis(20),
        ..FanoutConfig::default()
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        if Instant::now() > deadline {
            let _ = writeln!(std::io::stderr(), "timed out waiting for {what}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn a_refused_message_is_set_aside_and_the_destination_keeps_flowing(
    store: Arc<dyn FanoutStore>,
) {
    let (receiver, url) = start_receiver().await;
    let mut config = PublisherConfig::new(&url, HOP2_SECRET);
    config.timeout = Duration::from_secs(10);
    let publisher: Arc<dyn Publisher> = Arc::new(HttpPublisher::new(config).unwrap());
    let messages = stream();
    append_all(store.as_ref(), &messages).await;

    let (stop, shutdown) = watch::channel(false);
    let fanout = FanoutLoop::open(store.clone(), publisher.clone(), small_look_ahead())
        .await
        .unwrap();
    let running = tokio::spawn(fanout.run(RunMode::Daemon, shutdown));

    let everyone = (HEALTHY * HEALTHY_SEQUENCES) as usize;
    let delivered = wait_for("every healthy account", || {
        receiver.healthy().values().map(Vec::len).sum::<usize>() == everyone
    })
    .await;
    let healthy = receiver.healthy();
    assert!(
        delivered,
        "after {DEADLINE:?} only {} of {everyone} healthy messages arrived ({} accounts \
         reached): the destination stalled behind {POISONED}",
        healthy.values().map(Vec::len).sum::<usize>(),
        healthy.len()
    );
    for (account, sequences) in &healthy {
        assert_eq!(
            sequences,
            &(1..=HEALTHY_SEQUENCES).collect::<Vec<_>>(),
            "{account}"
        );
    }
    assert_eq!(
        receiver.accepted_of(POISONED),
        vec![1],
        "nothing past the refusal"
    );

    // The poisoned account is dead-lettered in order: the refusal, then what followed.
    let poisoned = Account::parse(POISONED).unwrap();
    let mut expected = vec![(POISONED.to_owned(), 2, DeadLetterReason::Refused)];
    expected.extend(
        (3..=HEALTHY_SEQUENCES + 3).map(|s| (POISONED.to_owned(), s, DeadLetterReason::SetAside)),
    );
    let letters = dead_letters(store.as_ref(), publisher.name(), expected.len()).await;
    let recorded: Vec<(String, u64, DeadLetterReason)> = letters
        .iter()
        .map(|l| (l.account.as_str().to_owned(), l.sequence, l.reason))
        .collect();
    assert_eq!(recorded, expected);
    assert!(
        letters[0].error.contains("422"),
        "the refusal keeps the destination's answer: {}",
        letters[0].error
    );

    // The consumer is fixed; a replay request reaches the running loop, which
    // re-publishes the account in sequence order, then what arrives after.
    receiver.fixed.store(true, Ordering::SeqCst);
    let request = store
        .request_replay(publisher.name(), &poisoned)
        .await
        .unwrap();
    assert_eq!(request.refusal_id, letters[0].id);
    let later = committed(POISONED, HEALTHY_SEQUENCES + 4, 1_000_000);
    store.append("wh-later", &[later]).await.unwrap();
    let everything: Vec<u64> = (1..=HEALTHY_SEQUENCES + 4).collect();
    let replayed = wait_for("the replay", || {
        receiver.accepted_of(POISONED) == everything
    })
    .await;
    assert!(
        replayed,
        "after the replay request {POISONED} received {:?}",
        receiver.accepted_of(POISONED)
    );
    assert_eq!(
        receiver.healthy().values().map(Vec::len).sum::<usize>(),
        everyone,
        "a replay re-sends nothing of other accounts"
    );

    stop.send(true).unwrap();
    let summary = tokio::time::timeout(DEADLINE, running)
        .await
        .expect("the loop stops")
        .unwrap()
        .expect("the loop ends cleanly");
    assert_eq!(summary.permanent_failures, 1);
    // 2..=5 re-published; the later message too when it arrived during the replay
    // (set aside behind it rather than sent ahead of it).
    assert!(
        (HEALTHY_SEQUENCES + 2..=HEALTHY_SEQUENCES + 3).contains(&summary.replayed),
        "{summary:?}"
    );
    assert!(summary.blocked.is_empty(), "{:?}", summary.blocked);
    let accounts = store.dead_letter_accounts(publisher.name()).await.unwrap();
    assert_eq!(accounts.len(), 1);
    assert_eq!(accounts[0].state(), DeadLetterState::Replayed);
    let last = store
        .read_after(0, 100_000)
        .await
        .unwrap()
        .last()
        .unwrap()
        .position;
    assert_eq!(store.load_cursor(publisher.name()).await.unwrap(), last);
}

/// The destination's dead letters once there are `count` of them (bounded wait).
async fn dead_letters(store: &dyn FanoutStore, destination: &str, count: usize) -> Vec<DeadLetter> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let letters = store
            .read_dead_letters(&DeadLetterQuery {
                destination: Some(destination),
                ..DeadLetterQuery::default()
            })
            .await
            .unwrap();
        if letters.len() >= count || Instant::now() > deadline {
            return letters;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_refused_message_does_not_stall_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteFanoutStore::open(SqliteConfig::new(dir.path().join("fanout.db")))
        .await
        .unwrap();
    a_refused_message_is_set_aside_and_the_destination_keeps_flowing(Arc::new(store)).await;
}

// --- PostgreSQL ---------------------------------------------------------------------

fn pg_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// This test's schema, dropped when the test ends, failed or not.
struct PgSchema(String);

impl Drop for PgSchema {
    fn drop(&mut self) {
        let schema = self.0.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime
                .block_on(async {
                    let mut conn = PgConnection::connect(&pg_url()).await?;
                    sqlx::raw_sql(AssertSqlSafe(format!(
                        "SET lock_timeout = '3s'; DROP SCHEMA IF EXISTS {schema} CASCADE"
                    )))
                    .execute(&mut conn)
                    .await?;
                    conn.close().await
                })
                .ok()
        })
        .join();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_refused_message_does_not_stall_the_destination() {
    let schema = PgSchema(format!(
        "outbox_pg_t_dead_{}",
        uuid::Uuid::now_v7().simple()
    ));
    let config = PgConfig::new(pg_url()).with_schema(&schema.0);
    let store = match PgFanoutStore::open(config).await {
        Ok(store) => store,
        Err(e) if std::env::var_os("OUTBOX_TEST_REQUIRE").is_none() => {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no PostgreSQL at {} ({e})",
                pg_url()
            );
            return;
        }
        Err(e) => panic!("PostgreSQL is required (OUTBOX_TEST_REQUIRE=1): {e}"),
    };
    a_refused_message_is_set_aside_and_the_destination_keeps_flowing(Arc::new(store)).await;
}
