//! `PgAuditReader`: read-only lookups of one event across the tables a PostgreSQL
//! schema holds — the outbox row, its delivery records, the fan-out log, the
//! consumer's inbox and the exceptions — for `outbox audit`.
//!
//! It connects without migrating and only reads: an audit pointed at a wrong schema
//! fails on the missing tables instead of creating them. Lookups by instruction id in
//! `fanout_messages`, `fanout_dead_letters` and `inbox_held` have no index to use and
//! scan those tables; the others use the tables' keys and indexes.

use outbox_core::reconcile::sequences::AppliedMarker;
use outbox_core::{
    Account, DeadLetter, DeliveryRecord, EventId, Exception, HeldMessage, MessageKind, OutboxEvent,
    StoredMessage,
};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use crate::config::PgConfig;
use crate::connection::connect;
use crate::error::PgResultExt;
use crate::exceptions::{exception_from_row, select_exceptions};
use crate::fanout::{corrupt, message_from_row, u64_column};
use crate::fanout_dead_letters::letter_from_row;
use crate::reconcile::sequences::marker_from_row;
use crate::store::{delivery_from_row, event_from_row};

/// Read-only lookups on an existing outbox, fan-out or consumer schema.
#[derive(Debug, Clone)]
pub struct PgAuditReader {
    pool: PgPool,
}

impl PgAuditReader {
    /// Connects to `config`'s database and schema; runs no migration.
    ///
    /// # Errors
    /// `InvalidInput` for a bad URL or schema name; storage errors (transient when the
    /// server cannot be reached).
    pub async fn open(config: &PgConfig) -> outbox_core::Result<Self> {
        let pool = connect(config).await?;
        crate::connection::require_current_schema(&pool).await?;
        Ok(Self { pool })
    }

    /// The pool the lookups run on.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The outbox row of `event_id`, if this outbox holds it.
    ///
    /// # Errors
    /// Storage errors (a schema without the outbox tables among them).
    pub async fn event(&self, event_id: EventId) -> outbox_core::Result<Option<OutboxEvent>> {
        let row = sqlx::query(
            "SELECT position, event_id, account, sequence, payload, created_at, txid::text AS txid_text
             FROM outbox_events WHERE event_id = $1",
        )
        .bind(event_id.as_uuid())
        .fetch_optional(&self.pool)
        .await
        .storage()?;
        row.as_ref().map(event_from_row).transpose()
    }

    /// Every delivery record of `event_id`, oldest first.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn deliveries(&self, event_id: EventId) -> outbox_core::Result<Vec<DeliveryRecord>> {
        let rows = sqlx::query(
            "SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
             FROM outbox_deliveries WHERE event_id = $1 ORDER BY id",
        )
        .bind(event_id.as_uuid())
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter().map(delivery_from_row).collect()
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
        let rows = sqlx::query(select_exceptions!(
            "WHERE (x.account = $1 AND x.sequence = $2) OR x.event_id = $3
                OR strpos(x.detail, $3) > 0
             ORDER BY x.id"
        ))
        .bind(account.as_str())
        .bind(i64::try_from(sequence).unwrap_or(i64::MAX))
        .bind(text)
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter().map(exception_from_row).collect()
    }

    /// The fan-out messages carrying `instruction_id`, by position.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn fanout_messages(
        &self,
        instruction_id: &str,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        let rows = sqlx::query(
            "SELECT position, instruction_id, account, sequence, kind, ledger, ledger_tx_id,
                    traceparent, tracestate, payload, received_at
             FROM fanout_messages WHERE instruction_id = $1 ORDER BY position",
        )
        .bind(instruction_id)
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter().map(message_from_row).collect()
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
        let rows = sqlx::query(
            "SELECT sequence, position FROM fanout_messages
             WHERE account = $1 AND sequence < $2 AND position > $3
             ORDER BY sequence, position LIMIT 10",
        )
        .bind(account.as_str())
        .bind(i64::try_from(sequence).unwrap_or(i64::MAX))
        .bind(i64::try_from(position).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter()
            .map(|row| {
                Ok((
                    u64_column("fanout_messages.sequence", row.get("sequence"))?,
                    u64_column("fanout_messages.position", row.get("position"))?,
                ))
            })
            .collect()
    }

    /// Every fan-out cursor (`fanout_cursors`: destinations, replay progress, the
    /// ledger-log checkpoint) with its position, by name.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn fanout_cursors(&self) -> outbox_core::Result<Vec<(String, u64)>> {
        let rows = sqlx::query("SELECT transport, position FROM fanout_cursors ORDER BY transport")
            .fetch_all(&self.pool)
            .await
            .storage()?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.get("transport"),
                    u64_column("fanout_cursors.position", row.get("position"))?,
                ))
            })
            .collect()
    }

    /// The dead letters of `instruction_id` at every destination, oldest first.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn dead_letters(&self, instruction_id: &str) -> outbox_core::Result<Vec<DeadLetter>> {
        let rows = sqlx::query(
            "SELECT id, destination, position, account, sequence, instruction_id, reason, error,
                    dead_lettered_at
             FROM fanout_dead_letters WHERE instruction_id = $1 ORDER BY id",
        )
        .bind(instruction_id)
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter().map(letter_from_row).collect()
    }

    /// Every consumer's processed marker of `instruction_id`.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn inbox_markers(
        &self,
        instruction_id: &str,
    ) -> outbox_core::Result<Vec<AppliedMarker>> {
        // Through the primary key (consumer, instruction_id), one consumer at a time.
        let rows = sqlx::query(
            "SELECT consumer, account, sequence, instruction_id, kind, applied_at FROM inbox_messages
             WHERE consumer IN (SELECT DISTINCT consumer FROM inbox_accounts)
               AND instruction_id = $1
             ORDER BY applied_at, consumer",
        )
        .bind(instruction_id)
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter().map(marker_from_row).collect()
    }

    /// Every consumer's gap-queue entry for `instruction_id`.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn held(&self, instruction_id: &str) -> outbox_core::Result<Vec<HeldMessage>> {
        let rows = sqlx::query(
            "SELECT consumer, account, sequence, kind, held_at FROM inbox_held
             WHERE instruction_id = $1 ORDER BY held_at, consumer",
        )
        .bind(instruction_id)
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter()
            .map(|row| {
                Ok(HeldMessage {
                    consumer: row.get("consumer"),
                    account: account_column(row, "inbox_held.account")?,
                    sequence: u64_column("inbox_held.sequence", row.get("sequence"))?,
                    kind: kind_column(row, "inbox_held.kind")?,
                    held_at: row.get("held_at"),
                })
            })
            .collect()
    }
}

fn account_column(row: &PgRow, column: &str) -> outbox_core::Result<Account> {
    let text: String = row.get("account");
    Account::parse(&text).map_err(|e| corrupt(column, e))
}

fn kind_column(row: &PgRow, column: &str) -> outbox_core::Result<MessageKind> {
    let text: String = row.get("kind");
    MessageKind::parse(&text).ok_or_else(|| corrupt(column, &text))
}
