//! The CDC relay against a real PostgreSQL with `wal_level = logical`.
//!
//! Each test has its own schema (migrated with the crate's migrations), publication and
//! slot, and drops them at the end, slot included: a slot left behind retains WAL.
//! `OUTBOX_TEST_POSTGRES_URL` names the server (default
//! `postgres://postgres@127.0.0.1:5432/test`); when it is unreachable the tests say so
//! and pass, unless `OUTBOX_TEST_REQUIRE` is set, in which case they fail.

mod common;

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use outbox_core::{ErrorKind, EventId, OutboxEvent, PollingRelay, Position, Relay, Store};
use outbox_store_postgres::cdc::{BETWEEN_COMMITS, CdcConfig, CdcRelay, parse_lsn};
use outbox_store_postgres::{PgPosition, PgStore, enqueue};
use outbox_testkit::fixtures::payout;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool, Postgres};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use common::server_url;

/// Set in the child process of the SIGKILL test: the relay configuration as JSON.
const CHILD_ENV: &str = "OUTBOX_CDC_CHILD";

/// One test's schema, publication and slots; dropped (slots first) when it goes.
struct Db {
    url: String,
    schema: String,
    slot: String,
    publication: String,
    /// Every slot name the test may have created.
    slots: Vec<String>,
    /// A pool whose search_path is the test's schema.
    pool: PgPool,
    admin: PgPool,
}

impl Db {
    async fn new(tag: &str) -> Option<Self> {
        let url = server_url();
        let admin = match PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&url)
            .await
        {
            Ok(pool) => pool,
            Err(e) => {
                if std::env::var_os("OUTBOX_TEST_REQUIRE").is_some_and(|v| !v.is_empty()) {
                    panic!(
                        "PostgreSQL at {url} is required (OUTBOX_TEST_REQUIRE) but unreachable: {e}"
                    );
                }
                eprintln!(
                    "SKIPPED: PostgreSQL at {url} is unreachable ({e}); set OUTBOX_TEST_REQUIRE=1 to fail instead"
                );
                return None;
            }
        };
        let suffix = &EventId::new().as_uuid().simple().to_string()[20..];
        let name = format!("cdc_{tag}_{suffix}");
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .await
            .unwrap();
        let options = PgConnectOptions::from_str(&url)
            .unwrap()
            .options([("search_path", name.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::migrate!("./migrations").run(&pool).await.unwrap();
        Some(Self {
            url,
            schema: name.clone(),
            slot: name.clone(),
            publication: name.clone(),
            slots: vec![name],
            pool,
            admin,
        })
    }

    fn config(&self, relay: &str) -> CdcConfig {
        let mut config = CdcConfig::new(&self.url);
        config.slot = self.slot.clone();
        config.publication = self.publication.clone();
        config.relay = relay.to_owned();
        config.schema = self.schema.clone();
        config.status_interval_ms = 100;
        config
    }

    async fn insert<'e, E: Executor<'e, Database = Postgres>>(
        executor: E,
        account: &str,
        sequence: i64,
    ) -> EventId {
        let id = EventId::new();
        sqlx::query(
            "INSERT INTO outbox_events (event_id, account, sequence, payload) VALUES ($1, $2, $3, $4)",
        )
        .bind(id.as_uuid())
        .bind(account)
        .bind(sequence)
        .bind(payload(id))
        .execute(executor)
        .await
        .unwrap();
        id
    }

    /// Enqueues one payout of `merchant` in its own transaction, as an application does.
    async fn enqueue(&self, merchant: &str) -> OutboxEvent {
        let mut tx = self.pool.begin().await.unwrap();
        let event = enqueue(&mut tx, &payout(merchant, 100)).await.unwrap();
        tx.commit().await.unwrap();
        event
    }

    /// Enqueues `n` payouts, spread over `merchants`, each in its own transaction.
    async fn enqueue_many(&self, n: usize, merchants: &[&str]) -> Vec<OutboxEvent> {
        let mut events = Vec::with_capacity(n);
        for i in 0..n {
            events.push(self.enqueue(merchants[i % merchants.len()]).await);
        }
        events
    }

    /// Creates the publication the relay would create, as a DBA does for
    /// `create_missing = false`.
    async fn create_publication(&self) {
        self.admin
            .execute(sqlx::AssertSqlSafe(format!(
                "CREATE PUBLICATION {} FOR TABLE {}.outbox_events \
                 WITH (publish = 'insert', publish_via_partition_root = true)",
                self.publication, self.schema
            )))
            .await
            .unwrap();
    }

    /// The relay's saved cursor, read from the table.
    async fn cursor(&self, relay: &str) -> Option<Position> {
        let row: Option<(i64, Option<String>)> =
            sqlx::query_as("SELECT position, lsn::text FROM relay_cursors WHERE relay = $1")
                .bind(relay)
                .fetch_optional(&self.pool)
                .await
                .unwrap();
        row.map(|(row, lsn)| {
            PgPosition::Log {
                lsn: parse_lsn(&lsn.expect("a CDC cursor has an lsn")).unwrap(),
                row,
            }
            .encode()
        })
    }

    /// `(plugin, confirmed_flush_lsn)` of a slot.
    async fn slot(&self, name: &str) -> Option<(String, u64)> {
        let row: Option<(String, Option<String>)> = sqlx::query_as(
            "SELECT plugin, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(name)
        .fetch_optional(&self.admin)
        .await
        .unwrap();
        row.map(|(plugin, lsn)| (plugin, lsn.map_or(0, |l| parse_lsn(&l).unwrap())))
    }

    /// Waits until no session holds the slot (a stopped walsender exits a moment later).
    async fn slot_released(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let active: Option<bool> =
                sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
                    .bind(name)
                    .fetch_optional(&self.admin)
                    .await
                    .unwrap();
            if active != Some(true) {
                return;
            }
            assert!(Instant::now() < deadline, "slot {name} still active");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let (url, schema, slots, publication) = (
            self.url.clone(),
            self.schema.clone(),
            self.slots.clone(),
            self.publication.clone(),
        );
        // A runtime of its own: the test's runtime may be shutting down.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
                for slot in &slots {
                    for _ in 0..100 {
                        let _ = sqlx::query(
                            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
                             WHERE slot_name = $1 AND active_pid IS NOT NULL",
                        )
                        .bind(slot)
                        .execute(&pool)
                        .await;
                        let dropped = sqlx::query(
                            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                        )
                        .bind(slot)
                        .execute(&pool)
                        .await;
                        if dropped.is_ok() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                let _ = pool
                    .execute(sqlx::AssertSqlSafe(format!("DROP PUBLICATION IF EXISTS {publication}")))
                    .await;
                let _ = pool
                    .execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
                    .await;
            });
        });
        let _ = cleanup.join();
    }
}

fn payload(id: EventId) -> Vec<u8> {
    format!(r#"{{"post":{{"postings":[],"metadata":{{"outbox_event_id":"{id}"}}}}}}"#).into_bytes()
}

fn log(position: Position) -> (u64, i64) {
    match PgPosition::decode(&position) {
        Ok(PgPosition::Log { lsn, row }) => (lsn, row),
        _ => panic!("not a log position: {position}"),
    }
}

/// The part of a child's output line after its `@@ ` marker.
fn marked(line: &str) -> Option<&str> {
    line.find("@@ ").map(|at| &line[at + 3..])
}

fn ids(events: &[OutboxEvent]) -> Vec<EventId> {
    events.iter().map(|e| e.event_id).collect()
}

/// Reads until `n` events arrived or `timeout` passed.
async fn collect(
    relay: &mut CdcRelay,
    n: usize,
    batch: usize,
    timeout: Duration,
) -> Vec<OutboxEvent> {
    let deadline = Instant::now() + timeout;
    let mut events = Vec::new();
    while events.len() < n && Instant::now() < deadline {
        let got = relay.next_batch(batch).await.expect("next_batch");
        assert!(got.len() <= batch);
        if got.is_empty() {
            relay.wait(Duration::from_millis(200)).await;
        }
        events.extend(got);
    }
    events
}

/// Asserts that nothing more arrives for `time`.
async fn assert_quiet(relay: &mut CdcRelay, time: Duration) {
    let more = collect(relay, 1, 100, time).await;
    assert!(more.is_empty(), "unexpected events: {:?}", ids(&more));
}

/// Each account's events in sequence order, none missing from `first` on.
fn assert_per_account_order(events: &[OutboxEvent], first: &HashMap<String, u64>) {
    let mut next: HashMap<String, u64> = first.clone();
    for event in events {
        let expected = next.entry(event.account.to_string()).or_insert(1);
        assert_eq!(
            event.sequence,
            *expected,
            "{} out of sequence order in {:?}",
            event.account,
            events
                .iter()
                .map(|e| (e.account.to_string(), e.sequence))
                .collect::<Vec<_>>()
        );
        *expected += 1;
    }
}

fn is_snapshot(position: Position) -> bool {
    matches!(
        PgPosition::decode(&position),
        Ok(PgPosition::Snapshot { .. })
    )
}

fn assert_increasing(events: &[OutboxEvent]) {
    for pair in events.windows(2) {
        assert!(
            pair[0].position < pair[1].position,
            "{:?} then {:?}",
            pair[0].position,
            pair[1].position
        );
    }
}

#[tokio::test]
async fn commit_order_across_concurrent_transactions_and_no_rolled_back_rows() {
    let Some(db) = Db::new("order").await else {
        return;
    };
    let mut relay = CdcRelay::open(db.config("cdc-order")).await.unwrap();
    let (plugin, _) = db
        .slot(&db.slot)
        .await
        .expect("the slot is created on start");
    assert_eq!(plugin, "pgoutput");

    // tx1 inserts first but commits last; tx2 commits in between; tx3 rolls back.
    let mut tx1 = db.pool.begin().await.unwrap();
    let a = Db::insert(&mut *tx1, "merchants:1", 1).await;
    let mut tx2 = db.pool.begin().await.unwrap();
    let b = Db::insert(&mut *tx2, "merchants:2", 1).await;
    let c = Db::insert(&mut *tx2, "merchants:2", 2).await;
    let mut tx3 = db.pool.begin().await.unwrap();
    let rolled_back = Db::insert(&mut *tx3, "merchants:3", 1).await;
    tx2.commit().await.unwrap();
    tx3.rollback().await.unwrap();
    let d = Db::insert(&mut *tx1, "merchants:1", 2).await;
    tx1.commit().await.unwrap();
    let e = Db::insert(&db.pool, "merchants:4", 1).await;

    let events = collect(&mut relay, 5, 2, Duration::from_secs(20)).await;
    assert_eq!(
        ids(&events),
        vec![b, c, a, d, e],
        "commit order, insert order inside one"
    );
    assert!(!ids(&events).contains(&rolled_back));
    assert_increasing(&events);
    let (lsn_b, row_b) = log(events[0].position);
    let (lsn_c, _) = log(events[1].position);
    let (lsn_a, row_a) = log(events[2].position);
    let (lsn_d, _) = log(events[3].position);
    let (lsn_e, _) = log(events[4].position);
    assert_eq!(lsn_b, lsn_c, "one transaction, one commit LSN");
    assert_eq!(lsn_a, lsn_d);
    assert!(lsn_b < lsn_a && lsn_a < lsn_e);
    assert!(
        row_a < row_b,
        "a's row was drawn first, yet it comes after b: commit order wins"
    );
    // The decoded row is the stored row.
    assert_eq!(events[2].account.as_str(), "merchants:1");
    assert_eq!(events[3].sequence, 2);
    assert_eq!(events[2].payload.as_bytes(), payload(a).as_slice());
    let stored: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT created_at FROM outbox_events WHERE event_id = $1")
            .bind(a.as_uuid())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(events[2].created_at, stored);

    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

/// The CDC relay's `acknowledge` has no rule of its own: as for every relay, a
/// position at or behind the saved cursor (moved further by another writer of the
/// name) succeeds and leaves the cursor where it is, and the slot is confirmed no
/// further than that cursor.
#[tokio::test]
async fn acknowledge_behind_the_saved_cursor_changes_nothing_as_for_every_relay() {
    let Some(db) = Db::new("behind").await else {
        return;
    };
    let mut relay = CdcRelay::open(db.config("cdc-behind")).await.unwrap();
    let mut committed = Vec::new();
    for account in ["merchants:30", "merchants:31", "merchants:32"] {
        committed.push(Db::insert(&db.pool, account, 1).await);
    }
    let events = collect(&mut relay, 3, 10, Duration::from_secs(20)).await;
    assert_eq!(ids(&events), committed);

    let store = PgStore::from_pool(db.pool.clone());
    store
        .save_cursor("cdc-behind", events[2].position)
        .await
        .unwrap();
    relay
        .acknowledge(events[0].position)
        .await
        .expect("acknowledging behind the saved cursor succeeds");
    assert_eq!(db.cursor("cdc-behind").await, Some(events[2].position));
    relay.shutdown().await.unwrap();
    db.slot_released(&db.slot).await;
    let (_, confirmed) = db.slot(&db.slot).await.unwrap();
    assert!(
        confirmed <= log(events[2].position).0,
        "the slot never passes the durable cursor"
    );
}

#[tokio::test]
async fn acknowledge_then_restart_resumes_right_after_the_acknowledged_position() {
    let Some(db) = Db::new("restart").await else {
        return;
    };
    let config = db.config("cdc-restart");
    let mut relay = CdcRelay::open(config.clone()).await.unwrap();
    let mut committed = Vec::new();
    for (tx_size, account) in [
        (4, "merchants:10"),
        (3, "merchants:11"),
        (3, "merchants:12"),
    ] {
        let mut tx = db.pool.begin().await.unwrap();
        for sequence in 1..=tx_size {
            committed.push(Db::insert(&mut *tx, account, sequence).await);
        }
        tx.commit().await.unwrap();
    }
    let events = collect(&mut relay, 10, 3, Duration::from_secs(20)).await;
    assert_eq!(ids(&events), committed);

    // Acknowledge in the middle of the second transaction.
    let through = events[5].position;
    assert_eq!(log(events[4].position).0, log(through).0);
    let err = relay
        .acknowledge(
            PgPosition::Log {
                lsn: u64::MAX,
                row: 1,
            }
            .encode(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InvalidInput { .. }),
        "{err}"
    );
    relay.acknowledge(through).await.unwrap();
    assert_eq!(relay.acknowledged(), Some(through));
    assert_eq!(db.cursor("cdc-restart").await, Some(through));
    relay.shutdown().await.unwrap();
    db.slot_released(&db.slot).await;
    let (_, confirmed) = db.slot(&db.slot).await.unwrap();
    assert!(
        confirmed <= log(through).0,
        "the slot never passes the durable cursor"
    );

    let mut later = Vec::new();
    let mut tx = db.pool.begin().await.unwrap();
    for sequence in 1..=2 {
        later.push(Db::insert(&mut *tx, "merchants:13", sequence).await);
    }
    tx.commit().await.unwrap();

    // A new relay: exactly the events after `through`, each once, in order.
    let mut relay = CdcRelay::open(config).await.unwrap();
    assert_eq!(relay.acknowledged(), Some(through));
    let resumed = collect(&mut relay, 6, 4, Duration::from_secs(20)).await;
    let mut expected = ids(&events[6..]);
    expected.extend(later);
    assert_eq!(ids(&resumed), expected);
    assert!(resumed.iter().all(|e| e.position > through));
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

/// The child half of `sigkill_mid_stream_then_restart_loses_nothing`: runs only when
/// re-invoked with `OUTBOX_CDC_CHILD`, and passes at once otherwise.
#[tokio::test]
async fn cdc_child_process() {
    let Ok(config) = std::env::var(CHILD_ENV) else {
        return;
    };
    let config: CdcConfig = serde_json::from_str(&config).expect("child config");
    let mut relay = CdcRelay::open(config).await.expect("child: open");
    println!("@@ READY");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let batch = match relay.next_batch(4).await {
            Ok(batch) => batch,
            Err(e) => {
                eprintln!("child: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(last) = batch.last().map(|e| e.position) else {
            relay.wait(Duration::from_millis(100)).await;
            continue;
        };
        for event in &batch {
            let (lsn, row) = log(event.position);
            println!("@@ GOT {} {lsn} {row}", event.event_id);
        }
        // "Posting to the ledger" takes a moment, so the kill lands mid-stream.
        tokio::time::sleep(Duration::from_millis(15)).await;
        relay.acknowledge(last).await.expect("child: acknowledge");
        let (lsn, row) = log(last);
        println!("@@ ACK {lsn} {row}");
    }
}

#[tokio::test]
async fn sigkill_mid_stream_then_restart_loses_nothing() {
    let Some(db) = Db::new("kill").await else {
        return;
    };
    let config = db.config("cdc-kill");
    let child_config = serde_json::json!({
        "url": config.url,
        "slot": config.slot,
        "publication": config.publication,
        "relay": config.relay,
        "schema": config.schema,
        "status_interval_ms": 50,
    });
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "cdc_child_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, child_config.to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // The harness prints "test cdc_child_process ... " before the first line.
            if marked(&line) == Some("READY") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "the child relay did not start");

    // Enqueue 150 events in transactions of 1 to 3, while the child consumes.
    let pool = db.pool.clone();
    let producer = tokio::spawn(async move {
        let mut committed = Vec::new();
        for i in 0..60i64 {
            let account = format!("merchants:{}", i % 7);
            let size = 1 + i % 3;
            let mut tx = pool.begin().await.unwrap();
            for _ in 0..size {
                let sequence = i64::try_from(committed.len()).unwrap() + 1;
                committed.push(Db::insert(&mut *tx, &account, sequence).await);
            }
            tx.commit().await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        committed
    });

    // Kill the child once it acknowledged 40 events, mid-stream.
    let mut got: HashMap<EventId, Position> = HashMap::new();
    let mut acked = 0usize;
    let mut killed = false;
    let reading = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let Some(marked) = marked(&line) else {
                continue;
            };
            let parts: Vec<&str> = marked.split_whitespace().collect();
            match parts.as_slice() {
                ["GOT", id, lsn, row] => {
                    let position = PgPosition::Log {
                        lsn: lsn.parse().unwrap(),
                        row: row.parse().unwrap(),
                    }
                    .encode();
                    got.insert(EventId::parse(id).unwrap(), position);
                }
                ["ACK", ..] => {
                    acked = got.len();
                    if acked >= 40 && !killed {
                        child.start_kill().unwrap(); // SIGKILL
                        killed = true;
                    }
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(reading.is_ok(), "the child's output did not end");
    assert!(killed, "the child acknowledged only {acked} events");
    let status = child.wait().await.unwrap();
    assert!(!status.success(), "the child was killed: {status:?}");
    let committed = producer.await.unwrap();
    assert!(
        got.len() < committed.len(),
        "the kill did not land mid-stream"
    );

    // The durable cursor is the truth; the slot never passed it.
    let cursor = db.cursor("cdc-kill").await.expect("a saved cursor");
    db.slot_released(&db.slot).await;
    let (_, confirmed) = db.slot(&db.slot).await.unwrap();
    assert!(
        confirmed <= log(cursor).0,
        "slot confirmed past the durable cursor"
    );
    let done: HashSet<EventId> = got
        .iter()
        .filter(|(_, position)| **position <= cursor)
        .map(|(id, _)| *id)
        .collect();
    assert!(done.len() >= 40);

    let mut relay = CdcRelay::open(config).await.unwrap();
    assert_eq!(relay.acknowledged(), Some(cursor));
    let expected: Vec<EventId> = committed
        .iter()
        .filter(|id| !done.contains(id))
        .copied()
        .collect();
    let resumed = collect(&mut relay, expected.len(), 16, Duration::from_secs(30)).await;
    assert!(
        resumed.iter().all(|e| e.position > cursor),
        "nothing at or before the cursor again"
    );
    assert_increasing(&resumed);
    // Every committed event: acknowledged before the kill, or delivered now — once.
    assert_eq!(ids(&resumed), expected);
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_slot_with_the_wrong_plugin_is_refused_by_name() {
    let Some(mut db) = Db::new("plugin").await else {
        return;
    };
    let wrong = format!("{}_td", db.slot);
    db.slots.push(wrong.clone());
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'test_decoding')")
        .bind(&wrong)
        .execute(&db.admin)
        .await
        .unwrap();
    let mut config = db.config("cdc-plugin");
    config.slot = wrong.clone();
    let err = CdcRelay::open(config).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
    assert_eq!(err.context("slot"), Some(wrong.as_str()));
    assert!(err.message().contains(&wrong), "{err}");
    assert!(err.message().contains("\"test_decoding\""), "{err}");
    assert!(err.message().contains("pgoutput"), "{err}");
    assert_eq!(
        db.slot(&wrong).await.unwrap().0,
        "test_decoding",
        "left untouched"
    );

    // The relay's own slot name is created with pgoutput, with its publication.
    assert!(db.slot(&db.slot).await.is_none());
    let relay = CdcRelay::open(db.config("cdc-plugin")).await.unwrap();
    assert_eq!(db.slot(&db.slot).await.unwrap().0, "pgoutput");
    let via_root: bool =
        sqlx::query_scalar("SELECT pubviaroot FROM pg_publication WHERE pubname = $1")
            .bind(&db.publication)
            .fetch_one(&db.admin)
            .await
            .unwrap();
    assert!(via_root);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_slot_moved_past_the_cursor_or_recreated_is_refused_as_lost_events() {
    let Some(db) = Db::new("lost").await else {
        return;
    };
    let config = db.config("cdc-lost");
    let mut relay = CdcRelay::open(config.clone()).await.unwrap();
    Db::insert(&db.pool, "merchants:20", 1).await;
    let events = collect(&mut relay, 1, 10, Duration::from_secs(20)).await;
    relay.acknowledge(events[0].position).await.unwrap();
    relay.shutdown().await.unwrap();
    db.slot_released(&db.slot).await;

    // Someone advances the slot past the cursor: the event below would be skipped.
    Db::insert(&db.pool, "merchants:20", 2).await;
    sqlx::query("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())")
        .bind(&db.slot)
        .execute(&db.admin)
        .await
        .unwrap();
    let err = CdcRelay::open(config.clone()).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
    assert_eq!(err.context("slot"), Some(db.slot.as_str()));
    assert!(err.message().starts_with("events lost"), "{err}");

    // Someone drops the slot: it is not silently re-created.
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&db.slot)
        .execute(&db.admin)
        .await
        .unwrap();
    let err = CdcRelay::open(config).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
    assert_eq!(err.context("slot"), Some(db.slot.as_str()));
    assert!(err.message().contains("does not exist"), "{err}");
    assert!(db.slot(&db.slot).await.is_none(), "no new slot was created");
}

#[tokio::test]
async fn a_caught_up_relay_moves_its_slot_past_unrelated_wal() {
    let Some(db) = Db::new("idle").await else {
        return;
    };
    let mut config = db.config("cdc-idle");
    config.idle_confirm_interval_ms = 100;
    let mut relay = CdcRelay::open(config).await.unwrap();
    Db::insert(&db.pool, "merchants:30", 1).await;
    let events = collect(&mut relay, 1, 10, Duration::from_secs(20)).await;
    let through = events[0].position;
    relay.acknowledge(through).await.unwrap();

    // WAL that holds no outbox row.
    db.pool
        .execute(
            "CREATE TABLE unrelated (n int); INSERT INTO unrelated SELECT generate_series(1, 1000)",
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(relay.next_batch(10).await.unwrap().is_empty());
        relay.wait(Duration::from_millis(200)).await;
        let (_, confirmed) = db.slot(&db.slot).await.unwrap();
        if confirmed > log(through).0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot stayed at the last outbox commit"
        );
    }
    let idle = relay.acknowledged().unwrap();
    assert!(idle > through);
    assert_eq!(log(idle).1, BETWEEN_COMMITS);
    assert_eq!(db.cursor("cdc-idle").await, Some(idle));

    // The next outbox event still arrives.
    let next = Db::insert(&db.pool, "merchants:30", 2).await;
    let events = collect(&mut relay, 1, 10, Duration::from_secs(20)).await;
    assert_eq!(ids(&events), vec![next]);
    assert!(events[0].position > idle);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn wait_returns_when_an_event_arrives_and_otherwise_after_the_interval() {
    let Some(db) = Db::new("wait").await else {
        return;
    };
    let mut relay = CdcRelay::open(db.config("cdc-wait")).await.unwrap();

    // Nothing committed: wait takes its whole interval (keepalives do not end it).
    let started = Instant::now();
    relay.wait(Duration::from_millis(400)).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(relay.next_batch(10).await.unwrap().is_empty());

    // A commit during a long wait ends it early.
    let pool = db.pool.clone();
    let insert = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Db::insert(&pool, "merchants:40", 1).await
    });
    let started = Instant::now();
    relay.wait(Duration::from_secs(30)).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "wait did not return on new data"
    );
    let id = insert.await.unwrap();
    assert_eq!(ids(&relay.next_batch(10).await.unwrap()), vec![id]);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_lost_replication_session_is_resumed_without_repeats_or_gaps() {
    let Some(db) = Db::new("reconnect").await else {
        return;
    };
    let mut relay = CdcRelay::open(db.config("cdc-reconnect")).await.unwrap();
    let mut committed = Vec::new();
    for account in ["merchants:50", "merchants:51"] {
        let mut tx = db.pool.begin().await.unwrap();
        for sequence in 1..=3 {
            committed.push(Db::insert(&mut *tx, account, sequence).await);
        }
        tx.commit().await.unwrap();
    }
    // Half of it read, nothing acknowledged; then the walsender is killed.
    let mut events = collect(&mut relay, 2, 2, Duration::from_secs(20)).await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&db.slot)
    .fetch_all(&db.admin)
    .await
    .unwrap();
    assert_eq!(killed, vec![true]);
    for sequence in 1..=2 {
        committed.push(Db::insert(&db.pool, "merchants:52", sequence).await);
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failures = 0;
    while events.len() < committed.len() && Instant::now() < deadline {
        match relay.next_batch(3).await {
            Ok(batch) if batch.is_empty() => relay.wait(Duration::from_millis(200)).await,
            Ok(batch) => events.extend(batch),
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(failures >= 1, "the lost session was reported");
    assert_eq!(ids(&events), committed, "every event once, in commit order");
    assert_increasing(&events);
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_slot_dropped_while_the_session_was_down_is_not_silently_replaced() {
    let Some(db) = Db::new("dropped").await else {
        return;
    };
    let mut relay = CdcRelay::open(db.config("cdc-dropped")).await.unwrap();
    Db::insert(&db.pool, "merchants:60", 1).await;
    let events = collect(&mut relay, 1, 10, Duration::from_secs(20)).await;
    relay.acknowledge(events[0].position).await.unwrap();

    sqlx::query(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(&db.slot)
    .execute(&db.admin)
    .await
    .unwrap();
    db.slot_released(&db.slot).await;
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&db.slot)
        .execute(&db.admin)
        .await
        .unwrap();
    Db::insert(&db.pool, "merchants:60", 2).await;

    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        assert!(Instant::now() < deadline, "the dropped slot went unnoticed");
        match relay.next_batch(10).await {
            Ok(batch) => {
                assert!(batch.is_empty(), "no event without a slot");
                relay.wait(Duration::from_millis(100)).await;
            }
            Err(e) if e.is_transient() => {}
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
    assert!(err.message().starts_with("events lost"), "{err}");
    assert_eq!(err.context("slot"), Some(db.slot.as_str()));
    assert!(db.slot(&db.slot).await.is_none(), "no new slot was created");
}

// ---- Catch-up: rows committed before the slot existed ----

#[tokio::test]
async fn rows_enqueued_before_the_first_start_are_all_delivered_in_per_account_order() {
    let Some(db) = Db::new("before").await else {
        return;
    };
    let mut before = db.enqueue_many(30, &["80", "81", "82"]).await;
    // T1 takes its xid first (its payout intent), then queues behind T2 on the
    // account's counter: its row's txid is raised to T2's, so it still sorts after.
    let mut t1 = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *t1)
        .await
        .unwrap();
    let mut t2 = db.pool.begin().await.unwrap();
    let first = enqueue(&mut t2, &payout("83", 1)).await.unwrap();
    t2.commit().await.unwrap();
    let second = enqueue(&mut t1, &payout("83", 2)).await.unwrap();
    t1.commit().await.unwrap();
    assert_eq!((first.sequence, second.sequence), (1, 2));
    before.extend([first, second]);

    let config = db.config("cdc-before");
    let mut relay = CdcRelay::open(config.clone()).await.unwrap();
    let mut after = Vec::new();
    for merchant in ["80", "83", "84"] {
        after.push(db.enqueue(merchant).await);
    }

    let events = collect(&mut relay, 35, 7, Duration::from_secs(30)).await;
    let delivered: HashSet<EventId> = ids(&events).into_iter().collect();
    let missing: Vec<EventId> = ids(&before)
        .into_iter()
        .chain(ids(&after))
        .filter(|id| !delivered.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of the {} events were never delivered: {missing:?}",
        missing.len(),
        before.len() + after.len()
    );
    assert_eq!(events.len(), 35, "each event once");
    assert_per_account_order(&events, &HashMap::new());
    assert_increasing(&events);
    // The catch-up (snapshot positions) first, then the stream (log positions).
    assert!(events[..32].iter().all(|e| is_snapshot(e.position)));
    assert!(events[32..].iter().all(|e| !is_snapshot(e.position)));
    assert_eq!(ids(&events[32..]), ids(&after));
    assert_quiet(&mut relay, Duration::from_millis(800)).await;

    let last = events[34].position;
    relay.acknowledge(last).await.unwrap();
    relay.shutdown().await.unwrap();
    db.slot_released(&db.slot).await;
    let mut relay = CdcRelay::open(config).await.unwrap();
    assert_eq!(relay.acknowledged(), Some(last));
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

/// A backlog committed in one transaction before the first start (a payout batch,
/// then the switch to CDC) is caught up a batch at a time: each read looks at about
/// the rows it returns, never sorts every row after its cursor (the crate README, "A
/// read costs its batch, not the backlog"). Counted by the server, never timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catch_up_of_a_backlog_committed_in_one_transaction_reads_a_batch_at_a_time() {
    const BACKLOG: usize = 3_000;
    const LIMIT: usize = 100;
    let Some(db) = Db::new("catchupcost").await else {
        return;
    };
    let mut tx = db.pool.begin().await.unwrap();
    for n in 0..BACKLOG {
        enqueue(&mut tx, &payout(&format!("{}", n % 100), 1_000 + n as u64))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // What autovacuum does soon after a large load.
    db.pool.execute("ANALYZE outbox_events").await.unwrap();
    // One connection for the relay's queries and the test's, so the counters the
    // test reads were flushed by the backend that read.
    let options = PgConnectOptions::from_str(&db.url)
        .unwrap()
        .options([("search_path", db.schema.as_str())]);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let mut relay = CdcRelay::open_with_pool(db.config("cdc-cost"), pool.clone())
        .await
        .unwrap();

    let first = relay.next_batch(LIMIT).await.unwrap();
    assert_eq!(first.len(), LIMIT);
    assert!(
        first.iter().all(|e| is_snapshot(e.position)),
        "caught up, not streamed"
    );
    let mut seen = first.len();
    let mut last = first[LIMIT - 1].position;
    for round in 0..3 {
        common::flush(&pool).await;
        let before = common::rows_looked_at(&pool).await;
        let batch = relay.next_batch(LIMIT).await.unwrap();
        assert_eq!(batch.len(), LIMIT, "round {round}");
        assert!(
            batch[0].position > last,
            "round {round}: the batch starts at or before the cursor"
        );
        assert_increasing(&batch);
        seen += batch.len();
        last = batch[LIMIT - 1].position;
        let looked_at = common::counted_since(&pool, before, LIMIT as i64).await;
        let remaining = BACKLOG - seen + LIMIT;
        assert!(
            looked_at <= 2 * LIMIT as i64,
            "round {round}: catching up {LIMIT} rows looked at {looked_at} (the backlog after the cursor held {remaining})"
        );
    }
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_polling_cursor_is_taken_over_and_nothing_before_it_is_sent_again() {
    let Some(db) = Db::new("switch").await else {
        return;
    };
    let store = PgStore::from_pool(db.pool.clone());
    let before = db.enqueue_many(10, &["85", "86"]).await;
    let mut polling = PollingRelay::open(store.clone(), "switch", None)
        .await
        .unwrap();
    // The polling reader waits out any transaction open on the server (its horizon).
    let mut polled = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while polled.len() < 4 {
        let batch = polling.next_batch(4 - polled.len()).await.unwrap();
        if batch.is_empty() {
            assert!(Instant::now() < deadline, "the polling relay read nothing");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        polled.extend(batch);
    }
    assert_eq!(ids(&polled), ids(&before[..4]));
    let polling_cursor = polled[3].position;
    polling.acknowledge(polling_cursor).await.unwrap();
    drop(polling);
    let between = db.enqueue_many(5, &["85", "86", "87"]).await;

    // The CDC relay takes over the polling relay's name and cursor.
    let mut relay = CdcRelay::open(db.config("switch")).await.unwrap();
    assert_eq!(relay.acknowledged(), Some(polling_cursor));
    let after = db.enqueue_many(3, &["85", "87"]).await;

    let events = collect(&mut relay, 14, 5, Duration::from_secs(30)).await;
    let mut expected = ids(&before[4..]);
    expected.extend(ids(&between));
    expected.extend(ids(&after));
    assert_eq!(
        ids(&events),
        expected,
        "exactly the events after the polling cursor, in order"
    );
    let first: HashMap<String, u64> = polled
        .iter()
        .map(|e| (e.account.to_string(), e.sequence + 1))
        .collect();
    assert_per_account_order(&events, &first);
    assert_increasing(&events);
    assert_quiet(&mut relay, Duration::from_millis(800)).await;

    // While catching up the relay keeps a polling-style cursor; once it streams, an LSN.
    let caught_up = events[10].position;
    assert!(is_snapshot(caught_up));
    relay.acknowledge(caught_up).await.unwrap();
    assert_eq!(store.load_cursor("switch").await.unwrap(), Some(caught_up));
    let streamed = events[13].position;
    assert!(!is_snapshot(streamed));
    relay.acknowledge(streamed).await.unwrap();
    assert_eq!(db.cursor("switch").await, Some(streamed));
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn rows_of_a_transaction_open_across_the_slot_creation_are_delivered_once() {
    let Some(db) = Db::new("across").await else {
        return;
    };
    let earlier = db.enqueue("88").await;
    let mut open_tx = db.pool.begin().await.unwrap();
    let held = enqueue(&mut open_tx, &payout("88", 1)).await.unwrap();
    let xid: String = sqlx::query_scalar("SELECT xid(pg_current_xact_id())::text")
        .fetch_one(&mut *open_tx)
        .await
        .unwrap();

    // Creating the slot waits for every transaction holding an xid, this one too.
    let opening = tokio::spawn(CdcRelay::open(db.config("cdc-across")));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks \
             WHERE locktype = 'transactionid' AND transactionid::text = $1 AND NOT granted)",
        )
        .bind(&xid)
        .fetch_one(&db.admin)
        .await
        .unwrap();
        if waiting {
            break;
        }
        assert!(
            !opening.is_finished(),
            "the relay opened without waiting for the open transaction"
        );
        assert!(
            Instant::now() < deadline,
            "the slot creation never waited for the open transaction"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let meanwhile = db.enqueue("89").await;
    open_tx.commit().await.unwrap();
    let mut relay = tokio::time::timeout(Duration::from_secs(60), opening)
        .await
        .expect("the relay opened")
        .unwrap()
        .unwrap();
    let after = db.enqueue("88").await;

    let events = collect(&mut relay, 4, 10, Duration::from_secs(30)).await;
    let got: HashSet<EventId> = ids(&events).into_iter().collect();
    for (what, event) in [
        ("committed before", &earlier),
        ("open across the slot creation", &held),
        ("committed during the slot creation", &meanwhile),
        ("committed after", &after),
    ] {
        assert!(
            got.contains(&event.event_id),
            "the event {what} was not delivered"
        );
    }
    assert_eq!(events.len(), 4, "each once: {:?}", ids(&events));
    assert_per_account_order(&events, &HashMap::new());
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

/// A DBA made the slot (`create_missing = false`), or a first start died right after
/// making it: rows committed since are in the slot and below the catch-up's bound.
#[tokio::test]
async fn rows_in_a_slot_made_before_the_first_start_are_delivered_once() {
    let Some(db) = Db::new("premade").await else {
        return;
    };
    let before = db.enqueue_many(3, &["90", "91"]).await;
    db.create_publication().await;
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
        .bind(&db.slot)
        .execute(&db.admin)
        .await
        .unwrap();
    let in_slot = db.enqueue_many(4, &["90", "91"]).await;

    let mut config = db.config("cdc-premade");
    config.create_missing = false;
    let mut relay = CdcRelay::open(config).await.unwrap();
    let after = db.enqueue_many(2, &["91", "90"]).await;

    let events = collect(&mut relay, 9, 4, Duration::from_secs(30)).await;
    let mut expected = ids(&before);
    expected.extend(ids(&in_slot));
    expected.extend(ids(&after));
    assert_eq!(ids(&events), expected, "every event once, in order");
    assert_per_account_order(&events, &HashMap::new());
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restart_in_the_middle_of_the_catch_up_resumes_after_its_cursor() {
    let Some(db) = Db::new("resume").await else {
        return;
    };
    let before = db.enqueue_many(12, &["92", "93", "94"]).await;
    let config = db.config("cdc-resume");
    let mut relay = CdcRelay::open(config.clone()).await.unwrap();
    let first = collect(&mut relay, 5, 5, Duration::from_secs(30)).await;
    assert_eq!(ids(&first), ids(&before[..5]), "the catch-up's first batch");
    relay.acknowledge(first[4].position).await.unwrap();
    relay.shutdown().await.unwrap();
    db.slot_released(&db.slot).await;
    let during = db.enqueue_many(2, &["92", "95"]).await;

    let mut relay = CdcRelay::open(config).await.unwrap();
    assert_eq!(relay.acknowledged(), Some(first[4].position));
    let rest = collect(&mut relay, 9, 4, Duration::from_secs(30)).await;
    let mut expected = ids(&before[5..]);
    expected.extend(ids(&during));
    assert_eq!(ids(&rest), expected, "the rest once, in order");
    assert_quiet(&mut relay, Duration::from_millis(800)).await;
    relay.shutdown().await.unwrap();
}

/// Runs a CDC relay over rows from before and after its start, leaves CDC for polling
/// (`PgStore::leave_cdc`) and reads on with the polling relay of the same name.
/// `with_handover: false` stands for a CDC cursor saved before handovers existed.
async fn leave_cdc_then_poll(tag: &str, with_handover: bool) {
    let Some(db) = Db::new(tag).await else {
        return;
    };
    let store = PgStore::from_pool(db.pool.clone());
    let before = db.enqueue_many(4, &["90", "91"]).await;
    let mut relay = CdcRelay::open(db.config(tag)).await.unwrap();
    let after = db.enqueue_many(3, &["90", "92"]).await;
    let events = collect(&mut relay, 7, 10, Duration::from_secs(30)).await;
    assert_eq!(ids(&events), [ids(&before), ids(&after)].concat());
    let last = events[6].position;
    assert!(!is_snapshot(last));
    relay.acknowledge(last).await.unwrap();
    // As the dispatcher does: its read horizon, a log position too.
    let attempted = format!("{tag}@attempted");
    store.save_cursor(&attempted, last).await.unwrap();
    relay.shutdown().await.unwrap();
    db.slot_released(&db.slot).await;
    let handover = format!("{tag}@cdc-handover");
    if !with_handover {
        sqlx::query("DELETE FROM relay_cursors WHERE relay = $1")
            .bind(&handover)
            .execute(&db.pool)
            .await
            .unwrap();
    }

    // The polling relay refuses the LSN cursor, naming the way out.
    let err = store.polling_relay(tag).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("--from-cdc"), "{err}");

    let left = store.leave_cdc(tag).await.unwrap().expect("a CDC cursor");
    assert_eq!(PgPosition::decode(&last).unwrap(), left.cdc_cursor);
    assert_eq!(left.from_handover, with_handover);
    let snapshot = |event: &OutboxEvent| PgPosition::decode(&event.position).unwrap();
    let PgPosition::Snapshot {
        txid: resume_txid, ..
    } = left.resume_after
    else {
        panic!("resumes after {}", left.resume_after);
    };
    // As enqueued (snapshot positions): read again by the polling relay.
    let reread: Vec<OutboxEvent> = if with_handover {
        after.clone()
    } else {
        [before.clone(), after.clone()].concat()
    };
    if with_handover {
        assert!(before.iter().all(|e| snapshot(e) < left.resume_after));
    } else {
        assert_eq!(resume_txid, 0);
    }
    assert!(reread.iter().all(|e| left.resume_after < snapshot(e)));
    assert!(reread.iter().all(|e| snapshot(e) < left.checked_through));
    assert_eq!(left.rows_after, reread.len() as i64);
    assert_eq!(
        store.load_cursor(tag).await.unwrap(),
        Some(left.resume_after.encode())
    );
    assert_eq!(
        store.load_cursor(&attempted).await.unwrap(),
        Some(left.checked_through.encode())
    );
    let handovers: i64 = sqlx::query_scalar("SELECT count(*) FROM relay_cursors WHERE relay = $1")
        .bind(&handover)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(handovers, 0, "the handover is forgotten");
    assert_eq!(
        store.leave_cdc(tag).await.unwrap(),
        None,
        "nothing left to do"
    );

    // The polling relay reads exactly the rows after its new cursor, in order.
    let mut polling = store.polling_relay(tag).await.unwrap();
    let mut polled = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while polled.len() < reread.len() {
        let batch = polling.next_batch(10).await.unwrap();
        if batch.is_empty() {
            assert!(
                Instant::now() < deadline,
                "the polling relay read {polled:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        polled.extend(batch);
    }
    assert_eq!(ids(&polled), ids(&reread));
}

#[tokio::test]
async fn leaving_cdc_resumes_polling_from_the_handover_with_a_snapshot_horizon() {
    leave_cdc_then_poll("leave", true).await;
}

#[tokio::test]
async fn leaving_a_cdc_cursor_without_handover_resumes_polling_from_the_start() {
    leave_cdc_then_poll("leaveold", false).await;
}
