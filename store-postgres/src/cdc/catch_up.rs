//! The CDC relay's first start: everything committed before its slot could stream it
//! is read through the commit-order-safe `(txid, position)` reader first, then the slot
//! takes over without sending anything twice.
//!
//! A slot streams only the transactions that commit after its consistent point. Right
//! after the slot exists, the relay reads `X = pg_snapshot_xmax(pg_current_snapshot())`
//! and records it (the *handover*, a `relay_cursors` row named `<relay>@cdc-handover`:
//! `txid` = X, `lsn` = the slot's confirmed point), through the store's cursor table,
//! once: the first handover recorded stands for good. Every transaction that committed
//! before that point has an xid below X, and so has every row it wrote (enqueue raises
//! a row's txid only to an earlier committed one). Any X read after the slot exists
//! will do: a larger one only moves more rows from the stream to the catch-up.
//!
//! - **Catch-up**: rows with `txid < X` after the relay's cursor (a polling relay's
//!   cursor of the same name, or nothing), in `(txid, position)` order below
//!   `pg_snapshot_xmin`, exactly as the polling reader reads them, as
//!   `PgPosition::Snapshot`. It ends once `pg_snapshot_xmin ≥ X` (no transaction below X
//!   can still commit) and no such row is left.
//! - **Stream**: from the handover's LSN; a streamed row whose txid column is below X
//!   was already delivered by the catch-up and is skipped. A row at or above X belongs
//!   to a transaction that took its xid after X was read (or follows one on its account),
//!   so it committed after the slot's start and is streamed.
//!
//! Per account this keeps sequence order: an account's txids never decrease along its
//! sequence, so all its rows below X come before all its rows at or above X. The
//! handover row and the catch-up's polling-style cursor are durable, so a relay killed
//! mid-catch-up resumes after its cursor with the same X.

use outbox_core::{Account, Error, ErrorKind, EventId, OutboxEvent, Payload, Position, Result};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgPool, Row};
use uuid::Uuid;

use super::config::CdcConfig;
use super::error;
use super::position::{BETWEEN_COMMITS, quote_ident};
use crate::cursors::{Boundary, CursorTable};
use crate::position::{PgPosition, parse_xid8, snapshot_after, xid8_text};

/// Where the slot takes over from the catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handover {
    /// X: `pg_snapshot_xmax` read once the slot existed. Rows below it are the
    /// catch-up's; rows at or above it the stream's.
    pub below_txid: u64,
    /// The slot's confirmed point when X was read: streaming starts here.
    pub slot_start: u64,
}

impl Handover {
    /// Where streaming starts while no LSN cursor is saved.
    pub(crate) fn stream_start(self) -> Position {
        PgPosition::Log {
            lsn: self.slot_start,
            row: BETWEEN_COMMITS,
        }
        .encode()
    }

    /// Whether a row with this txid column was (or will be) delivered by the catch-up.
    pub(crate) fn caught_up(self, txid: u64) -> bool {
        txid < self.below_txid
    }
}

/// The cursor-table key of `relay`'s handover row.
pub(crate) fn key(relay: &str) -> String {
    format!("{relay}@cdc-handover")
}

/// The handover of `relay`, if its CDC relay ever started under this design.
pub(crate) async fn load(
    pool: &PgPool,
    cursors: &CursorTable,
    relay: &str,
) -> Result<Option<Handover>> {
    let boundary = cursors.load_boundary(pool, &key(relay)).await?;
    Ok(boundary.map(|b| Handover {
        below_txid: b.txid,
        slot_start: b.lsn,
    }))
}

/// Reads X now that the slot confirmed at `slot_start` exists, and records the
/// handover. Another instance's handover, recorded first, wins (it is as valid).
pub(crate) async fn begin(
    pool: &PgPool,
    cursors: &CursorTable,
    relay: &str,
    slot_start: u64,
) -> Result<Handover> {
    let below: String = sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
        .fetch_one(pool)
        .await
        .map_err(|e| error::sql("reading the snapshot horizon", e))?;
    let boundary = Boundary {
        txid: parse_xid8("pg_snapshot_xmax", &below)?,
        lsn: slot_start,
    };
    let stands = cursors.record_boundary(pool, &key(relay), boundary).await?;
    Ok(Handover {
        below_txid: stands.txid,
        slot_start: stands.lsn,
    })
}

/// The commit-order-safe reader over the rows below the handover's X.
#[derive(Debug)]
pub(crate) struct CatchUp {
    /// `"schema"."outbox_events"`, quoted.
    table: String,
    below_txid: u64,
    /// The last position returned (or the saved cursor it resumes after).
    after: Option<Position>,
}

impl CatchUp {
    pub(crate) fn new(config: &CdcConfig, handover: Handover, after: Option<Position>) -> Self {
        Self {
            table: format!(
                "{}.{}",
                quote_ident(&config.schema),
                quote_ident(&config.table)
            ),
            below_txid: handover.below_txid,
            after,
        }
    }

    /// Up to `limit` events after the last returned one; `None` once the catch-up is
    /// complete. An empty batch means rows below X may still commit (a transaction
    /// that began before the slot is still open): call again later.
    pub(crate) async fn next(
        &mut self,
        pool: &PgPool,
        limit: usize,
    ) -> Result<Option<Vec<OutboxEvent>>> {
        // An empty read must mean "nothing left", never "nothing asked for".
        if limit == 0 {
            return Ok(Some(Vec::new()));
        }
        let batch = self.read(pool, limit).await?;
        if !batch.is_empty() {
            return Ok(Some(batch));
        }
        let settled: bool =
            sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::text::xid8")
                .bind(xid8_text(self.below_txid))
                .fetch_one(pool)
                .await
                .map_err(|e| error::sql("reading the snapshot horizon", e))?;
        if !settled {
            return Ok(Some(Vec::new()));
        }
        // Rows may have become readable between the two statements: one more read,
        // now that no transaction below X can commit any more.
        let batch = self.read(pool, limit).await?;
        Ok((!batch.is_empty()).then_some(batch))
    }

    async fn read(&mut self, pool: &PgPool, limit: usize) -> Result<Vec<OutboxEvent>> {
        let (txid, row) = snapshot_after(self.after)?;
        // The polling reader's query (see the crate README), bounded by X.
        let sql = format!(
            "SELECT e.position, e.event_id, e.account, e.sequence, e.payload, e.created_at, \
                    e.txid::text AS txid_text \
             FROM {} AS e \
             WHERE (e.txid, e.position) > ($1::text::xid8, $2) \
               AND e.txid < $3::text::xid8 \
               AND e.txid < pg_snapshot_xmin(pg_current_snapshot()) \
             ORDER BY e.txid, e.position \
             LIMIT $4",
            self.table
        );
        let failed = |e| error::sql("reading the outbox for the CDC catch-up", e);
        // Planned with sorting priced out, as the polling relay's `outbox_read_committed`
        // is: the planner estimates the row comparison from its leading column alone,
        // so a backlog that shares one txid (a payout batch) looks like a few rows and
        // would be read whole and sorted on every batch. The indexes give the order.
        // The table is configurable here, so the setting is made for this transaction
        // rather than in a function fixed to one table.
        let mut tx = pool.begin().await.map_err(failed)?;
        sqlx::query("SET LOCAL enable_sort = off")
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(xid8_text(txid))
            .bind(row)
            .bind(xid8_text(self.below_txid))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        let events = rows.iter().map(event).collect::<Result<Vec<_>>>()?;
        if let Some(last) = events.last() {
            self.after = Some(last.position);
        }
        Ok(events)
    }
}

fn event(row: &PgRow) -> Result<OutboxEvent> {
    let txid: String = get(row, "txid_text")?;
    let position: i64 = get(row, "position")?;
    let sequence: i64 = get(row, "sequence")?;
    let account: String = get(row, "account")?;
    Ok(OutboxEvent {
        position: PgPosition::Snapshot {
            txid: parse_xid8("outbox_events.txid", &txid)?,
            row: position,
        }
        .encode(),
        event_id: EventId::from_uuid(get::<Uuid>(row, "event_id")?)
            .map_err(|e| corrupt("event_id", e))?,
        account: Account::parse(&account).map_err(|e| corrupt("account", e))?,
        sequence: u64::try_from(sequence)
            .map_err(|_| corrupt("sequence", format!("negative value {sequence}")))?,
        payload: Payload::from_stored(get(row, "payload")?),
        created_at: get(row, "created_at")?,
    })
}

fn get<'r, T>(row: &'r PgRow, column: &str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column).map_err(|e| corrupt(column, e))
}

fn corrupt(column: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("outbox_events.{column}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catch_up_position_sorts_before_the_stream() {
        let handover = Handover {
            below_txid: 1_000,
            slot_start: 0x1_0000_0000,
        };
        let last_snapshot = PgPosition::Snapshot {
            txid: u64::MAX,
            row: i64::MAX,
        }
        .encode();
        assert!(last_snapshot < handover.stream_start());
        assert!(
            handover.stream_start()
                < PgPosition::Log {
                    lsn: 0x1_0000_0000,
                    row: 1
                }
                .encode()
        );
        assert!(handover.caught_up(999));
        assert!(!handover.caught_up(1_000));
    }
}
