//! `SqliteFanoutStore`: the Hop 2 fan-out log (`outbox_core::FanoutStore`) on one
//! SQLite file.

use std::path::Path;

use async_trait::async_trait;
use outbox_core::{
    Account, AppendOutcome, DeadLetter, DeadLetterQuery, Error, FanoutMessage, FanoutStore,
    MessageKind, NewDeadLetter, ReplayRequest, StoredMessage,
};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::config::SqliteConfig;
use crate::error::SqliteResultExt;
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
/// processes too: `read_after(cursor)` cannot skip a late commit.
#[derive(Clone)]
pub struct SqliteFanoutStore {
    shared: SharedConnection,
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
        Ok(Self {
            shared: SharedConnection::open(config).await?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.shared.config().path
    }

    pub fn config(&self) -> &SqliteConfig {
        self.shared.config()
    }
}

/// One message as its row will hold it, checked before the transaction starts.
struct NewRow {
    dedup_key: String,
    instruction_id: String,
    account: String,
    sequence: i64,
    kind: &'static str,
    ledger: String,
    ledger_tx_id: Option<i64>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    payload: Vec<u8>,
}

pub(crate) fn to_i64(field: &str, value: u64) -> outbox_core::Result<i64> {
    i64::try_from(value)
        .map_err(|_| Error::invalid(field, format!("{value} does not fit a 63-bit integer")))
}

impl NewRow {
    fn from_message(m: &FanoutMessage) -> outbox_core::Result<Self> {
        Ok(Self {
            dedup_key: m.dedup_key(),
            instruction_id: m.instruction_id.clone(),
            account: m.account.as_str().to_owned(),
            sequence: to_i64("sequence", m.sequence)?,
            kind: m.kind.as_str(),
            ledger: m.ledger.clone(),
            ledger_tx_id: m
                .ledger_tx_id
                .map(|tx| to_i64("ledger_tx_id", tx))
                .transpose()?,
            traceparent: m.traceparent.clone(),
            tracestate: m.tracestate.clone(),
            payload: m.payload.clone(),
        })
    }
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

/// Cancel safety: the work runs on a blocking thread that finishes even when the
/// caller's future is dropped; an append then commits or rolls back on its own, and
/// the caller learns nothing. A retried delivery is recognised by its id either way.
#[async_trait]
impl FanoutStore for SqliteFanoutStore {
    async fn append(
        &self,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        let id = delivery_id.to_owned();
        let rows = messages
            .iter()
            .map(NewRow::from_message)
            .collect::<outbox_core::Result<Vec<_>>>()
            .map_err(|e| e.with("delivery_id", delivery_id))?;
        self.shared.run(move |conn| {
            // IMMEDIATE: the write lock is taken (or BUSY, transient) before anything
            // is read, and every position of this append is drawn under it.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .storage()?;
            let now = time::now_micros();
            let first_time = tx
                .prepare_cached(
                    "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES (?1, ?2)
                     ON CONFLICT (delivery_id) DO NOTHING",
                )
                .storage()?
                .execute(params![id, now])
                .storage()?
                == 1;
            if !first_time {
                // Nothing was written; dropping the transaction rolls it back.
                return Ok(AppendOutcome {
                    delivery_seen: true,
                    ..AppendOutcome::default()
                });
            }
            let mut outcome = AppendOutcome::default();
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind,
                             ledger, ledger_tx_id, traceparent, tracestate, payload, received_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                         ON CONFLICT (dedup_key) DO NOTHING",
                    )
                    .storage()?;
                for row in &rows {
                    // A duplicate within this append conflicts with the row written a
                    // moment ago, so the first occurrence is the one kept.
                    let inserted = insert
                        .execute(params![
                            row.dedup_key,
                            row.instruction_id,
                            row.account,
                            row.sequence,
                            row.kind,
                            row.ledger,
                            row.ledger_tx_id,
                            row.traceparent,
                            row.tracestate,
                            row.payload,
                            now
                        ])
                        .map_err(|e| {
                            crate::error::map(e).with("dedup_key", &row.dedup_key)
                        })?;
                    if inserted == 1 {
                        outcome.stored += 1;
                    } else {
                        outcome.duplicates += 1;
                    }
                }
            }
            tx.commit().storage()?;
            Ok(outcome)
        })
        .await
        .map_err(|e| e.with("delivery_id", delivery_id))
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
