//! The testkit fan-out store suite on SQLite, each test on a fresh database file, plus
//! what only SQLite has: the single writer lock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{FanoutStore, MessageKind, Result};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore, connect, map_error};
use outbox_testkit::FanoutStoreHarness;
use outbox_testkit::fixtures::fanout_message;
use outbox_testkit::write_lock::behind_the_write_lock;
use rusqlite::Connection;
use tempfile::TempDir;

#[derive(Clone)]
struct Sqlite {
    dir: Arc<TempDir>,
    config: SqliteConfig,
    store: SqliteFanoutStore,
    /// Connections holding a database file's lock until the test ends.
    blockers: Arc<Mutex<Vec<Connection>>>,
}

#[async_trait]
impl FanoutStoreHarness for Sqlite {
    type Store = SqliteFanoutStore;

    async fn new() -> Self {
        let dir = TempDir::new().expect("temp dir");
        let config = SqliteConfig::new(dir.path().join("fanout.db"));
        let store = SqliteFanoutStore::open(config.clone())
            .await
            .expect("open store");
        Self {
            dir: Arc::new(dir),
            config,
            store,
            blockers: Arc::default(),
        }
    }

    fn store(&self) -> SqliteFanoutStore {
        self.store.clone()
    }

    async fn reopen(&self) -> SqliteFanoutStore {
        SqliteFanoutStore::open(self.config.clone())
            .await
            .expect("reopen store")
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        let conn = connect(&self.config)?;
        // The crate's own error mapping, as production code sees it.
        conn.execute(sql, []).map(|n| n as u64).map_err(map_error)
    }

    async fn refuse_instruction(&self, instruction_id: &str) {
        let conn = connect(&self.config).expect("connect");
        conn.execute_batch(&format!(
            "CREATE TRIGGER test_refuse_instruction BEFORE INSERT ON fanout_messages
             WHEN NEW.instruction_id = '{instruction_id}'
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
        ))
        .expect("create trigger");
    }

    /// SQLite has no server to lose: "unreachable" is a file another process holds
    /// in exclusive locking mode. In WAL mode an already open connection keeps
    /// reading past a writer, so the store is opened after the lock was taken, and
    /// that open is what fails (BUSY once `busy_timeout` has passed: transient).
    async fn unreachable(&self) -> Result<Arc<dyn FanoutStore>> {
        let mut config = SqliteConfig::new(self.dir.path().join("locked.db"));
        config.busy_timeout = Duration::from_millis(200);
        drop(SqliteFanoutStore::open(config.clone()).await?);
        let blocker = connect(&config)?;
        blocker
            .pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(map_error)?;
        blocker
            .execute_batch(
                "BEGIN EXCLUSIVE; INSERT INTO fanout_cursors VALUES ('lock', 1, 1); COMMIT;",
            )
            .map_err(map_error)?;
        self.blockers.lock().expect("blockers").push(blocker);
        let store = SqliteFanoutStore::open(config).await?;
        Ok(Arc::new(store))
    }
}

mod fanout {
    outbox_testkit::fanout_store_suite!(super::Sqlite);
}

/// Another process's write transaction makes appends and cursor saves wait up to
/// `busy_timeout`, then fail transiently; readers go on (WAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_lock_makes_writes_transient_and_reads_go_on() {
    let dir = TempDir::new().expect("temp dir");
    let mut config = SqliteConfig::new(dir.path().join("busy.db"));
    config.busy_timeout = Duration::from_millis(200);
    let store = SqliteFanoutStore::open(config.clone()).await.expect("open");
    let message = fanout_message(
        "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59",
        "4471",
        1,
        MessageKind::Committed,
        7,
    );
    store
        .append("wh-before", std::slice::from_ref(&message))
        .await
        .expect("append");

    let other = connect(&config).expect("connect");
    other.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let err = store
        .append("wh-during", std::slice::from_ref(&message))
        .await
        .expect_err("append while another writer holds the lock");
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.context("delivery_id"), Some("wh-during"));
    let err = store
        .save_cursor("kafka", 1)
        .await
        .expect_err("save_cursor while another writer holds the lock");
    assert!(err.is_transient(), "{err}");
    assert_eq!(store.read_after(0, 10).await.expect("read").len(), 1);
    assert_eq!(store.load_cursor("kafka").await.expect("load"), 0);
    other.execute_batch("ROLLBACK").expect("rollback");

    // The failed append left nothing behind: its retry is a first delivery.
    let retried = store
        .append("wh-during", &[])
        .await
        .expect("append after the lock is gone");
    assert!(!retried.delivery_seen);
}

/// Appends that wait for the writer lock together are written together (group
/// commit: one transaction, one `received_at`), and one that fails inside the group
/// leaves nothing behind while the others are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_waiting_together_commit_together_and_fail_alone() {
    let harness = Sqlite::new().await;
    let store = harness.store();
    let refused = "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a5b";
    harness.refuse_instruction(refused).await;
    let outcomes = behind_the_write_lock(&harness.config.path, || {
        [
            ("wh-a", "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a5a", 1),
            ("wh-b", refused, 2),
            ("wh-c", "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a5c", 3),
        ]
        .into_iter()
        .map(|(delivery, instruction, sequence)| {
            let store = store.clone();
            let message = fanout_message(
                instruction,
                "4471",
                sequence,
                MessageKind::Committed,
                sequence,
            );
            tokio::spawn(
                async move { store.append(delivery, std::slice::from_ref(&message)).await },
            )
        })
        .collect()
    })
    .await;
    let kept: Vec<usize> = [&outcomes[0], &outcomes[2]]
        .iter()
        .map(|o| o.as_ref().expect("a good append in the group").stored)
        .collect();
    assert_eq!(kept, [1, 1]);
    let err = outcomes[1].as_ref().expect_err("the refused append fails");
    assert!(!err.is_transient(), "{err}");
    assert_eq!(err.context("delivery_id"), Some("wh-b"));

    let stored = store.read_after(0, 10).await.expect("read");
    let sequences: Vec<u64> = stored.iter().map(|m| m.message.sequence).collect();
    assert_eq!(
        sequences,
        [1, 3],
        "only the good appends' messages are stored"
    );
    assert_eq!(
        stored[0].received_at, stored[1].received_at,
        "the appends that waited together were written in one transaction"
    );

    // The refused append left no trace: once the refusal is gone, its retry is a
    // first delivery.
    harness
        .execute_raw("DROP TRIGGER test_refuse_instruction")
        .await
        .expect("drop trigger");
    let message = fanout_message(refused, "4471", 2, MessageKind::Committed, 2);
    let retried = store
        .append("wh-b", std::slice::from_ref(&message))
        .await
        .expect("retry");
    assert!(!retried.delivery_seen);
    assert_eq!(retried.stored, 1);
}

/// The fan-out tables come with the outbox migrations: one database serves both.
#[tokio::test]
async fn outbox_store_and_fanout_store_share_one_database() {
    let dir = TempDir::new().expect("temp dir");
    let config = SqliteConfig::new(dir.path().join("both.db"));
    let outbox = outbox_store_sqlite::SqliteStore::open(config.clone())
        .await
        .expect("open outbox store");
    let fanout = SqliteFanoutStore::open(config.clone())
        .await
        .expect("open fanout store");
    assert_eq!(fanout.load_cursor("http").await.expect("load"), 0);
    drop(outbox);
    let version: i64 = connect(&config)
        .expect("connect")
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version");
    assert_eq!(version, 6);
}
