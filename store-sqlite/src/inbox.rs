//! `SqliteInbox`: inbox storage bound to the consumer's open SQLite transaction.

use outbox_core::{Account, HeldGap, HoldResult, Inbox, InboxMessage, MessageKind, NewException};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::SqliteResultExt;
use crate::exceptions::insert_exception;
use crate::time;

/// The inbox tables seen through the consumer's transaction.
///
/// Build it on the same transaction that writes the impact (`SqliteInbox::new(&tx)`);
/// the handler reaches that transaction through [`SqliteInbox::connection`].
#[derive(Debug)]
pub struct SqliteInbox<'c> {
    conn: &'c Connection,
}

impl<'c> SqliteInbox<'c> {
    pub fn new(conn: &'c Connection) -> Self {
        Self { conn }
    }

    /// The consumer's transaction, for writing the impact.
    pub fn connection(&self) -> &'c Connection {
        self.conn
    }
}

fn corrupt(what: &str, e: outbox_core::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("{what}: {e}").into(),
    )
}

/// A stored message kind, or the column named as corrupt.
fn parse_kind(column: &str, kind: String) -> rusqlite::Result<MessageKind> {
    MessageKind::parse(&kind)
        .ok_or_else(|| corrupt(column, outbox_core::Error::invalid("kind", kind.clone())))
}

impl Inbox for SqliteInbox<'_> {
    async fn processed_kind(
        &mut self,
        consumer: &str,
        instruction_id: &str,
    ) -> outbox_core::Result<Option<MessageKind>> {
        let kind: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT kind FROM inbox_messages WHERE consumer = ?1 AND instruction_id = ?2",
            )
            .storage()?
            .query_row([consumer, instruction_id], |row| row.get(0))
            .optional()
            .storage()?;
        kind.map(|kind| parse_kind("inbox_messages.kind", kind))
            .transpose()
            .storage()
    }

    async fn last_applied(
        &mut self,
        consumer: &str,
        account: &Account,
    ) -> outbox_core::Result<u64> {
        self.conn
            .prepare_cached(
                "SELECT last_applied FROM inbox_accounts WHERE consumer = ?1 AND account = ?2",
            )
            .storage()?
            .query_row([consumer, account.as_str()], |row| row.get::<_, i64>(0))
            .optional()
            .storage()
            .map(|last| last.unwrap_or(0) as u64)
    }

    async fn mark_applied(
        &mut self,
        consumer: &str,
        message: &InboxMessage,
    ) -> outbox_core::Result<()> {
        let now = time::now_micros();
        self.conn
            .prepare_cached(
                "INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .storage()?
            .execute(params![
                consumer,
                message.instruction_id,
                message.account.as_str(),
                message.sequence as i64,
                message.kind.as_str(),
                now
            ])
            .storage()?;
        self.conn
            .prepare_cached(
                "INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES (?1, ?2, ?3)
                 ON CONFLICT (consumer, account) DO UPDATE SET last_applied = excluded.last_applied",
            )
            .storage()?
            .execute(params![consumer, message.account.as_str(), message.sequence as i64])
            .storage()
            .map(drop)
    }

    async fn hold(
        &mut self,
        consumer: &str,
        message: &InboxMessage,
    ) -> outbox_core::Result<HoldResult> {
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
            )
            .storage()?
            .execute(params![
                consumer,
                message.account.as_str(),
                message.sequence as i64,
                message.instruction_id,
                message.kind.as_str(),
                message.payload,
                time::now_micros()
            ])
            .storage()?;
        if inserted == 1 {
            return Ok(HoldResult::Held);
        }
        let (instruction_id, kind): (String, String) = self
            .conn
            .query_row(
                "SELECT instruction_id, kind FROM inbox_held WHERE consumer = ?1 AND account = ?2 AND sequence = ?3",
                params![consumer, message.account.as_str(), message.sequence as i64],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .storage()?;
        let kind = parse_kind("inbox_held.kind", kind).storage()?;
        Ok(HoldResult::Occupied {
            instruction_id,
            kind,
        })
    }

    async fn take_held(
        &mut self,
        consumer: &str,
        account: &Account,
        sequence: u64,
    ) -> outbox_core::Result<Option<InboxMessage>> {
        self.conn
            .prepare_cached(
                "DELETE FROM inbox_held WHERE consumer = ?1 AND account = ?2 AND sequence = ?3
                 RETURNING instruction_id, kind, payload",
            )
            .storage()?
            .query_row(
                params![consumer, account.as_str(), sequence as i64],
                |row| {
                    Ok(InboxMessage {
                        instruction_id: row.get(0)?,
                        account: account.clone(),
                        sequence,
                        kind: parse_kind("inbox_held.kind", row.get(1)?)?,
                        payload: row.get(2)?,
                    })
                },
            )
            .optional()
            .storage()
    }

    async fn record_exception(&mut self, exception: &NewException) -> outbox_core::Result<bool> {
        insert_exception(self.conn, exception)
    }

    async fn held_gaps(&mut self, consumer: &str) -> outbox_core::Result<Vec<HeldGap>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT h.account, coalesce(a.last_applied, 0), h.sequence, h.held_at
                 FROM inbox_held h
                 LEFT JOIN inbox_accounts a ON a.consumer = h.consumer AND a.account = h.account
                 WHERE h.consumer = ?1
                   AND h.sequence = (SELECT min(sequence) FROM inbox_held m WHERE m.consumer = h.consumer AND m.account = h.account)
                 ORDER BY h.account",
            )
            .storage()?;
        let rows = stmt
            .query_map([consumer], |row| {
                let account: String = row.get(0)?;
                Ok(HeldGap {
                    account: Account::parse(&account)
                        .map_err(|e| corrupt("inbox_held.account", e))?,
                    last_applied: row.get::<_, i64>(1)? as u64,
                    lowest_held: row.get::<_, i64>(2)? as u64,
                    held_at: time::from_micros(row.get(3)?),
                })
            })
            .storage()?;
        rows.collect::<rusqlite::Result<Vec<_>>>().storage()
    }
}
