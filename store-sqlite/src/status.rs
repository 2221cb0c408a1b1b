//! [`StatusReader`] on [`SqliteAuditReader`]: the read-only views `outbox status` and
//! the metrics sampler read (see `outbox_core::status`).
//!
//! The relay backlog counts rows after the cursor's position (the primary key); the
//! failing events read the delivery records of outcome `failed`, which has no index
//! of its own and scans that table — `outbox status` reads them, the sampler does not.

use async_trait::async_trait;
use outbox_core::status::{
    Backlog, DestinationStatus, FailingEvent, GapStatus, RelayStatus, StatusReader,
    is_destination_cursor, is_partition_cursor, is_relay_cursor,
};
use outbox_core::{Account, EventId, Exception};
use rusqlite::{OptionalExtension, Row};

use crate::audit::SqliteAuditReader;
use crate::exceptions::{exception_from_row, select_exceptions};
use crate::fanout::{corrupt, unsigned};
use crate::time;

fn backlog(pending: i64, oldest: Option<i64>) -> rusqlite::Result<Backlog> {
    Ok(Backlog {
        pending: unsigned("count", pending)?,
        oldest_at: oldest.map(time::from_micros),
    })
}

fn account(column: &str, text: &str) -> rusqlite::Result<Account> {
    Account::parse(text).map_err(|e| corrupt(column, e))
}

fn failing_from_row(row: &Row<'_>) -> rusqlite::Result<FailingEvent> {
    let event_id: String = row.get(2)?;
    Ok(FailingEvent {
        account: account("outbox_events.account", &row.get::<_, String>(0)?)?,
        sequence: unsigned("outbox_events.sequence", row.get(1)?)?,
        event_id: EventId::parse(&event_id).map_err(|e| corrupt("outbox_events.event_id", e))?,
        attempts: unsigned("attempts", row.get(3)?)?,
        error_code: row.get(4)?,
        detail: row.get(5)?,
        last_attempt_at: time::from_micros(row.get(6)?),
    })
}

fn gap_from_row(row: &Row<'_>) -> rusqlite::Result<GapStatus> {
    Ok(GapStatus {
        consumer: row.get(0)?,
        account: account("inbox_held.account", &row.get::<_, String>(1)?)?,
        last_applied: unsigned("inbox_accounts.last_applied", row.get(2)?)?,
        lowest_held: unsigned("inbox_held.sequence", row.get(3)?)?,
        held: unsigned("held", row.get(4)?)?,
        oldest_held_at: time::from_micros(row.get(5)?),
    })
}

#[async_trait]
impl StatusReader for SqliteAuditReader {
    async fn relay_names(&self) -> outbox_core::Result<Vec<String>> {
        let names: Vec<String> = self
            .run(|conn| {
                let mut stmt = conn.prepare("SELECT relay FROM relay_cursors ORDER BY relay")?;
                let rows = stmt.query_map([], |row| row.get(0))?;
                rows.collect()
            })
            .await?;
        Ok(names.into_iter().filter(|n| is_relay_cursor(n)).collect())
    }

    async fn relay(&self, relay: &str) -> outbox_core::Result<RelayStatus> {
        let name = relay.to_owned();
        let partition = is_partition_cursor(relay);
        self.run(move |conn| {
            let cursor: Option<(i64, i64)> = conn
                .query_row(
                    "SELECT position, updated_at FROM relay_cursors WHERE relay = ?1",
                    [&name],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            let backlog = if partition {
                None
            } else {
                let (pending, oldest): (i64, Option<i64>) = conn.query_row(
                    "SELECT count(*), min(created_at) FROM outbox_events WHERE position > ?1",
                    [cursor.map_or(0, |(position, _)| position)],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )?;
                Some(backlog(pending, oldest)?)
            };
            Ok(RelayStatus {
                relay: name,
                cursor_updated_at: cursor.map(|(_, at)| time::from_micros(at)),
                backlog,
            })
        })
        .await
    }

    async fn failing_events(&self) -> outbox_core::Result<Vec<FailingEvent>> {
        self.run(|conn| {
            let mut stmt = conn.prepare(
                "SELECT e.account, e.sequence, e.event_id, count(*),
                        (SELECT l.error_code FROM outbox_deliveries l
                         WHERE l.event_id = e.event_id ORDER BY l.id DESC LIMIT 1),
                        (SELECT l.detail FROM outbox_deliveries l
                         WHERE l.event_id = e.event_id ORDER BY l.id DESC LIMIT 1),
                        max(d.at)
                 FROM outbox_deliveries d JOIN outbox_events e ON e.event_id = d.event_id
                 WHERE d.outcome = 'failed'
                   AND NOT EXISTS (SELECT 1 FROM outbox_deliveries t
                                   WHERE t.event_id = d.event_id AND t.outcome <> 'failed')
                 GROUP BY e.event_id
                 ORDER BY e.account, e.sequence",
            )?;
            let rows = stmt.query_map([], failing_from_row)?;
            rows.collect()
        })
        .await
    }

    async fn destination_names(&self) -> outbox_core::Result<Vec<String>> {
        let names: Vec<String> = self
            .run(|conn| {
                let mut stmt =
                    conn.prepare("SELECT transport FROM fanout_cursors ORDER BY transport")?;
                let rows = stmt.query_map([], |row| row.get(0))?;
                rows.collect()
            })
            .await?;
        Ok(names
            .into_iter()
            .filter(|n| is_destination_cursor(n))
            .collect())
    }

    async fn destination(&self, destination: &str) -> outbox_core::Result<DestinationStatus> {
        let name = destination.to_owned();
        self.run(move |conn| {
            let cursor: Option<(i64, i64)> = conn
                .query_row(
                    "SELECT position, updated_at FROM fanout_cursors WHERE transport = ?1",
                    [&name],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            let position = cursor.map_or(0, |(position, _)| position);
            let (pending, oldest): (i64, Option<i64>) = conn.query_row(
                "SELECT count(*), min(received_at) FROM fanout_messages WHERE position > ?1",
                [position],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            let refused: i64 = conn.query_row(
                "SELECT count(*) FROM fanout_dead_letters
                 WHERE destination = ?1 AND reason = 'refused'",
                [&name],
                |row| row.get(0),
            )?;
            Ok(DestinationStatus {
                destination: name,
                cursor: unsigned("fanout_cursors.position", position)?,
                cursor_updated_at: cursor.map(|(_, at)| time::from_micros(at)),
                backlog: backlog(pending, oldest)?,
                refused: unsigned("refused", refused)?,
            })
        })
        .await
    }

    async fn gaps(&self) -> outbox_core::Result<Vec<GapStatus>> {
        self.run(|conn| {
            let mut stmt = conn.prepare(
                "SELECT h.consumer, h.account,
                        coalesce((SELECT a.last_applied FROM inbox_accounts a
                                  WHERE a.consumer = h.consumer AND a.account = h.account), 0),
                        min(h.sequence), count(*), min(h.held_at)
                 FROM inbox_held h
                 GROUP BY h.consumer, h.account
                 ORDER BY h.consumer, h.account",
            )?;
            let rows = stmt.query_map([], gap_from_row)?;
            rows.collect()
        })
        .await
    }

    async fn open_exceptions(&self) -> outbox_core::Result<Vec<Exception>> {
        self.run(|conn| {
            let mut stmt = conn.prepare(select_exceptions!("WHERE r.id IS NULL ORDER BY x.id"))?;
            let rows = stmt.query_map([], exception_from_row)?;
            rows.collect()
        })
        .await
    }
}
