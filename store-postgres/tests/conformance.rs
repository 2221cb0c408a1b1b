//! The testkit store and inbox suites on PostgreSQL, each test in a fresh schema.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{
    Accepted, Error, ErrorKind, Exception, GapAlarm, Handler, InboxEngine, InboxMessage, NewEvent,
    OutboxEvent, Relay, Result, Store,
};
use outbox_store_postgres::{PgInbox, PgStore, enqueue, map_error};
use outbox_testkit::{InboxHarness, ReconcileHarness, StoreHarness, fixtures};
use sqlx::{AssertSqlSafe, Postgres, Transaction};

use common::{TestDb, backend_pid, open_store, txid_of, wait_past_horizon};

/// How long a commit waits for other sessions' older transactions (see
/// `common::wait_past_horizon`) before letting the case's assertions decide.
const HORIZON_WAIT: Duration = Duration::from_secs(60);

#[derive(Clone)]
struct Pg {
    db: TestDb,
    /// Backends of transactions this harness holds open: the horizon wait must not
    /// wait for them (the case commits them later, on purpose).
    open: Arc<Mutex<HashSet<i32>>>,
}

/// An open caller transaction and what the wait after its commit needs.
struct OpenTx {
    tx: Transaction<'static, Postgres>,
    pid: i32,
    last_txid: Option<u64>,
}

impl Pg {
    async fn begin_tracked(&self) -> OpenTx {
        let mut tx = self.db.pool().begin().await.expect("begin");
        let pid = backend_pid(&mut tx).await;
        self.open.lock().expect("open set").insert(pid);
        OpenTx {
            tx,
            pid,
            last_txid: None,
        }
    }

    fn untrack(&self, pid: i32) -> Vec<i32> {
        let mut open = self.open.lock().expect("open set");
        open.remove(&pid);
        open.iter().copied().collect()
    }

    async fn commit_tracked(&self, tx: OpenTx) -> Result<()> {
        let committed = tx.tx.commit().await.map_err(map_error);
        let still_open = self.untrack(tx.pid);
        committed?;
        if let Some(txid) = tx.last_txid {
            wait_past_horizon(self.db.pool(), txid, &still_open, HORIZON_WAIT).await;
        }
        Ok(())
    }
}

#[async_trait]
impl StoreHarness for Pg {
    type Store = PgStore;
    type Tx = OpenTx;

    async fn new() -> Self {
        common::server_or_exit().await;
        Self {
            db: open_store().await.expect("server checked above"),
            open: Arc::default(),
        }
    }

    fn store(&self) -> PgStore {
        self.db.store.clone()
    }

    async fn reopen(&self) -> PgStore {
        PgStore::open(self.db.config.clone())
            .await
            .expect("reopen store")
    }

    async fn relay(&self, store: &PgStore, name: &str) -> Box<dyn Relay> {
        Box::new(store.polling_relay(name).await.expect("relay"))
    }

    async fn begin(&self) -> OpenTx {
        self.begin_tracked().await
    }

    async fn enqueue(&self, tx: &mut OpenTx, event: &NewEvent) -> Result<OutboxEvent> {
        let stored = enqueue(&mut tx.tx, event).await?;
        tx.last_txid = tx.last_txid.max(Some(txid_of(&stored)));
        Ok(stored)
    }

    async fn commit(&self, tx: OpenTx) -> Result<()> {
        self.commit_tracked(tx).await
    }

    async fn rollback(&self, tx: OpenTx) -> Result<()> {
        let rolled_back = tx.tx.rollback().await.map_err(map_error);
        self.untrack(tx.pid);
        rolled_back
    }

    async fn enqueue_committed(&self, events: Vec<NewEvent>) -> Result<Vec<OutboxEvent>> {
        let mut tx = self.begin_tracked().await;
        let mut stored = Vec::with_capacity(events.len());
        for event in &events {
            match self.enqueue(&mut tx, event).await {
                Ok(event) => stored.push(event),
                Err(e) => {
                    let _ = self.rollback(tx).await;
                    return Err(e);
                }
            }
        }
        self.commit_tracked(tx).await?;
        Ok(stored)
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64> {
        // The crate's own error mapping, as production code sees it.
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(self.db.pool())
            .await
            .map(|done| done.rows_affected())
            .map_err(map_error)
    }
}

mod store {
    outbox_testkit::store_suite!(super::Pg);
}

impl ReconcileHarness for Pg {
    fn time_literal(&self, at: chrono::DateTime<chrono::Utc>) -> String {
        format!(
            "'{}'::timestamptz",
            at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        )
    }

    fn bytes_literal(&self, bytes: &[u8]) -> String {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("decode('{hex}', 'hex')")
    }
}

mod reconcile {
    outbox_testkit::reconcile_suite!(super::Pg);
}

/// The inbox suite's consumer: a fresh schema with the inbox tables and a treasury.
struct PgConsumer {
    db: TestDb,
}

/// The suite's handler: one treasury row per impact, in the consumer's transaction.
struct Treasury {
    consumer: String,
    fail: bool,
}

impl Handler<PgInbox<'_>> for Treasury {
    async fn apply(&mut self, inbox: &mut PgInbox<'_>, message: &InboxMessage) -> Result<()> {
        if self.fail {
            return Err(Error::new(ErrorKind::Handler, "handler failed on purpose"));
        }
        sqlx::query(
            "INSERT INTO treasury (consumer, account, instruction_id, delta) VALUES ($1, $2, $3, $4)",
        )
        .bind(&self.consumer)
        .bind(message.account.as_str())
        .bind(&message.instruction_id)
        .bind(fixtures::impact_of(message)?)
        .execute(inbox.connection())
        .await
        .map_err(map_error)?;
        Ok(())
    }
}

#[async_trait(?Send)]
impl InboxHarness for PgConsumer {
    async fn new() -> Self {
        common::server_or_exit().await;
        let db = open_store().await.expect("server checked above");
        sqlx::query(
            "CREATE TABLE treasury (consumer text NOT NULL, account text NOT NULL, instruction_id text NOT NULL, delta bigint NOT NULL)",
        )
        .execute(db.pool())
        .await
        .expect("treasury table");
        Self { db }
    }

    async fn accept(
        &self,
        engine: &InboxEngine,
        message: InboxMessage,
        fail_handler: bool,
    ) -> Result<Accepted> {
        let mut tx = self.db.pool().begin().await.map_err(map_error)?;
        let mut handler = Treasury {
            consumer: engine.consumer().to_owned(),
            fail: fail_handler,
        };
        let accepted = engine
            .accept(&mut PgInbox::new(&mut tx), message, &mut handler)
            .await;
        match accepted {
            Ok(accepted) => {
                tx.commit().await.map_err(map_error)?;
                Ok(accepted)
            }
            Err(e) => {
                tx.rollback().await.map_err(map_error)?;
                Err(e)
            }
        }
    }

    async fn check_gaps(&self, engine: &InboxEngine) -> Result<Vec<GapAlarm>> {
        let mut tx = self.db.pool().begin().await.map_err(map_error)?;
        let alarms = engine.check_gaps(&mut PgInbox::new(&mut tx)).await?;
        tx.commit().await.map_err(map_error)?;
        Ok(alarms)
    }

    async fn treasury(&self, consumer: &str) -> Vec<(String, i64)> {
        sqlx::query_as(
            "SELECT account, sum(delta)::bigint FROM treasury WHERE consumer = $1 GROUP BY account ORDER BY account",
        )
        .bind(consumer)
        .fetch_all(self.db.pool())
        .await
        .expect("treasury")
    }

    async fn applied(&self, consumer: &str) -> Vec<(String, String, u64)> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT instruction_id, account, sequence FROM inbox_messages WHERE consumer = $1 ORDER BY account, sequence",
        )
        .bind(consumer)
        .fetch_all(self.db.pool())
        .await
        .expect("applied");
        rows.into_iter()
            .map(|(id, account, seq)| (id, account, seq as u64))
            .collect()
    }

    async fn held(&self, consumer: &str) -> Vec<(String, u64)> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT account, sequence FROM inbox_held WHERE consumer = $1 ORDER BY account, sequence",
        )
        .bind(consumer)
        .fetch_all(self.db.pool())
        .await
        .expect("held");
        rows.into_iter()
            .map(|(account, seq)| (account, seq as u64))
            .collect()
    }

    async fn exceptions(&self) -> Vec<Exception> {
        self.db.store.exceptions().await.expect("exceptions")
    }
}

mod inbox {
    outbox_testkit::inbox_suite!(super::PgConsumer);
}
