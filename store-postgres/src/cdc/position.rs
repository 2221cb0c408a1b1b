//! The CDC relay's durable position: `Position::Log { lsn, row }` in the cursor table
//! (or `Position::Snapshot` while it catches up, see `catch_up`), and the LSN text
//! form PostgreSQL uses.
//!
//! `lsn` is a commit LSN (the start of the commit record, as pgoutput's Begin and
//! Commit report it) and `row` the outbox row inside that commit. One more form marks
//! a point *between* commits: `row == BETWEEN_COMMITS`, written when the relay is
//! caught up and moves its slot past WAL that held no outbox change.

use outbox_core::{Error, ErrorKind, Position, Result};
use sqlx::{AssertSqlSafe, PgPool, Row};

use super::error;
use crate::position::{parse_xid8, xid8_text};

/// The `row` of a position that precedes every row of the commit at its LSN.
pub const BETWEEN_COMMITS: i64 = i64::MIN;

/// Parses PostgreSQL's `X/Y` LSN text.
pub fn parse_lsn(text: &str) -> Result<u64> {
    pgwire_replication::Lsn::parse(text)
        .map(|lsn| lsn.0)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("{e}")))
}

/// Formats an LSN the way PostgreSQL prints it (`16/B374D848`).
pub fn format_lsn(lsn: u64) -> String {
    pgwire_replication::Lsn(lsn).to_string()
}

/// The `(lsn, row)` of a streamed position; any other kind is refused.
pub(crate) fn log_parts(position: Position) -> Result<(u64, i64)> {
    match position {
        Position::Log { lsn, row } => Ok((lsn, row)),
        other => Err(Error::invalid(
            "position",
            format!("expected a log position (streamed by the CDC relay), got {other}"),
        )),
    }
}

/// A position the CDC relay never hands out.
pub(crate) fn not_ours(position: Position) -> Error {
    Error::invalid(
        "position",
        format!(
            "the CDC relay handles log positions and, while catching up, snapshot positions; got {position}"
        ),
    )
}

/// Reads and writes one relay's row of the cursor table.
#[derive(Debug, Clone)]
pub(crate) struct CursorTable {
    /// `"schema"."relay_cursors"`, quoted.
    table: String,
}

impl CursorTable {
    pub(crate) fn new(schema: &str, table: &str) -> Self {
        Self {
            table: format!("{}.{}", quote_ident(schema), quote_ident(table)),
        }
    }

    /// The quoted, schema-qualified table name.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The saved position of `relay`: `Position::Log` once the relay streams,
    /// `Position::Snapshot` while it catches up (or as a polling relay of the same name
    /// left it, which the catch-up resumes after).
    pub(crate) async fn load(&self, pool: &PgPool, relay: &str) -> Result<Option<Position>> {
        let sql = format!(
            "SELECT position, txid::text AS txid, lsn::text AS lsn FROM {} WHERE relay = $1",
            self.table
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(relay)
            .fetch_optional(pool)
            .await
            .map_err(|e| error::sql("loading the CDC cursor", e).with("relay", relay))?;
        let Some(row) = row else { return Ok(None) };
        let read = |e| error::sql("reading the CDC cursor", e);
        let position: i64 = row.try_get("position").map_err(read)?;
        let txid: Option<String> = row.try_get("txid").map_err(read)?;
        let lsn: Option<String> = row.try_get("lsn").map_err(read)?;
        match (lsn, txid) {
            (Some(lsn), _) => Ok(Some(Position::Log {
                lsn: parse_lsn(&lsn)?,
                row: position,
            })),
            (None, Some(txid)) => Ok(Some(Position::Snapshot {
                txid: parse_xid8("relay_cursors.txid", &txid)?,
                row: position,
            })),
            (None, None) => Err(Error::new(
                ErrorKind::Internal,
                format!("the cursor of relay {relay:?} has neither an lsn nor a txid"),
            )
            .with("relay", relay)),
        }
    }

    /// Saves `position` for `relay` unless the stored one is already further. Returns
    /// whether the stored cursor now equals `position`.
    ///
    /// The guard keeps a stale instance from moving a cursor backwards: the slot was
    /// confirmed up to the newer cursor, and a cursor behind the slot reads as lost
    /// events on the next start. A catch-up (snapshot) position never replaces an LSN,
    /// which sorts after every snapshot position; an LSN replaces a snapshot position.
    pub(crate) async fn save(
        &self,
        pool: &PgPool,
        relay: &str,
        position: Position,
    ) -> Result<bool> {
        let query = match position {
            Position::Log { lsn, row } => sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {table} AS c (relay, position, txid, lsn, updated_at) \
                 VALUES ($1, $2, NULL, $3::text::pg_lsn, now()) \
                 ON CONFLICT (relay) DO UPDATE \
                   SET position = EXCLUDED.position, txid = NULL, lsn = EXCLUDED.lsn, updated_at = now() \
                   WHERE c.lsn IS NULL OR (c.lsn, c.position) <= (EXCLUDED.lsn, EXCLUDED.position)",
                table = self.table
            )))
            .bind(relay)
            .bind(row)
            .bind(format_lsn(lsn)),
            Position::Snapshot { txid, row } => sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {table} AS c (relay, position, txid, lsn, updated_at) \
                 VALUES ($1, $2, $3::text::xid8, NULL, now()) \
                 ON CONFLICT (relay) DO UPDATE \
                   SET position = EXCLUDED.position, txid = EXCLUDED.txid, updated_at = now() \
                   WHERE c.lsn IS NULL AND (c.txid, c.position) <= (EXCLUDED.txid, EXCLUDED.position)",
                table = self.table
            )))
            .bind(relay)
            .bind(row)
            .bind(xid8_text(txid)),
            other => return Err(not_ours(other)),
        };
        let done = query.execute(pool).await.map_err(|e| {
            error::sql("saving the CDC cursor", e)
                .with("relay", relay)
                .with("position", position)
        })?;
        Ok(done.rows_affected() == 1)
    }
}

/// Quotes an SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text_round_trips() {
        for text in ["0/0", "0/16B6C50", "16/B374D848"] {
            assert_eq!(format_lsn(parse_lsn(text).unwrap()), text);
        }
        assert_eq!(parse_lsn("1/0").unwrap(), 1 << 32);
        assert!(parse_lsn("nope").is_err());
    }

    #[test]
    fn between_commits_sorts_before_every_row_of_that_commit() {
        let between = Position::Log {
            lsn: 100,
            row: BETWEEN_COMMITS,
        };
        assert!(between < Position::Log { lsn: 100, row: 1 });
        assert!(between < Position::Log { lsn: 100, row: -5 });
        assert!(between > Position::Log { lsn: 99, row: 7 });
        assert!(log_parts(Position::Row(3)).is_err());
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
