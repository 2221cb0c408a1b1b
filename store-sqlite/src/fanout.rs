//! `SqliteFanoutStore`: the Hop 2 fan-out log (`outbox_core::FanoutStore`) on one
//! SQLite file.

use std::path::Path;

use async_trait::async_trait;
use outbox_core::{
    Account, AppendOutcome, DeadLetter, DeadLetterQuery, Error, FanoutMessage, FanoutStore,
    MessageKind, NewDeadLetter, ReplayRequest, StoredMessage,
};
use rusqlite::{OptionalExtension, params};

use crate::config::SqliteConfig;
use crate::error::SqliteResultExt;
use crate::fanout_append::AppendQueue;
use crate::fanout_dead_letters as dead_letters;
use crate::shared::SharedConnection;
use crate::time;

/// The fan-out log on SQLite (tables `fanout_deliveries`, `fanout_messages`,
/// `fanout_cursors`, `fanout_dead_letters`, `fanout_replay_requests`, created by
/// [`crate::migrate`]). Cheap to clone; clones share one
/// connection.
///
/// Positions are `fanout_messages.position` (rowid, AUTOINCREMENT). SQLite has one
/// writer at a time and every append is one `IMMEDIATE` transaction that draws its
/// positions after taking the write lock, so position order is commit order, across
/// processes too: `read_after(cursor)` cannot skip a late commit. Concurrent appends
/// share one such transaction (group commit, `crate::fanout_append`).
#[derive(Clone)]
pub struct SqliteFanoutStore {
    shared: SharedConnection,
    appends: AppendQueue,
}

impl std::fmt::Debug for SqliteFanoutStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteFanoutStore")
            .field("path", &self.shared.config().path)
            .finish()
    }
}

impl SqliteFanoutStore {
    /// Opens (creating if needed) and migrates the database.
    ///
    /// # Errors
    /// Storage errors; BUSY (another writer held the lock beyond `busy_timeout`) is
    /// transient.
    pub async fn open(config: SqliteConfig) -> outbox_core::Result<Self> {
        let shared = SharedConnection::open(config).await?;
        Ok(Self {
            appends: AppendQueue::new(&shared),
            shared,
        })
    }

    pub fn path(&self) -> &Path {
        &self.shared.config().path
    }

    pub fn config(&self) -> &SqliteConfig {
        self.shared.config()
    }
}

pub(crate) fn to_i64(field: &str, value: u64) -> outbox_core::Result<i64> {
    i64::try_from(value)
        .map_err(|_| Error::invalid(field, format!("{value} does not fit a 63-bit integer")))
}

/// A stored value that cannot be what the store wrote.
pub(crate) fn corrupt(column: &str, detail: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Null,
        format!("{column}: {detail}").into(),
    )
}

pub(crate) fn unsigned(column: &str, value: i64) -> rusqlite::Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(column, format!("negative value {value}")))
}

pub(crate) fn message_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredMessage> {
    let account: String = row.get(2)?;
    let kind: String = row.get(4)?;
    Ok(StoredMessage {
        position: unsigned("fanout_messages.position", row.get(0)?)?,
        message: FanoutMessage {
            instruction_id: row.get(1)?,
            account: Account::parse(&account).map_err(|e| corrupt("fanout_messages.account", e))?,
            sequence: unsigned("fanout_messages.sequence", row.get(3)?)?,
            kind: MessageKind::parse(&kind)
                .ok_or_else(|| corrupt("fanout_messages.kind", &kind))?,
            ledger: row.get(5)?,
            ledger_tx_id: row
                .get::<_, Option<i64>>(6)?
                .map(|tx| unsigned("fanout_messages.ledger_tx_id", tx))
                .transpose()?,
            traceparent: row.get(7)?,
            tracestate: row.get(8)?,
            payload: row.get(9)?,
        },
        received_at: time::from_micros(row.get(10)?),
    })
}

#[async_trait]
impl FanoutStore for SqliteFanoutStore {
    /// Group commit (`crate::fanout_append`): concurrent webhooks share one durable
    /// commit, each answered only once its own rows are in it.
    async fn append(
        &self,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        self.appends.append(delivery_id, messages).await
    }

    async fn read_after(
        &self,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        // Positions are at most i64::MAX: anything above reads nothing.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.shared
            .run(move |conn| {
                let mut stmt = conn
                .prepare_cached(
                    "SELECT position, instruction_id, account, sequence, kind, ledger, ledger_tx_id,
                            traceparent, tracestate, payload, received_at
                     FROM fanout_messages WHERE position > ?1 ORDER BY position LIMIT ?2",
                )
                .storage()?;
                let rows = stmt
                    .query_map(params![after, limit], message_from_row)
                    .storage()?;
                rows.collect::<rusqlite::Result<Vec<_>>>().storage()
            })
            .await
    }

    async fn load_cursor(&self, transport: &str) -> outbox_core::Result<u64> {
        let transport = transport.to_owned();
        self.shared
            .run(move |conn| {
                let position: Option<i64> = conn
                    .prepare_cached("SELECT position FROM fanout_cursors WHERE transport = ?1")
                    .storage()?
                    .query_row([&transport], |row| row.get(0))
                    .optional()
                    .storage()?;
                position
                    .map_or(Ok(0), |p| unsigned("fanout_cursors.position", p))
                    .storage()
            })
            .await
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> outbox_core::Result<()> {
        let transport = transport.to_owned();
        let position = to_i64("position", position)?;
        self.shared
            .run(move |conn| {
                // Forward only: a lower value (a slower instance, a stale retry) is ignored.
                conn.prepare_cached(
                "INSERT INTO fanout_cursors (transport, position, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (transport) DO UPDATE
                 SET position = excluded.position, updated_at = excluded.updated_at
                 WHERE excluded.position > fanout_cursors.position",
            )
            .storage()?
            .execute(params![transport, position, time::now_micros()])
            .storage()
            .map(drop)
            })
            .await
    }

    async fn append_dead_letters(
        &self,
        letters: &[NewDeadLetter],
    ) -> outbox_core::Result<Vec<u64>> {
        let letters = letters.to_vec();
        self.shared
            .run(move |conn| dead_letters::append(conn, &letters))
            .await
    }

    async fn read_dead_letters(
        &self,
        query: &DeadLetterQuery<'_>,
    ) -> outbox_core::Result<Vec<DeadLetter>> {
        let query = dead_letters::Query::of(query);
        self.shared
            .run(move |conn| dead_letters::read(conn, &query))
            .await
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &Account,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        let (destination, account) = (destination.to_owned(), account.as_str().to_owned());
        self.shared
            .run(move |conn| {
                dead_letters::read_set_aside(conn, &destination, &account, after, limit)
            })
            .await
    }

    async fn request_replay(
        &self,
        destination: &str,
        account: &Account,
    ) -> outbox_core::Result<ReplayRequest> {
        let (destination, account) = (destination.to_owned(), account.clone());
        self.shared
            .run(move |conn| dead_letters::request_replay(conn, &destination, &account))
            .await
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> outbox_core::Result<Vec<ReplayRequest>> {
        let destination = destination.to_owned();
        self.shared
            .run(move |conn| dead_letters::read_replay_requests(conn, &destination, after))
            .await
    }
}
