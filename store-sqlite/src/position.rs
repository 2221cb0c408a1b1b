//! The SQLite store's positions: `outbox_events.position`, the rowid. SQLite has one
//! writer at a time and AUTOINCREMENT never reuses a rowid, so rowid order is commit
//! order and the row alone is a resumable position.
//!
//! Encoded as the row's 8 order-preserving bytes ([`PositionEncoder::i64`]); the
//! cursor table keeps the plain integer (`relay_cursors.position`).

use std::fmt;

use outbox_core::{Error, ErrorKind, Position, PositionDecoder, PositionEncoder, Result};

/// The position of outbox row `row`.
pub fn row_position(row: i64) -> Position {
    PositionEncoder::new().i64(row).finish(render)
}

/// The outbox row of a position this store made.
///
/// # Errors
/// `Internal` for a position of another store.
pub fn position_row(position: &Position) -> Result<i64> {
    decode(position.as_bytes()).ok_or_else(|| {
        Error::new(
            ErrorKind::Internal,
            format!("{position} is not a SQLite row position"),
        )
    })
}

fn decode(bytes: &[u8]) -> Option<i64> {
    let mut d = PositionDecoder::from_bytes(bytes);
    let row = d.i64()?;
    d.end()?;
    Some(row)
}

fn render(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match decode(bytes) {
        Some(row) => write!(f, "row {row}"),
        None => write!(f, "not a SQLite position ({bytes:02x?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_in_row_order() {
        let rows = [0, 1, 2, 255, 256, i64::MAX];
        for pair in rows.windows(2) {
            assert!(row_position(pair[0]) < row_position(pair[1]), "{pair:?}");
        }
        for row in rows {
            assert_eq!(position_row(&row_position(row)).unwrap(), row);
        }
        assert_eq!(row_position(42).to_string(), "row 42");
        let foreign = Position::from_bytes(&[1, 2, 3]).unwrap();
        let err = position_row(&foreign).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Internal, "{err}");
    }
}
