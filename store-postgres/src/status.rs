//! [`StatusReader`] on [`PgAuditReader`]: the read-only views `outbox status` and the
//! metrics sampler read (see `outbox_core::status`), plus the server's snapshot
//! horizon and a replication slot's retained WAL.
//!
//! A relay backlog counts the rows after the cursor as the polling reader orders
//! them (`(txid, position)`), the rows the horizon still holds back included; after
//! a CDC cursor (an LSN) it falls back to the row position, an approximation, as
//! `PgStore`'s `lag` does.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::status::{
    Backlog, DestinationStatus, FailingEvent, GapStatus, HorizonReading, RelayStatus, StatusReader,
    is_destination_cursor, is_partition_cursor, is_relay_cursor,
};
use outbox_core::{Account, EventId, Exception};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::audit::PgAuditReader;
use crate::error::PgResultExt;
use crate::exceptions::{exception_from_row, select_exceptions};
use crate::fanout::{corrupt, u64_column};

fn backlog(row: &PgRow) -> outbox_core::Result<Backlog> {
    Ok(Backlog {
        pending: u64_column("count", row.get("pending"))?,
        oldest_at: row.get("oldest"),
    })
}

fn account(column: &str, text: &str) -> outbox_core::Result<Account> {
    Account::parse(text).map_err(|e| corrupt(column, e))
}

fn failing_from_row(row: &PgRow) -> outbox_core::Result<FailingEvent> {
    Ok(FailingEvent {
        account: account("outbox_events.account", row.get("account"))?,
        sequence: u64_column("outbox_events.sequence", row.get("sequence"))?,
        event_id: EventId::from_uuid(row.get("event_id"))
            .map_err(|e| corrupt("outbox_events.event_id", e))?,
        attempts: u64_column("attempts", row.get("attempts"))?,
        error_code: row.get("error_code"),
        detail: row.get("detail"),
        last_attempt_at: row.get("last_at"),
    })
}

fn gap_from_row(row: &PgRow) -> outbox_core::Result<GapStatus> {
    Ok(GapStatus {
        consumer: row.get("consumer"),
        account: account("inbox_held.account", row.get("account"))?,
        last_applied: u64_column("inbox_accounts.last_applied", row.get("last_applied"))?,
        lowest_held: u64_column("inbox_held.sequence", row.get("lowest_held"))?,
        held: u64_column("held", row.get("held"))?,
        oldest_held_at: row.get("oldest_held_at"),
    })
}

#[async_trait]
impl StatusReader for PgAuditReader {
    async fn relay_names(&self) -> outbox_core::Result<Vec<String>> {
        let names: Vec<String> =
            sqlx::query_scalar("SELECT relay FROM relay_cursors ORDER BY relay")
                .fetch_all(self.pool())
                .await
                .storage()?;
        Ok(names.into_iter().filter(|n| is_relay_cursor(n)).collect())
    }

    async fn relay(&self, relay: &str) -> outbox_core::Result<RelayStatus> {
        let cursor = sqlx::query(
            "SELECT position, txid::text AS txid, lsn IS NOT NULL AS log, updated_at
             FROM relay_cursors WHERE relay = $1",
        )
        .bind(relay)
        .fetch_optional(self.pool())
        .await
        .storage()?;
        let updated_at: Option<DateTime<Utc>> = cursor.as_ref().map(|row| row.get("updated_at"));
        if is_partition_cursor(relay) {
            return Ok(RelayStatus {
                relay: relay.to_owned(),
                cursor_updated_at: updated_at,
                backlog: None,
            });
        }
        const SELECT: &str =
            "SELECT count(*) AS pending, min(created_at) AS oldest FROM outbox_events";
        let row = match &cursor {
            None => sqlx::query(SELECT).fetch_one(self.pool()).await,
            Some(c) if c.get::<bool, _>("log") => {
                sqlx::query(sqlx::AssertSqlSafe(format!("{SELECT} WHERE position > $1")))
                    .bind(c.get::<i64, _>("position"))
                    .fetch_one(self.pool())
                    .await
            }
            Some(c) => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{SELECT} WHERE (txid, position) > ($1::text::xid8, $2)"
                )))
                .bind(c.get::<Option<String>, _>("txid"))
                .bind(c.get::<i64, _>("position"))
                .fetch_one(self.pool())
                .await
            }
        }
        .storage()?;
        Ok(RelayStatus {
            relay: relay.to_owned(),
            cursor_updated_at: updated_at,
            backlog: Some(backlog(&row)?),
        })
    }

    async fn failing_events(&self) -> outbox_core::Result<Vec<FailingEvent>> {
        let rows = sqlx::query(
            "SELECT e.account, e.sequence, e.event_id, f.attempts, f.last_at,
                    l.error_code, l.detail
             FROM (SELECT d.event_id, count(*) AS attempts, max(d.at) AS last_at,
                          max(d.id) AS last_id
                   FROM outbox_deliveries d
                   WHERE d.outcome = 'failed'
                     AND NOT EXISTS (SELECT 1 FROM outbox_deliveries t
                                     WHERE t.event_id = d.event_id AND t.outcome <> 'failed')
                   GROUP BY d.event_id) f
             JOIN outbox_events e ON e.event_id = f.event_id
             JOIN outbox_deliveries l ON l.event_id = f.event_id AND l.id = f.last_id
             ORDER BY e.account, e.sequence",
        )
        .fetch_all(self.pool())
        .await
        .storage()?;
        rows.iter().map(failing_from_row).collect()
    }

    async fn destination_names(&self) -> outbox_core::Result<Vec<String>> {
        let names: Vec<String> =
            sqlx::query_scalar("SELECT transport FROM fanout_cursors ORDER BY transport")
                .fetch_all(self.pool())
                .await
                .storage()?;
        Ok(names
            .into_iter()
            .filter(|n| is_destination_cursor(n))
            .collect())
    }

    async fn destination(&self, destination: &str) -> outbox_core::Result<DestinationStatus> {
        let row = sqlx::query(
            "SELECT c.position AS cursor, c.updated_at,
                    (SELECT count(*) FROM fanout_messages m
                     WHERE m.position > coalesce(c.position, 0)) AS pending,
                    (SELECT min(m.received_at) FROM fanout_messages m
                     WHERE m.position > coalesce(c.position, 0)) AS oldest,
                    (SELECT count(*) FROM fanout_dead_letters l
                     WHERE l.destination = $1 AND l.reason = 'refused') AS refused
             FROM (SELECT 1) AS one
             LEFT JOIN fanout_cursors c ON c.transport = $1",
        )
        .bind(destination)
        .fetch_one(self.pool())
        .await
        .storage()?;
        Ok(DestinationStatus {
            destination: destination.to_owned(),
            cursor: u64_column(
                "fanout_cursors.position",
                row.get::<Option<i64>, _>("cursor").unwrap_or(0),
            )?,
            cursor_updated_at: row.get("updated_at"),
            backlog: backlog(&row)?,
            refused: u64_column("refused", row.get("refused"))?,
        })
    }

    async fn gaps(&self) -> outbox_core::Result<Vec<GapStatus>> {
        let rows = sqlx::query(
            "SELECT h.consumer, h.account, coalesce(a.last_applied, 0) AS last_applied,
                    min(h.sequence) AS lowest_held, count(*) AS held,
                    min(h.held_at) AS oldest_held_at
             FROM inbox_held h
             LEFT JOIN inbox_accounts a ON a.consumer = h.consumer AND a.account = h.account
             GROUP BY h.consumer, h.account, a.last_applied
             ORDER BY h.consumer, h.account",
        )
        .fetch_all(self.pool())
        .await
        .storage()?;
        rows.iter().map(gap_from_row).collect()
    }

    async fn open_exceptions(&self) -> outbox_core::Result<Vec<Exception>> {
        let rows = sqlx::query(select_exceptions!("WHERE r.id IS NULL ORDER BY x.id"))
            .fetch_all(self.pool())
            .await
            .storage()?;
        rows.iter().map(exception_from_row).collect()
    }

    async fn horizon(&self) -> outbox_core::Result<Option<HorizonReading>> {
        let horizon = crate::horizon::measure(self.pool()).await?;
        Ok(Some(HorizonReading {
            oldest_age: horizon.age(),
            held_back: horizon.held_back,
        }))
    }

    async fn slot_retained_wal_bytes(&self, slot: &str) -> outbox_core::Result<Option<u64>> {
        let retained: Option<i64> = sqlx::query_scalar(
            "SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
             FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(slot)
        .fetch_optional(self.pool())
        .await
        .storage()?;
        Ok(retained.map(|bytes| u64::try_from(bytes).unwrap_or(0)))
    }
}
