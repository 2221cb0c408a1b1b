//! Shared by the store-postgres test binaries: the server address, a fresh schema per
//! test (dropped when the test ends), and waiting out other sessions' transactions.
//!
//! `OUTBOX_TEST_POSTGRES_URL` names the server (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it cannot be reached the tests
//! say plainly that they skipped, unless `OUTBOX_TEST_REQUIRE` is set: then they fail.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::OutboxEvent;
use outbox_store_postgres::{PgConfig, PgPosition, PgStore};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, PgPool};
use tokio::sync::OnceCell;
use uuid::Uuid;

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Test schemas are named `<prefix><uuid v7>`; the v7 timestamp dates them.
pub const SCHEMA_PREFIX: &str = "outbox_pg_t_";

pub fn server_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

fn required() -> bool {
    std::env::var_os("OUTBOX_TEST_REQUIRE").is_some_and(|v| !v.is_empty())
}

/// Written straight to the process's stderr, past the test harness's output capture,
/// so a skip is visible in `cargo test` output.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Whether the server answers, checked once per test binary. Unreachable with
/// `OUTBOX_TEST_REQUIRE` set: panics (the test fails).
pub async fn server_available() -> bool {
    static AVAILABLE: OnceCell<bool> = OnceCell::const_new();
    *AVAILABLE
        .get_or_init(|| async {
            let url = server_url();
            let attempt =
                tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&url)).await;
            let problem = match attempt {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                    return true;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer within 5 s".to_owned(),
            };
            if required() {
                panic!("PostgreSQL at {url} is unreachable ({problem}) and OUTBOX_TEST_REQUIRE is set");
            }
            say(&format!(
                "SKIPPED: PostgreSQL at {url} is unreachable ({problem}); set OUTBOX_TEST_REQUIRE=1 to make this a failure"
            ));
            false
        })
        .await
}

/// For test binaries whose cases come from a macro and cannot return early: ends
/// the whole binary successfully, after saying so, when the server is unreachable.
pub async fn server_or_exit() {
    if !server_available().await {
        say("SKIPPED: every test of this binary needs PostgreSQL");
        std::process::exit(0);
    }
}

/// One test's schema; dropped (CASCADE) when the last clone goes.
#[derive(Debug)]
pub struct SchemaGuard {
    pub schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        // Drop can neither be async nor block_on inside the test's runtime: a thread
        // with a runtime of its own does it, bounded by lock_timeout in case a
        // connection of the test still holds a lock.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(drop_schema(&schema)).ok()
        })
        .join();
        if !matches!(dropped, Ok(Some(()))) {
            say(&format!(
                "note: schema {} was not dropped; a later test run removes it",
                self.schema
            ));
        }
    }
}

async fn drop_schema(schema: &str) -> Result<(), sqlx::Error> {
    let mut conn = PgConnection::connect(&server_url()).await?;
    conn.execute("SET lock_timeout = '3s'").await?;
    conn.execute(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .await?;
    conn.close().await
}

/// Drops test schemas older than an hour, left behind by killed test runs.
pub async fn sweep_stale_schemas() {
    static SWEPT: OnceCell<()> = OnceCell::const_new();
    SWEPT
        .get_or_init(|| async {
            let Ok(mut conn) = PgConnection::connect(&server_url()).await else {
                return;
            };
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT nspname::text FROM pg_namespace WHERE starts_with(nspname, $1)",
            )
            .bind(SCHEMA_PREFIX)
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
            let hour_ago = chrono::Utc::now().timestamp_millis() - 3_600_000;
            for name in names {
                let minted = name
                    .strip_prefix(SCHEMA_PREFIX)
                    .and_then(|hex| Uuid::parse_str(hex).ok())
                    .and_then(|id| id.get_timestamp())
                    .map(|ts| ts.to_unix().0 as i64 * 1000);
                if minted.is_some_and(|ms| ms < hour_ago) {
                    let _ = drop_schema(&name).await;
                }
            }
        })
        .await;
}

/// A fresh schema name.
pub fn fresh_schema() -> String {
    format!("{SCHEMA_PREFIX}{}", Uuid::now_v7().simple())
}

/// A config for a fresh schema of the test server; `migrate`/`open` creates it.
pub fn fresh_config() -> PgConfig {
    let mut config = PgConfig::new(server_url()).with_schema(fresh_schema());
    // Many tests run at once against one server with max_connections = 100.
    config.max_connections = 12;
    config
}

/// A migrated store in a fresh schema, or `None` (after saying so) when the server is
/// unreachable and not required.
pub async fn open_store() -> Option<TestDb> {
    open_store_with(fresh_config()).await
}

/// [`open_store`] with `config` (a [`fresh_config`] the test adjusted).
pub async fn open_store_with(config: PgConfig) -> Option<TestDb> {
    if !server_available().await {
        return None;
    }
    sweep_stale_schemas().await;
    let guard = Arc::new(SchemaGuard {
        schema: config.schema.clone().expect("schema"),
    });
    let store = PgStore::open(config.clone()).await.expect("open store");
    Some(TestDb {
        config,
        store,
        _guard: guard,
    })
}

/// A fresh, migrated schema and the store on it.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub config: PgConfig,
    pub store: PgStore,
    _guard: Arc<SchemaGuard>,
}

impl TestDb {
    pub fn pool(&self) -> &PgPool {
        self.store.pool()
    }
}

/// The txid of a stored event's position.
pub fn txid_of(event: &OutboxEvent) -> u64 {
    match PgPosition::decode(&event.position) {
        Ok(PgPosition::Snapshot { txid, .. }) => txid,
        _ => panic!("not a snapshot position: {}", event.position),
    }
}

/// The outbox row (`outbox_events.position`) of a stored event's position.
pub fn row_of(event: &OutboxEvent) -> i64 {
    PgPosition::decode(&event.position)
        .expect("a Postgres position")
        .row()
}

/// Waits until no transaction holds an xid below `txid`, except those on the backends
/// `ignore` (transactions the test keeps open on purpose).
///
/// The xmin gate is server-wide: a transaction of another test or another program
/// (autovacuum's ANALYZE, a colleague's session) briefly holds back rows committed
/// after it. Tests call this after a commit so that "committed" also means "past the
/// horizon" without hiding the transactions they hold open themselves. Gives up after
/// `timeout`, saying who holds the horizon; the test's own assertions then report.
pub async fn wait_past_horizon(pool: &PgPool, txid: u64, ignore: &[i32], timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let blockers: Vec<(Option<i32>, String)> = sqlx::query_as(
            "SELECT a.pid, x.xid::text
             FROM pg_snapshot_xip(pg_current_snapshot()) AS x(xid)
             LEFT JOIN pg_stat_activity a
                    ON a.backend_xid::text = (x.xid::text::numeric % 4294967296)::text
             WHERE x.xid < $1::text::xid8 AND (a.pid IS NULL OR a.pid <> ALL($2))",
        )
        .bind(txid.to_string())
        .bind(ignore)
        .fetch_all(pool)
        .await
        .expect("horizon query");
        if blockers.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            say(&format!(
                "note: transactions {blockers:?} still hold the horizon below txid {txid} after {timeout:?}"
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The backend pid of a connection.
pub async fn backend_pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .expect("pg_backend_pid")
}

/// Reads from `relay` until `count` events arrived or `within` passed; returns all
/// it read, so callers can also check for repeats.
pub async fn collect(
    relay: &mut dyn outbox_core::Relay,
    count: usize,
    within: Duration,
) -> Vec<OutboxEvent> {
    let deadline = tokio::time::Instant::now() + within;
    let mut seen = Vec::new();
    while seen.len() < count && tokio::time::Instant::now() < deadline {
        let batch = relay.next_batch(100).await.expect("relay batch");
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen.extend(batch);
    }
    seen
}

/// Everything the relay returns right now.
pub async fn drain(relay: &mut dyn outbox_core::Relay) -> Vec<OutboxEvent> {
    let mut all = Vec::new();
    loop {
        let batch = relay.next_batch(100).await.expect("relay batch");
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

/// Waits until backend `pid` is blocked on a lock (so the test knows the order in
/// which two transactions reached a row lock).
pub async fn wait_until_blocked(pool: &PgPool, pid: i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)",
        )
        .bind(pid)
        .fetch_one(pool)
        .await
        .expect("pg_stat_activity");
        if waiting {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "backend {pid} never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------------------
// What a read looked at, as the server counts it (never timed)
//
// `idx_tup_fetch` + `seq_tup_read` of the outbox partitions in `pg_stat_user_tables`.
// A backend publishes its counters once it has been idle a second (PostgreSQL's
// minimum flush interval; an idle backend flushes within ten seconds in any case), so
// a test runs its own statements on the reader's one connection and waits that out.

/// Rows the server fetched or scanned from the outbox partitions so far.
pub async fn rows_looked_at(pool: &PgPool) -> i64 {
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT COALESCE(sum(COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0)), 0)::int8
         FROM pg_stat_user_tables
         WHERE schemaname = current_schema() AND relname LIKE 'outbox\\_events%'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The counter once it has moved past `before` by at least `at_least` (the backend
/// flushed what it counted), polling for up to 20 s.
pub async fn counted_since(pool: &PgPool, before: i64, at_least: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = rows_looked_at(pool).await;
        if now - before >= at_least {
            return now - before;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never counted the read's rows ({} of at least {at_least})",
            now - before
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits past the flush interval, so what the backend counted so far is published.
pub async fn flush(pool: &PgPool) {
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    sqlx::query("SELECT 1").execute(pool).await.unwrap();
}
