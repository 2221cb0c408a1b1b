//! `SqliteAuditReader`: read-only lookups of one event across the tables a SQLite
//! file holds — the outbox row, its delivery records, the fan-out log, the consumer's
//! inbox and the exceptions — for `outbox audit`.
//!
//! It opens a database that already exists and never creates, migrates or writes
//! one (`PRAGMA query_only`): an audit pointed at a wrong path fails instead of
//! leaving an empty outbox behind. Lookups by instruction id in `fanout_messages` and
//! `inbox_held` have no index to use and scan those tables; the others use the
//! tables' keys.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use outbox_core::reconcile::sequences::AppliedMarker;
use outbox_core::{
    Account, DeadLetter, DeliveryRecord, Error, ErrorKind, EventId, Exception, HeldMessage,
    MessageKind, OutboxEvent, StoredMessage,
};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::config::SqliteConfig;
use crate::error::SqliteResultExt;
use crate::exceptions::{exception_from_row, select_exceptions};
use crate::fanout::{corrupt, message_from_row, unsigned};
use crate::fanout_dead_letters::letter_from_row;
use crate::reconcile::sequences::marker_from_row;
use crate::store::{delivery_from_row, event_from_row};
use crate::time;

/// Read-only lookups on an existing SQLite outbox, fan-out or consumer database.
#[derive(Debug, Clone)]
pub struct SqliteAuditReader {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl SqliteAuditReader {
    /// Opens the database at `config.path` for reading.
    ///
    /// # Errors
    /// `NotFound` naming the path when there is no such file (nothing is created);
    /// storage errors otherwise.
    pub async fn open(config: &SqliteConfig) -> outbox_core::Result<Self> {
        let path = config.path.clone();
        let busy = config.busy_timeout;
        let opened = path.clone();
        let conn = tokio::task::spawn_blocking(move || {
            if !opened.is_file() {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("no SQLite database at {}", opened.display()),
                ));
            }
            // Read-write without CREATE: reading a WAL database needs its shared-memory
            // file, which a read-only handle may not create; query_only refuses writes.
            let conn = Connection::open_with_flags(
                &opened,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .storage()?;
            conn.busy_timeout(busy).storage()?;
            conn.pragma_update(None, "query_only", "ON").storage()?;
            crate::connection::require_current_schema(&conn, &opened)?;
            Ok(conn)
        })
        .await
        .map_err(join_error)??;
        Ok(Self {
            path,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The database file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) async fn run<T, F>(&self, f: F) -> outbox_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&conn).storage()
        })
        .await
        .map_err(join_error)?
    }

    /// The outbox row of `event_id`, if this outbox holds it.
    ///
    /// # Errors
    /// Storage errors (a database without the outbox tables among them).
    pub async fn event(&self, event_id: EventId) -> outbox_core::Result<Option<OutboxEvent>> {
        self.run(move |conn| {
            conn.query_row(
                "SELECT position, event_id, account, sequence, payload, created_at
                 FROM outbox_events WHERE event_id = ?1",
                [event_id.to_string()],
                event_from_row,
            )
            .optional()
        })
        .await
    }

    /// Every delivery record of `event_id`, oldest first.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn deliveries(&self, event_id: EventId) -> outbox_core::Result<Vec<DeliveryRecord>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
                 FROM outbox_deliveries WHERE event_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([event_id.to_string()], delivery_from_row)?;
            rows.collect()
        })
        .await
    }

    /// The exceptions that name `account` and `sequence`, or `text` (an event id) as
    /// their event or in their detail, oldest first, each with its resolution.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn exceptions_naming(
        &self,
        account: &Account,
        sequence: u64,
        text: &str,
    ) -> outbox_core::Result<Vec<Exception>> {
        let account = account.as_str().to_owned();
        let sequence = i64::try_from(sequence).unwrap_or(i64::MAX);
        let text = text.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare(select_exceptions!(
                "WHERE (x.account = ?1 AND x.sequence = ?2) OR x.event_id = ?3
                    OR instr(x.detail, ?3) > 0
                 ORDER BY x.id"
            ))?;
            let rows = stmt.query_map(params![account, sequence, text], exception_from_row)?;
            rows.collect()
        })
        .await
    }

    /// The fan-out messages carrying `instruction_id`, by position.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn fanout_messages(
        &self,
        instruction_id: &str,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        let id = instruction_id.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT position, instruction_id, account, sequence, kind, ledger, ledger_tx_id,
                        traceparent, tracestate, payload, received_at
                 FROM fanout_messages WHERE instruction_id = ?1 ORDER BY position",
            )?;
            let rows = stmt.query_map([id], message_from_row)?;
            rows.collect()
        })
        .await
    }

    /// `(sequence, position)` of `account`'s fan-out messages with a sequence below
    /// `sequence` stored after `position`: the messages a message at `position`
    /// overtook on Hop 2 (at most 10, lowest sequence first).
    ///
    /// # Errors
    /// Storage errors.
    pub async fn fanout_overtaken(
        &self,
        account: &Account,
        sequence: u64,
        position: u64,
    ) -> outbox_core::Result<Vec<(u64, u64)>> {
        let account = account.as_str().to_owned();
        let sequence = i64::try_from(sequence).unwrap_or(i64::MAX);
        let position = i64::try_from(position).unwrap_or(i64::MAX);
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT sequence, position FROM fanout_messages
                 WHERE account = ?1 AND sequence < ?2 AND position > ?3
                 ORDER BY sequence, position LIMIT 10",
            )?;
            let rows = stmt.query_map(params![account, sequence, position], |row| {
                Ok((
                    unsigned("fanout_messages.sequence", row.get(0)?)?,
                    unsigned("fanout_messages.position", row.get(1)?)?,
                ))
            })?;
            rows.collect()
        })
        .await
    }

    /// Every fan-out cursor (`fanout_cursors`: destinations, replay progress, the
    /// ledger-log checkpoint) with its position, by name.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn fanout_cursors(&self) -> outbox_core::Result<Vec<(String, u64)>> {
        self.run(|conn| {
            let mut stmt =
                conn.prepare("SELECT transport, position FROM fanout_cursors ORDER BY transport")?;
            let rows = stmt.query_map([], |row| {
                Ok((
                    row.get(0)?,
                    unsigned("fanout_cursors.position", row.get(1)?)?,
                ))
            })?;
            rows.collect()
        })
        .await
    }

    /// The dead letters of `instruction_id` at every destination, oldest first.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn dead_letters(&self, instruction_id: &str) -> outbox_core::Result<Vec<DeadLetter>> {
        let id = instruction_id.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT id, destination, position, account, sequence, instruction_id, reason, error,
                        dead_lettered_at
                 FROM fanout_dead_letters WHERE instruction_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([id], letter_from_row)?;
            rows.collect()
        })
        .await
    }

    /// Every consumer's processed marker of `instruction_id`.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn inbox_markers(
        &self,
        instruction_id: &str,
    ) -> outbox_core::Result<Vec<AppliedMarker>> {
        let id = instruction_id.to_owned();
        self.run(move |conn| {
            // Through the primary key (consumer, instruction_id), one consumer at a time.
            let mut stmt = conn.prepare(
                "SELECT consumer, account, sequence, instruction_id, kind, applied_at FROM inbox_messages
                 WHERE consumer IN (SELECT DISTINCT consumer FROM inbox_accounts)
                   AND instruction_id = ?1
                 ORDER BY applied_at, consumer",
            )?;
            let rows = stmt.query_map([id], marker_from_row)?;
            rows.collect()
        })
        .await
    }

    /// Every consumer's gap-queue entry for `instruction_id`.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn held(&self, instruction_id: &str) -> outbox_core::Result<Vec<HeldMessage>> {
        let id = instruction_id.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT consumer, account, sequence, kind, held_at FROM inbox_held
                 WHERE instruction_id = ?1 ORDER BY held_at, consumer",
            )?;
            let rows = stmt.query_map([id], |row| {
                Ok(HeldMessage {
                    consumer: row.get(0)?,
                    account: account_column(row, 1, "inbox_held.account")?,
                    sequence: unsigned("inbox_held.sequence", row.get(2)?)?,
                    kind: kind_column(row, 3, "inbox_held.kind")?,
                    held_at: time::from_micros(row.get(4)?),
                })
            })?;
            rows.collect()
        })
        .await
    }
}

fn account_column(
    row: &rusqlite::Row<'_>,
    index: usize,
    column: &str,
) -> rusqlite::Result<Account> {
    let text: String = row.get(index)?;
    Account::parse(&text).map_err(|e| corrupt(column, e))
}

fn kind_column(
    row: &rusqlite::Row<'_>,
    index: usize,
    column: &str,
) -> rusqlite::Result<MessageKind> {
    let text: String = row.get(index)?;
    MessageKind::parse(&text).ok_or_else(|| corrupt(column, &text))
}

fn join_error(err: tokio::task::JoinError) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("sqlite audit task failed: {err}"),
    )
}
