//! The memory store's positions: a tag byte and the event's row number.
//!
//! Rows are numbered from 1 in the order events are appended, and the single writer
//! (see `database.rs`) appends them in commit order, so row order is commit order.
//! The tag keeps a position of another store (or of another layout) from being read
//! as a row: it is refused instead.

use std::fmt;

use outbox_core::{Error, ErrorKind, Position, PositionDecoder, PositionEncoder, Result};

/// `m` for memory: the first byte of every position this store makes.
const TAG: u8 = b'm';

/// The position of the event at `row` (1 for the first event).
pub(crate) fn row_position(row: u64) -> Position {
    PositionEncoder::new().u8(TAG).u64(row).finish(render)
}

/// The row `position` names, if this store made it (also when it was rebuilt from its
/// bytes alone with `Position::from_bytes`).
///
/// # Errors
/// `Internal` for a position of another layout, as the `Store` trait asks.
pub(crate) fn row_of(position: &Position) -> Result<u64> {
    decode(position.as_bytes()).ok_or_else(|| {
        Error::new(
            ErrorKind::Internal,
            format!("position {position} was not made by a memory store"),
        )
    })
}

fn decode(bytes: &[u8]) -> Option<u64> {
    let mut decoder = PositionDecoder::from_bytes(bytes);
    match (decoder.u8(), decoder.u64(), decoder.end()) {
        (Some(TAG), Some(row), Some(())) if row > 0 => Some(row),
        _ => None,
    }
}

/// `memory row 42` in logs; anything else as hexadecimal.
fn render(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match decode(bytes) {
        Some(row) => write!(f, "memory row {row}"),
        None => {
            f.write_str("0x")?;
            bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_order_as_positions_and_read_back_from_bytes() {
        assert!(row_position(255) < row_position(256));
        let restored = Position::from_bytes(row_position(7).as_bytes()).unwrap();
        assert_eq!(row_of(&restored).unwrap(), 7);
        assert_eq!(row_position(7).to_string(), "memory row 7");
    }

    #[test]
    fn a_foreign_position_is_refused() {
        let foreign = Position::from_bytes(&[0xEE; Position::MAX_LEN]).unwrap();
        assert_eq!(row_of(&foreign).unwrap_err().kind(), &ErrorKind::Internal);
        let zero = Position::from_bytes(&[TAG, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert!(row_of(&zero).is_err(), "row 0 is never handed out");
    }
}
