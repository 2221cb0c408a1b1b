//! The CDC relay's positions: `PgPosition::Log { lsn, row }` once it streams (or
//! `PgPosition::Snapshot` while it catches up, see `catch_up`), and the LSN text form
//! PostgreSQL uses. They are saved through the store's cursor table
//! (`crate::cursors`), under the store's cursor rule.
//!
//! `lsn` is a commit LSN (the start of the commit record, as pgoutput's Begin and
//! Commit report it) and `row` the outbox row inside that commit. One more form marks
//! a point *between* commits: `row == BETWEEN_COMMITS`, written when the relay is
//! caught up and moves its slot past WAL that held no outbox change.

use outbox_core::{Error, ErrorKind, Position, Result};

pub(crate) use crate::cursors::quote_ident;
use crate::position::PgPosition;

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
    match PgPosition::decode(&position) {
        Ok(PgPosition::Log { lsn, row }) => Ok((lsn, row)),
        _ => Err(Error::invalid(
            "position",
            format!("expected a log position (streamed by the CDC relay), got {position}"),
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
        let log = |lsn, row| PgPosition::Log { lsn, row }.encode();
        let between = log(100, BETWEEN_COMMITS);
        assert!(between < log(100, 1));
        assert!(between < log(100, -5));
        assert!(between > log(99, 7));
        let snapshot = PgPosition::Snapshot { txid: 3, row: 1 }.encode();
        assert!(log_parts(snapshot).is_err());
    }
}
