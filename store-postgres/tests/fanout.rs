//! The testkit fan-out store suite on PostgreSQL, each test in a fresh schema (dropped
//! at the end), plus the append lock and the errors only a server has.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{ErrorKind, FanoutStore, MessageKind, Result};
use outbox_store_postgres::{PgConfig, PgFanoutStore, map_error};
use outbox_testkit::FanoutStoreHarness;
use outbox_testkit::fixtures::fanout_message;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use common::{SchemaGuard, fresh_config, server_available, server_url};

/// Nothing listens on port 1 of the loopback interface.
const UNREACHABLE_URL: &str = "postgres://postgres@127.0.0.1:1/test";

#[derive(Clone)]
struct Pg {
    config: PgConfig,
    store: PgFanoutStore,
    _guard: Arc<SchemaGuard>,
}

impl Pg {
    /// A fan-out store on a fresh, migrated schema, or `None` when the server is
    /// unreachable and not required.
    async fn fresh() -> Option<Self> {
        if !server_available().await {
            return None;
        }
        common::sweep_stale_schemas().await;
        let config = fresh_config();
        let guard = Arc::new(SchemaGuard {
            schema: config.schema.clone().expect("schema"),
        });
        let store = PgFanoutStore::open(config.clone())
            .await
            .expect("open fan-out store");
        Some(Self {
            config,
            store,
            _guard: guard,
        })
    }

    fn schema(&self) -> &str {
        self.config.schema.as_deref().expect("schema")
    }
}

#[async_trait]
impl FanoutStoreHarness for Pg {
    type Store = PgFanoutStore;

    async fn new() -> Self {
        common::server_or_exit().await;
        Self::fresh().await.expect("server checked above")
    }

    fn store(&self) -> PgFanoutStore {
        self.store.clone()
    }

    async fn reopen(&self) -> PgFanoutStore {
        PgFanoutStore::open(self.config.clone())
            .await
            .expect("reopen store")
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        // The crate's own error mapping, as production code sees it.
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(self.store.pool())
            .await
            .map(|done| done.rows_affected())
            .map_err(map_error)
    }

    async fn refuse_instruction(&self, instruction_id: &str) {
        self.execute_raw(&format!(
            "ALTER TABLE fanout_messages ADD CONSTRAINT test_refuse_instruction
             CHECK (instruction_id <> '{instruction_id}')"
        ))
        .await
        .expect("add constraint");
    }

    /// A lazily connecting pool to a port nothing listens on: every operation fails
    /// to connect (I/O error or pool timeout, both transient).
    async fn unreachable(&self) -> Result<Arc<dyn FanoutStore>> {
        let options = PgConfig::new(UNREACHABLE_URL).connect_options()?;
        let pool = PgPoolOptions::new()
            .acquire_timeout(Duration::from_millis(500))
            .connect_lazy_with(options);
        Ok(Arc::new(PgFanoutStore::from_pool(pool)))
    }
}

mod fanout {
    outbox_testkit::fanout_store_suite!(super::Pg);
}

fn message(n: u64) -> outbox_core::FanoutMessage {
    fanout_message(
        &format!("0190f2a0-7b1c-7cc2-8a4e-{n:012x}"),
        "4471",
        n,
        MessageKind::Committed,
        n,
    )
}

/// Opening against a server that does not answer is transient: the intake answers
/// 5xx and the ledger retries the webhook.
#[tokio::test]
async fn open_against_an_unreachable_server_is_transient() {
    let mut config = PgConfig::new(UNREACHABLE_URL);
    config.acquire_timeout = Duration::from_millis(500);
    let err = PgFanoutStore::open(config)
        .await
        .expect_err("opened a store on a closed port");
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.kind(), &ErrorKind::Storage);
}

#[tokio::test]
async fn truncate_is_refused_too() {
    let Some(pg) = Pg::fresh().await else {
        return;
    };
    pg.store
        .append("wh-1", &[message(1)])
        .await
        .expect("append");
    for table in [
        "fanout_messages",
        "fanout_deliveries",
        "fanout_dead_letters",
        "fanout_replay_requests",
    ] {
        let err = pg
            .execute_raw(&format!("TRUNCATE {table}"))
            .await
            .expect_err(table);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{table}: {err}");
    }
    assert_eq!(pg.store.read_after(0, 10).await.expect("read").len(), 1);
}

/// Payload bytes round-trip through BYTEA untouched, every byte value included.
#[tokio::test]
async fn every_byte_value_round_trips() {
    let Some(pg) = Pg::fresh().await else {
        return;
    };
    let mut m = message(2);
    m.payload = (0..=255_u8).rev().chain(0..=255).collect();
    pg.store
        .append("wh-bytes", std::slice::from_ref(&m))
        .await
        .expect("append");
    let read = pg.store.read_after(0, 10).await.expect("read");
    assert_eq!(read[0].message.payload, m.payload);
}

/// The append lock is per schema and its wait is bounded: while a transaction holds
/// it (an append in flight that stalls), an append to the same schema fails
/// transiently after the lock timeout and leaves nothing behind; another schema's
/// appends do not wait; once it is released, the same delivery goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_lock_is_per_schema_and_bounded() {
    let Some(pg) = Pg::fresh().await else {
        return;
    };
    let Some(other) = Pg::fresh().await else {
        return;
    };
    let mut holder = PgConnection::connect(&server_url()).await.expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || '.fanout_append', 0))")
        .bind(pg.schema())
        .execute(&mut holder)
        .await
        .expect("take the append lock");

    let store = pg
        .store
        .clone()
        .with_append_lock_timeout(Duration::from_millis(200));
    let err = store
        .append("wh-stalled", &[message(3)])
        .await
        .expect_err("append while the lock is held");
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.context("sqlstate"), Some("55P03"), "{err}");
    assert_eq!(err.context("delivery_id"), Some("wh-stalled"));

    let done = other
        .store
        .clone()
        .with_append_lock_timeout(Duration::from_millis(200))
        .append("wh-elsewhere", &[message(3)])
        .await
        .expect("another schema does not share the lock");
    assert_eq!(done.stored, 1);

    sqlx::query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("release");
    let retried = store
        .append("wh-stalled", &[message(3)])
        .await
        .expect("append after release");
    assert_eq!((retried.stored, retried.delivery_seen), (1, false));
    let _ = holder.close().await;
}

/// The fan-out tables come with the outbox schema: `PgStore::open` creates them, and
/// a fan-out store over its pool works without migrating again.
#[tokio::test]
async fn outbox_store_pool_serves_the_fanout_store() {
    let Some(db) = common::open_store().await else {
        return;
    };
    let fanout = PgFanoutStore::from_pool(db.pool().clone());
    fanout
        .append("wh-shared", &[message(4)])
        .await
        .expect("append");
    fanout.save_cursor("http", 1).await.expect("save");
    assert_eq!(fanout.load_cursor("http").await.expect("load"), 1);
}
