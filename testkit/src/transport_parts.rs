//! The database side of the transport suite, ready made: a probe consumer that
//! applies through the real SQLite inbox and a fresh SQLite fan-out store. They are
//! what [`TransportHarness`](crate::TransportHarness) uses unless a harness overrides
//! `consumer` or `fanout_store`, so a transport written in another crate implements
//! only `new` and `destination` (docs/ADAPTERS.md, "Transports").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use outbox_core::{
    Accepted, AppendOutcome, DeadLetter, DeadLetterQuery, Error, ErrorKind, FanoutMessage,
    FanoutStore, InboxEngine, InboxMessage, MessageSink, NewDeadLetter, ReplayRequest, Result,
    StoredMessage,
};
use outbox_store_sqlite::{
    SqliteConfig, SqliteFanoutStore, SqliteInbox, SqliteStore, connect, map_error,
};
use rusqlite::{Connection, TransactionBehavior};

use crate::transport_harness::ProbeConsumer;

/// The consumer name of every probe's inbox (each probe has its own database).
const CONSUMER: &str = "probe";

/// A consumer on a SQLite database of its own: each delivery is applied through
/// [`InboxEngine`] and [`SqliteInbox`] in one transaction per message, crediting and
/// debiting a treasury table from the message's postings and logging what the inbox
/// applied, in apply order, in the same transaction. It also remembers every message
/// it was handed, duplicates included.
#[derive(Debug)]
pub struct SqliteProbe {
    database: Arc<Database>,
    received: Mutex<Vec<FanoutMessage>>,
}

/// The probe's database: what the blocking apply task needs.
#[derive(Debug)]
struct Database {
    config: SqliteConfig,
    engine: InboxEngine,
    /// Deliveries are applied one at a time on this connection (SQLite has one writer).
    writer: Mutex<Connection>,
    _dir: tempfile::TempDir,
}

impl SqliteProbe {
    /// A probe over a new database in a temporary directory (removed with the probe).
    ///
    /// # Panics
    /// When the temporary directory or the database cannot be created.
    pub async fn new() -> Arc<Self> {
        let dir = tempfile::tempdir().expect("a temporary directory for the probe");
        let config = SqliteConfig::new(dir.path().join("consumer.db"));
        // Opening the store migrates the database, inbox tables included.
        drop(
            SqliteStore::open(config.clone())
                .await
                .expect("open the probe database"),
        );
        let writer = connect(&config).expect("connect to the probe database");
        writer
            .execute_batch(
                "CREATE TABLE treasury_balances (
                     account TEXT NOT NULL, asset TEXT NOT NULL, balance INTEGER NOT NULL,
                     PRIMARY KEY (account, asset)) WITHOUT ROWID;
                 CREATE TABLE probe_applied (
                     n INTEGER PRIMARY KEY, account TEXT NOT NULL, sequence INTEGER NOT NULL,
                     instruction_id TEXT NOT NULL);",
            )
            .expect("create the probe's tables");
        Arc::new(Self {
            database: Arc::new(Database {
                config,
                engine: InboxEngine::new(CONSUMER).gap_alarm_after(Duration::from_secs(300)),
                writer: Mutex::new(writer),
                _dir: dir,
            }),
            received: Mutex::default(),
        })
    }
}

impl Database {
    /// Applies one message in its own transaction.
    fn apply(&self, message: InboxMessage) -> Result<()> {
        let mut conn = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_error)?;
        let mut inbox = SqliteInbox::new(&tx);
        let mut handler =
            |inbox: &mut SqliteInbox<'_>, m: &InboxMessage| credit(inbox.connection(), m);
        // The SQLite inbox and this handler never wait, so the future is done on its
        // first poll: the `!Send` transaction stays on this blocking thread.
        let accepted = self
            .engine
            .accept(&mut inbox, message.clone(), &mut handler)
            .now_or_never()
            .expect("SQLite inbox futures complete on their first poll")?;
        if let Accepted::Applied { released } = accepted {
            log_applied(&tx, &message, &released)?;
        }
        tx.commit().map_err(map_error)
    }
}

/// Appends `message` and the held messages released behind it to the apply log.
fn log_applied(conn: &Connection, message: &InboxMessage, released: &[u64]) -> Result<()> {
    conn.execute(
        "INSERT INTO probe_applied (account, sequence, instruction_id) VALUES (?1, ?2, ?3)",
        (
            message.account.as_str(),
            message.sequence as i64,
            &message.instruction_id,
        ),
    )
    .map_err(map_error)?;
    for sequence in released {
        conn.execute(
            "INSERT INTO probe_applied (account, sequence, instruction_id)
             SELECT account, sequence, instruction_id FROM inbox_messages
             WHERE consumer = ?1 AND account = ?2 AND sequence = ?3",
            (CONSUMER, message.account.as_str(), *sequence as i64),
        )
        .map_err(map_error)?;
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct Transaction {
    #[serde(default)]
    postings: Vec<Posting>,
}

#[derive(serde::Deserialize)]
struct Posting {
    source: String,
    destination: String,
    amount: i64,
    asset: String,
}

/// Debits each posting's source and credits its destination (a reversal's payload is
/// the reverting transaction, its postings already the other way round). Amounts are
/// integers in minor units; anything else is refused.
fn credit(conn: &Connection, message: &InboxMessage) -> Result<()> {
    let tx: Transaction = serde_json::from_slice(&message.payload)
        .map_err(|e| Error::invalid("payload", format!("not a ledger transaction: {e}")))?;
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO treasury_balances (account, asset, balance) VALUES (?1, ?2, ?3)
             ON CONFLICT (account, asset) DO UPDATE SET balance = balance + excluded.balance",
        )
        .map_err(map_error)?;
    for p in tx.postings {
        stmt.execute((&p.source, &p.asset, -p.amount))
            .map_err(map_error)?;
        stmt.execute((&p.destination, &p.asset, p.amount))
            .map_err(map_error)?;
    }
    Ok(())
}

#[async_trait]
impl MessageSink for SqliteProbe {
    async fn accept(&self, _delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(messages.iter().cloned());
        let database = Arc::clone(&self.database);
        tokio::task::spawn_blocking(move || {
            messages
                .into_iter()
                .try_for_each(|m| database.apply(m.to_inbox()))
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Internal, format!("probe apply task failed: {e}")))?
    }
}

impl ProbeConsumer for SqliteProbe {
    fn received(&self) -> Vec<FanoutMessage> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn applied(&self) -> Vec<(String, u64, String)> {
        let conn = connect(&self.database.config).expect("connect to the probe database");
        let mut stmt = conn
            .prepare("SELECT account, sequence, instruction_id FROM probe_applied ORDER BY n")
            .expect("prepare the apply log query");
        stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get(2)?))
        })
        .expect("query the apply log")
        .collect::<rusqlite::Result<_>>()
        .expect("read the apply log")
    }

    fn balance(&self, account: &str, asset: &str) -> i64 {
        let conn = connect(&self.database.config).expect("connect to the probe database");
        conn.query_row(
            "SELECT balance FROM treasury_balances WHERE account = ?1 AND asset = ?2",
            (account, asset),
            |r| r.get(0),
        )
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(0),
            e => Err(e),
        })
        .expect("read the treasury balance")
    }
}

/// A SQLite fan-out store in a directory that goes when the store does.
struct TempFanoutStore {
    store: SqliteFanoutStore,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl FanoutStore for TempFanoutStore {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        self.store.append(delivery_id, messages).await
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        self.store.read_after(after, limit).await
    }

    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        self.store.load_cursor(transport).await
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        self.store.save_cursor(transport, position).await
    }

    async fn append_dead_letters(&self, letters: &[NewDeadLetter]) -> Result<Vec<u64>> {
        self.store.append_dead_letters(letters).await
    }

    async fn read_dead_letters(&self, query: &DeadLetterQuery<'_>) -> Result<Vec<DeadLetter>> {
        self.store.read_dead_letters(query).await
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &outbox_core::Account,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        self.store
            .read_set_aside(destination, account, after, limit)
            .await
    }

    async fn request_replay(
        &self,
        destination: &str,
        account: &outbox_core::Account,
    ) -> Result<ReplayRequest> {
        self.store.request_replay(destination, account).await
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> Result<Vec<ReplayRequest>> {
        self.store.read_replay_requests(destination, after).await
    }
}

/// A fresh SQLite fan-out store in a temporary directory of its own.
///
/// # Panics
/// When the directory or the store cannot be created.
pub async fn sqlite_fanout_store() -> Arc<dyn FanoutStore> {
    let dir = tempfile::tempdir().expect("a temporary directory for the fan-out store");
    let config = SqliteConfig::new(dir.path().join("fanout.db"));
    let store = SqliteFanoutStore::open(config)
        .await
        .expect("open the fan-out store");
    Arc::new(TempFanoutStore { store, _dir: dir })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport_cases::message;
    use outbox_core::MessageKind;

    #[tokio::test]
    async fn the_probe_logs_apply_order_and_absorbs_a_duplicate() {
        let probe = SqliteProbe::new().await;
        let first = message("merchants:1", 1, MessageKind::Committed);
        let second = message("merchants:1", 2, MessageKind::Committed);
        // 2 arrives first and is held; 1 applies and releases it; 1 again is absorbed.
        for (i, m) in [&second, &first, &first].into_iter().enumerate() {
            probe
                .accept(&format!("d{i}"), vec![m.clone()])
                .await
                .unwrap();
        }
        assert_eq!(probe.received().len(), 3);
        let applied: Vec<u64> = probe.applied().into_iter().map(|(_, s, _)| s).collect();
        assert_eq!(applied, vec![1, 2]);
        assert_eq!(probe.balance("merchants:1", "USD/2"), 300);
        assert_eq!(probe.balance("world", "USD/2"), -300);
    }

    #[tokio::test]
    async fn a_float_amount_is_refused_and_applies_nothing() {
        let probe = SqliteProbe::new().await;
        let mut m = message("merchants:1", 1, MessageKind::Committed);
        m.payload = br#"{"postings":[{"source":"world","destination":"merchants:1","amount":1.5,"asset":"USD/2"}]}"#.to_vec();
        let error = probe.accept("d", vec![m]).await.unwrap_err();
        assert!(!error.is_transient(), "{error}");
        assert!(probe.applied().is_empty());
        assert_eq!(probe.balance("merchants:1", "USD/2"), 0);
    }
}
