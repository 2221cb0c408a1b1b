//! `CursorTable`: the one owner of `relay_cursors` rows. Every relay-side cursor write
//! of this crate goes through it: `PgStore::save_cursor` (a polling relay's progress,
//! the dispatcher's "@attempted" horizon, a fleet's partition cursors and the fleet
//! layout's re-partition) and the CDC relay (its cursor, its first-start handover).
//!
//! The rule is the core's (`outbox_core::Store`, "Cursors"): a cursor moves only
//! forward in [`PgPosition`] order, is durable when the statement returns, and on a
//! fleet partition's view moves only while the partition's advisory lock is held.
//!
//! A row keeps a position in the table's columns (the layout is unchanged since the
//! first migration): a snapshot position as `txid` + `position` with `lsn` NULL, a log
//! position as `lsn` + `position` with `txid` NULL. A boundary (the CDC handover) has
//! both `txid` and `lsn` and `position` 0; it is written once and never moves.
//!
//! One exception to "forward only": [`CursorTable::rewind_log`] puts a snapshot
//! position in place of a log one, for a relay leaving CDC for polling
//! (`crate::cdc::leave`, which says why the rewound position is safe).

use std::sync::Arc;

use outbox_core::{Error, ErrorKind, Result};
use sqlx::{AssertSqlSafe, PgExecutor, PgPool, Row};

use crate::error::map_error;
use crate::fleet::Fence;
use crate::position::{PgPosition, lsn_text, parse_lsn, parse_xid8, xid8_text};

/// The cursor table of one schema, with its statements.
#[derive(Debug, Clone)]
pub(crate) struct CursorTable {
    /// The table as written in SQL: bare (found on the search path) or quoted and
    /// schema-qualified.
    table: Arc<str>,
    load: Arc<str>,
    save: Arc<str>,
    record_boundary: Arc<str>,
    rewind_log: Arc<str>,
    forget_boundary: Arc<str>,
}

/// A point recorded once beside the cursors: a txid bound and an LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Boundary {
    pub txid: u64,
    pub lsn: u64,
}

impl CursorTable {
    /// `relay_cursors` as the connections' search path finds it (`PgStore`).
    pub(crate) fn on_search_path() -> Self {
        Self::named("relay_cursors".to_owned())
    }

    /// `"schema"."table"`, for a relay configured with its own (the CDC relay).
    pub(crate) fn qualified(schema: &str, table: &str) -> Self {
        Self::named(format!("{}.{}", quote_ident(schema), quote_ident(table)))
    }

    fn named(table: String) -> Self {
        let load = format!(
            "SELECT position, txid::text AS txid, lsn::text AS lsn FROM {table} WHERE relay = $1"
        );
        // With a fence, the write happens only while the partition's advisory lock is
        // held by the fencing session: checked in the same statement as the write. The
        // ON CONFLICT guard is the PgPosition order: a snapshot position replaces only
        // an earlier snapshot position; a log position replaces any snapshot position
        // (a CDC relay finishing its catch-up) or an earlier log position.
        let save = format!(
            "INSERT INTO {table} AS c (relay, position, txid, lsn, updated_at)
             SELECT $1, $2, $3::text::xid8, $4::text::pg_lsn, clock_timestamp()
             WHERE $5::int4 IS NULL OR EXISTS (
                 SELECT 1 FROM pg_locks
                 WHERE locktype = 'advisory' AND granted AND pid = $5::int4
                   AND classid = $6::int4::oid AND objid = $7::int4::oid AND objsubid = 2)
             ON CONFLICT (relay) DO UPDATE
                SET position = excluded.position, txid = excluded.txid,
                    lsn = excluded.lsn, updated_at = excluded.updated_at
                WHERE CASE WHEN excluded.lsn IS NULL
                           THEN c.lsn IS NULL AND (c.txid, c.position) < (excluded.txid, excluded.position)
                           ELSE c.lsn IS NULL OR (c.lsn, c.position) < (excluded.lsn, excluded.position)
                      END"
        );
        let record_boundary = format!(
            "INSERT INTO {table} (relay, position, txid, lsn, updated_at)
             VALUES ($1, 0, $2::text::xid8, $3::text::pg_lsn, clock_timestamp())
             ON CONFLICT (relay) DO NOTHING"
        );
        // Replaces only a log position (or creates the row): a snapshot position
        // already there is a polling relay's own and stays.
        let rewind_log = format!(
            "INSERT INTO {table} AS c (relay, position, txid, lsn, updated_at)
             VALUES ($1, $2, $3::text::xid8, NULL, clock_timestamp())
             ON CONFLICT (relay) DO UPDATE
                SET position = excluded.position, txid = excluded.txid,
                    lsn = NULL, updated_at = excluded.updated_at
                WHERE c.lsn IS NOT NULL AND c.txid IS NULL"
        );
        let forget_boundary = format!(
            "DELETE FROM {table} WHERE relay = $1 AND txid IS NOT NULL AND lsn IS NOT NULL"
        );
        Self {
            table: table.into(),
            load: load.into(),
            save: save.into(),
            record_boundary: record_boundary.into(),
            rewind_log: rewind_log.into(),
            forget_boundary: forget_boundary.into(),
        }
    }

    /// The saved position of cursor `relay`.
    ///
    /// # Errors
    /// `Internal` when the row is not a cursor (a boundary, or neither column set).
    pub(crate) async fn load(
        &self,
        db: impl PgExecutor<'_>,
        relay: &str,
    ) -> Result<Option<PgPosition>> {
        let Some((row, txid, lsn)) = self.load_row(db, relay).await? else {
            return Ok(None);
        };
        match (txid, lsn) {
            (Some(txid), None) => Ok(Some(PgPosition::Snapshot { txid, row })),
            (None, Some(lsn)) => Ok(Some(PgPosition::Log { lsn, row })),
            _ => Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "{}: row {relay:?} is not a cursor (it needs exactly one of txid and lsn)",
                    self.table
                ),
            )
            .with("relay", relay)),
        }
    }

    /// Saves `position` as cursor `relay` if it is after the saved one (see the
    /// module docs); `fence` is the partition lock a fleet member must still hold.
    ///
    /// # Errors
    /// `Storage` naming the relay when the fence is no longer held (nothing moved);
    /// storage errors (transient for connection trouble and lock contention).
    pub(crate) async fn save(
        &self,
        pool: &PgPool,
        relay: &str,
        position: PgPosition,
        fence: Option<Fence>,
    ) -> Result<()> {
        let (txid, lsn) = match position {
            PgPosition::Snapshot { txid, .. } => (Some(xid8_text(txid)), None),
            PgPosition::Log { lsn, .. } => (None, Some(lsn_text(lsn))),
        };
        let written = sqlx::query(AssertSqlSafe(Arc::clone(&self.save)))
            .bind(relay)
            .bind(position.row())
            .bind(txid)
            .bind(lsn)
            .bind(fence.map(|f| f.holder_pid))
            .bind(fence.map(|f| f.lock_class))
            .bind(fence.map(|f| f.partition as i32))
            .execute(pool)
            .await
            .map_err(|e| map_error(e).with("relay", relay))?;
        match fence {
            // Nothing written: either the fence refused it, or the saved cursor is
            // already at or past `position` (fine). Only the first is an error.
            Some(f) if written.rows_affected() == 0 && !fence_held(pool, f).await? => {
                Err(Error::new(
                    ErrorKind::Storage,
                    format!(
                        "partition {} is no longer owned by this relay: cursor not moved",
                        f.partition
                    ),
                )
                .with("relay", relay))
            }
            _ => Ok(()),
        }
    }

    /// Records `boundary` under `name` unless one is recorded there already, and
    /// returns the one that stands: the first write wins, so two instances racing
    /// through a first start agree on it.
    pub(crate) async fn record_boundary(
        &self,
        pool: &PgPool,
        name: &str,
        boundary: Boundary,
    ) -> Result<Boundary> {
        sqlx::query(AssertSqlSafe(Arc::clone(&self.record_boundary)))
            .bind(name)
            .bind(xid8_text(boundary.txid))
            .bind(lsn_text(boundary.lsn))
            .execute(pool)
            .await
            .map_err(|e| map_error(e).with("relay", name))?;
        self.load_boundary(pool, name).await?.ok_or_else(|| {
            Error::new(
                ErrorKind::Storage,
                format!(
                    "{}: row {name:?} vanished right after it was written",
                    self.table
                ),
            )
            .with("relay", name)
            .transient(None)
        })
    }

    /// The boundary recorded under `name`.
    ///
    /// # Errors
    /// `Internal` when the row lacks its txid or lsn.
    pub(crate) async fn load_boundary(
        &self,
        db: impl PgExecutor<'_>,
        name: &str,
    ) -> Result<Option<Boundary>> {
        let Some((_, txid, lsn)) = self.load_row(db, name).await? else {
            return Ok(None);
        };
        match (txid, lsn) {
            (Some(txid), Some(lsn)) => Ok(Some(Boundary { txid, lsn })),
            _ => Err(Error::new(
                ErrorKind::Internal,
                format!("{}: row {name:?} lacks its txid or lsn", self.table),
            )
            .with("relay", name)),
        }
    }

    /// Puts snapshot position `to` in place of cursor `relay`'s log position, or
    /// creates the cursor at `to`; leaves a snapshot position as it is. Returns whether
    /// it wrote.
    ///
    /// # Errors
    /// `Internal` when `to` is a log position; storage errors.
    pub(crate) async fn rewind_log(
        &self,
        db: impl PgExecutor<'_>,
        relay: &str,
        to: PgPosition,
    ) -> Result<bool> {
        let PgPosition::Snapshot { txid, row } = to else {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("a cursor is rewound to a snapshot position, not {to}"),
            )
            .with("relay", relay));
        };
        let written = sqlx::query(AssertSqlSafe(Arc::clone(&self.rewind_log)))
            .bind(relay)
            .bind(row)
            .bind(xid8_text(txid))
            .execute(db)
            .await
            .map_err(|e| map_error(e).with("relay", relay))?;
        Ok(written.rows_affected() == 1)
    }

    /// Deletes the boundary recorded under `name`, if any.
    pub(crate) async fn forget_boundary(&self, db: impl PgExecutor<'_>, name: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(Arc::clone(&self.forget_boundary)))
            .bind(name)
            .execute(db)
            .await
            .map_err(|e| map_error(e).with("relay", name))?;
        Ok(())
    }

    /// `(position, txid, lsn)` of row `relay`.
    async fn load_row(
        &self,
        db: impl PgExecutor<'_>,
        relay: &str,
    ) -> Result<Option<(i64, Option<u64>, Option<u64>)>> {
        let row = sqlx::query(AssertSqlSafe(Arc::clone(&self.load)))
            .bind(relay)
            .fetch_optional(db)
            .await
            .map_err(|e| map_error(e).with("relay", relay))?;
        let Some(row) = row else { return Ok(None) };
        let txid: Option<String> = row.get("txid");
        let lsn: Option<String> = row.get("lsn");
        let column = |name: &str| format!("{}.{name}", self.table);
        Ok(Some((
            row.get("position"),
            txid.map(|t| parse_xid8(&column("txid"), &t)).transpose()?,
            lsn.map(|l| parse_lsn(&column("lsn"), &l)).transpose()?,
        )))
    }
}

/// Whether the fencing session still holds partition `fence.partition`'s lock.
async fn fence_held(pool: &PgPool, fence: Fence) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND pid = $1
               AND classid = $2::int4::oid AND objid = $3::int4::oid AND objsubid = 2)",
    )
    .bind(fence.holder_pid)
    .bind(fence.lock_class)
    .bind(fence.partition as i32)
    .fetch_one(pool)
    .await
    .map_err(map_error)
}

/// Quotes an SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(
            &*CursorTable::qualified("s", "t\"").table,
            "\"s\".\"t\"\"\""
        );
        assert_eq!(&*CursorTable::on_search_path().table, "relay_cursors");
    }
}
