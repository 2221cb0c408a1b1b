//! The testkit store and inbox suites on SQLite, each test on a fresh database file.

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{
    Accepted, Error, ErrorKind, Exception, GapAlarm, InboxEngine, InboxMessage, NewEvent,
    OutboxEvent, Relay, Result, Store,
};
use outbox_store_sqlite::{SqliteConfig, SqliteInbox, SqliteStore, connect, enqueue, map_error};
use outbox_testkit::{InboxHarness, ReconcileHarness, StoreHarness, fixtures};
use rusqlite::Connection;
use tempfile::TempDir;

fn storage(e: rusqlite::Error) -> Error {
    Error::new(ErrorKind::Storage, e.to_string())
}

#[derive(Clone)]
struct Sqlite {
    _dir: Arc<TempDir>,
    config: SqliteConfig,
    store: SqliteStore,
}

/// An open caller transaction: a connection on which `BEGIN IMMEDIATE` ran.
struct OpenTx(Connection);

#[async_trait]
impl StoreHarness for Sqlite {
    type Store = SqliteStore;
    type Tx = OpenTx;

    async fn new() -> Self {
        let dir = TempDir::new().expect("temp dir");
        let config = SqliteConfig::new(dir.path().join("outbox.db"));
        let store = SqliteStore::open(config.clone()).await.expect("open store");
        Self {
            _dir: Arc::new(dir),
            config,
            store,
        }
    }

    fn store(&self) -> SqliteStore {
        self.store.clone()
    }

    async fn reopen(&self) -> SqliteStore {
        SqliteStore::open(self.config.clone())
            .await
            .expect("reopen store")
    }

    async fn relay(&self, store: &SqliteStore, name: &str) -> Box<dyn Relay> {
        Box::new(store.polling_relay(name).await.expect("relay"))
    }

    async fn begin(&self) -> OpenTx {
        let conn = connect(&self.config).expect("connect");
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        OpenTx(conn)
    }

    async fn enqueue(&self, tx: &mut OpenTx, event: &NewEvent) -> Result<OutboxEvent> {
        enqueue(&tx.0, event)
    }

    async fn commit(&self, tx: OpenTx) -> Result<()> {
        tx.0.execute_batch("COMMIT").map_err(storage)
    }

    async fn rollback(&self, tx: OpenTx) -> Result<()> {
        tx.0.execute_batch("ROLLBACK").map_err(storage)
    }

    async fn enqueue_committed(&self, events: Vec<NewEvent>) -> Result<Vec<OutboxEvent>> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = connect(&config)?;
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(storage)?;
            let stored = events
                .iter()
                .map(|e| enqueue(&tx, e))
                .collect::<Result<Vec<_>>>()?;
            tx.commit().map_err(storage)?;
            Ok(stored)
        })
        .await
        .expect("writer thread")
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        let conn = connect(&self.config)?;
        // The crate's own error mapping, as production code sees it.
        conn.execute(sql, []).map(|n| n as u64).map_err(map_error)
    }
}

mod store {
    outbox_testkit::store_suite!(super::Sqlite);
}

impl ReconcileHarness for Sqlite {
    /// Timestamps are unix microseconds, UTC.
    fn time_literal(&self, at: chrono::DateTime<chrono::Utc>) -> String {
        at.timestamp_micros().to_string()
    }

    fn bytes_literal(&self, bytes: &[u8]) -> String {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("X'{hex}'")
    }
}

mod reconcile {
    outbox_testkit::reconcile_suite!(super::Sqlite);
}

struct SqliteConsumer {
    _dir: TempDir,
    config: SqliteConfig,
}

impl SqliteConsumer {
    fn conn(&self) -> Connection {
        connect(&self.config).expect("connect")
    }
}

#[async_trait(?Send)]
impl InboxHarness for SqliteConsumer {
    async fn new() -> Self {
        let dir = TempDir::new().expect("temp dir");
        let config = SqliteConfig::new(dir.path().join("consumer.db"));
        drop(SqliteStore::open(config.clone()).await.expect("migrate"));
        connect(&config)
            .expect("connect")
            .execute_batch("CREATE TABLE treasury (consumer TEXT NOT NULL, account TEXT NOT NULL, instruction_id TEXT NOT NULL, delta INTEGER NOT NULL)")
            .expect("treasury table");
        Self { _dir: dir, config }
    }

    async fn accept(
        &self,
        engine: &InboxEngine,
        message: InboxMessage,
        fail_handler: bool,
    ) -> Result<Accepted> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(storage)?;
        let consumer = engine.consumer().to_owned();
        let mut handler = |inbox: &mut SqliteInbox<'_>, m: &InboxMessage| -> Result<()> {
            if fail_handler {
                return Err(Error::new(ErrorKind::Handler, "handler failed on purpose"));
            }
            inbox
                .connection()
                .execute(
                    "INSERT INTO treasury (consumer, account, instruction_id, delta) VALUES (?1, ?2, ?3, ?4)",
                    (&consumer, m.account.as_str(), &m.instruction_id, fixtures::impact_of(m)?),
                )
                .map_err(storage)?;
            Ok(())
        };
        let mut inbox = SqliteInbox::new(&tx);
        let accepted = engine.accept(&mut inbox, message, &mut handler).await?;
        tx.commit().map_err(storage)?;
        Ok(accepted)
    }

    async fn check_gaps(&self, engine: &InboxEngine) -> Result<Vec<GapAlarm>> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(storage)?;
        let alarms = engine.check_gaps(&mut SqliteInbox::new(&tx)).await?;
        tx.commit().map_err(storage)?;
        Ok(alarms)
    }

    async fn treasury(&self, consumer: &str) -> Vec<(String, i64)> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT account, sum(delta) FROM treasury WHERE consumer = ?1 GROUP BY account ORDER BY account")
            .expect("prepare");
        stmt.query_map([consumer], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    async fn applied(&self, consumer: &str) -> Vec<(String, String, u64)> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT instruction_id, account, sequence FROM inbox_messages WHERE consumer = ?1 ORDER BY account, sequence")
            .expect("prepare");
        stmt.query_map([consumer], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
        })
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
    }

    async fn held(&self, consumer: &str) -> Vec<(String, u64)> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT account, sequence FROM inbox_held WHERE consumer = ?1 ORDER BY account, sequence")
            .expect("prepare");
        stmt.query_map([consumer], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    async fn exceptions(&self) -> Vec<Exception> {
        SqliteStore::open(self.config.clone())
            .await
            .expect("open")
            .exceptions()
            .await
            .expect("exceptions")
    }
}

mod inbox {
    outbox_testkit::inbox_suite!(super::SqliteConsumer);
}
