//! A fresh PostgreSQL schema per test, named in the URL the binary takes.

use outbox_core::{NewEvent, OutboxEvent};
use outbox_store_postgres::{PgConfig, PgStore, enqueue};

/// The server tests use; `OUTBOX_TEST_POSTGRES_URL` overrides it.
pub fn server_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub struct PgOutbox {
    pub schema: String,
    pub store: PgStore,
}

impl PgOutbox {
    /// A new schema with the outbox migrated, or `None` (after saying so) when no
    /// server is reachable and `OUTBOX_TEST_REQUIRE` is unset.
    pub async fn new() -> Option<Self> {
        let schema = format!("outbox_e2e_{}", uuid::Uuid::now_v7().simple());
        match PgStore::open(PgConfig::new(server_url()).with_schema(&schema)).await {
            Ok(store) => {
                sweep_leftovers(store.pool()).await;
                Some(Self { schema, store })
            }
            Err(e) if std::env::var_os("OUTBOX_TEST_REQUIRE").is_none() => {
                eprintln!("SKIPPED: no PostgreSQL at {} ({e})", server_url());
                None
            }
            Err(e) => panic!("PostgreSQL is required (OUTBOX_TEST_REQUIRE) but unreachable: {e}"),
        }
    }

    /// The URL the `outbox` binary takes for this schema.
    pub fn url(&self) -> String {
        format!("{}?schema={}", server_url(), self.schema)
    }

    /// Enqueues each event in its own committed transaction.
    pub async fn enqueue(&self, events: &[NewEvent]) -> Vec<OutboxEvent> {
        let mut stored = Vec::new();
        for event in events {
            let mut tx = self.store.pool().begin().await.unwrap();
            stored.push(enqueue(&mut tx, event).await.unwrap());
            tx.commit().await.unwrap();
        }
        stored
    }

    /// Drops the schema (and any CDC slot of `relay`).
    pub async fn drop(self, cdc_relay: Option<&str>) {
        let pool = self.store.pool().clone();
        if let Some(relay) = cdc_relay {
            let slot = format!("outbox_{relay}");
            let _ = sqlx::query("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL")
                .bind(&slot)
                .execute(&pool)
                .await;
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let _ = sqlx::query("SELECT pg_drop_replication_slot($1)")
                .bind(&slot)
                .execute(&pool)
                .await;
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP PUBLICATION IF EXISTS {slot}"
            )))
            .execute(&pool)
            .await;
        }
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&pool)
        .await;
    }
}

/// Drops `outbox_e2e_*` schemas that killed or failed runs left behind more than an
/// hour ago (their names carry a UUID v7, so its time).
async fn sweep_leftovers(pool: &sqlx::PgPool) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'outbox_e2e_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let hour_ago = chrono::Utc::now().timestamp_millis() - 3_600_000;
    for name in names {
        let stale = uuid::Uuid::parse_str(name.trim_start_matches("outbox_e2e_"))
            .ok()
            .and_then(|id| id.get_timestamp())
            .is_some_and(|ts| (ts.to_unix().0 as i64) * 1000 < hour_ago);
        if stale {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA \"{name}\" CASCADE"
            )))
            .execute(pool)
            .await;
        }
    }
}

/// Drops inactive slots an earlier run of the CDC crash test left behind (an inactive
/// slot keeps WAL forever). Only that test calls it, before making its own slot: no
/// other test's slot matches.
pub async fn drop_stale_crash_slots(pool: &sqlx::PgPool) {
    let _ = sqlx::query(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
         WHERE slot_name LIKE 'outbox_crash%' AND NOT active",
    )
    .execute(pool)
    .await;
}
