//! The Postgres store's positions ([`PgPosition`]) and their encoding as
//! `outbox_core::Position`, plus the text forms of the Postgres types that carry them.
//!
//! sqlx has no codec for `xid8` or `pg_lsn`, so both travel as text (`'1234'::xid8`,
//! `'16/B374D848'::pg_lsn`); the conversions live here, once.

use std::fmt;

use outbox_core::{Error, ErrorKind, Position, PositionDecoder, PositionEncoder, Result};

/// Where an event sits in a Postgres relay's stream.
///
/// The derived order is the stream order, and the byte encoding keeps it: a tag
/// (snapshot before log), then the two fields, big-endian (the row with its sign bit
/// flipped). So every catch-up (snapshot) position of a CDC relay sorts before every
/// streamed (log) one, and the dispatcher's frontier and "@attempted" horizon stay
/// ordered across the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PgPosition {
    /// The polling reader's `(txid xid8, position)` pair, read under a snapshot-xmin
    /// gate (also the CDC relay's catch-up).
    Snapshot { txid: u64, row: i64 },
    /// A commit LSN from logical replication and the row inside that commit (the CDC
    /// relay's stream).
    Log { lsn: u64, row: i64 },
}

const SNAPSHOT: u8 = 1;
const LOG: u8 = 2;

impl PgPosition {
    /// The outbox row's own position (`outbox_events.position`).
    pub fn row(self) -> i64 {
        match self {
            Self::Snapshot { row, .. } | Self::Log { row, .. } => row,
        }
    }

    /// The opaque position the core carries.
    pub fn encode(self) -> Position {
        let (tag, first, row) = match self {
            Self::Snapshot { txid, row } => (SNAPSHOT, txid, row),
            Self::Log { lsn, row } => (LOG, lsn, row),
        };
        PositionEncoder::new()
            .u8(tag)
            .u64(first)
            .i64(row)
            .finish(render)
    }

    /// The Postgres position `position` encodes.
    ///
    /// # Errors
    /// `Internal` for a position this store did not make (another store's).
    pub fn decode(position: &Position) -> Result<Self> {
        from_bytes(position.as_bytes()).ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                format!("{position} is not a Postgres position (snapshot or log)"),
            )
        })
    }
}

impl From<PgPosition> for Position {
    fn from(position: PgPosition) -> Self {
        position.encode()
    }
}

impl TryFrom<Position> for PgPosition {
    type Error = Error;

    fn try_from(position: Position) -> Result<Self> {
        Self::decode(&position)
    }
}

impl fmt::Display for PgPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Snapshot { txid, row } => write!(f, "txid {txid} row {row}"),
            Self::Log { lsn, row } => write!(f, "lsn {} row {row}", lsn_text(lsn)),
        }
    }
}

fn from_bytes(bytes: &[u8]) -> Option<PgPosition> {
    let mut d = PositionDecoder::from_bytes(bytes);
    let (tag, first, row) = (d.u8()?, d.u64()?, d.i64()?);
    d.end()?;
    match tag {
        SNAPSHOT => Some(PgPosition::Snapshot { txid: first, row }),
        LOG => Some(PgPosition::Log { lsn: first, row }),
        _ => None,
    }
}

fn render(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match from_bytes(bytes) {
        Some(position) => fmt::Display::fmt(&position, f),
        None => write!(f, "not a Postgres position ({bytes:02x?})"),
    }
}

/// The text form of an `xid8`.
pub(crate) fn xid8_text(txid: u64) -> String {
    txid.to_string()
}

/// Parses an `xid8` read as text; `column` names where it came from.
pub(crate) fn parse_xid8(column: &str, text: &str) -> Result<u64> {
    text.parse().map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("{column}: {text:?} is not an xid8: {e}"),
        )
    })
}

/// The text form of a `pg_lsn` (`hi/lo` in hexadecimal).
pub(crate) fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses a `pg_lsn` read as text; `column` names where it came from.
pub(crate) fn parse_lsn(column: &str, text: &str) -> Result<u64> {
    let bad = |why: String| {
        Error::new(
            ErrorKind::Internal,
            format!("{column}: {text:?} is not a pg_lsn: {why}"),
        )
    };
    let (hi, lo) = text.split_once('/').ok_or_else(|| bad("no '/'".into()))?;
    let hi = u32::from_str_radix(hi, 16).map_err(|e| bad(e.to_string()))?;
    let lo = u32::from_str_radix(lo, 16).map_err(|e| bad(e.to_string()))?;
    Ok((u64::from(hi) << 32) | u64::from(lo))
}

/// The `(txid, position)` pair a snapshot reader continues after; `(0, 0)` sorts
/// before every row because real xids start at 3.
pub(crate) fn snapshot_after(after: Option<Position>) -> Result<(u64, i64)> {
    match after.as_ref().map(PgPosition::decode).transpose()? {
        None => Ok((0, 0)),
        Some(PgPosition::Snapshot { txid, row }) => Ok((txid, row)),
        Some(other) => Err(Error::new(
            ErrorKind::Internal,
            format!("{other} is not a Postgres snapshot position (txid, row)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trips() {
        let lsn = (0x16_u64 << 32) | 0xB374_D848;
        assert_eq!(lsn_text(lsn), "16/B374D848");
        assert_eq!(parse_lsn("lsn", "16/B374D848").unwrap(), lsn);
        assert_eq!(parse_lsn("lsn", "0/0").unwrap(), 0);
        assert!(parse_lsn("lsn", "zz").is_err());
    }

    #[test]
    fn snapshot_positions_only() {
        assert_eq!(snapshot_after(None).unwrap(), (0, 0));
        let p = PgPosition::Snapshot { txid: 9, row: 4 }.encode();
        assert_eq!(snapshot_after(Some(p)).unwrap(), (9, 4));
        let log = PgPosition::Log { lsn: 9, row: 4 }.encode();
        assert!(snapshot_after(Some(log)).is_err());
        assert!(snapshot_after(Some(Position::from_bytes(&[3]).unwrap())).is_err());
        assert_eq!(parse_xid8("txid", &xid8_text(u64::MAX)).unwrap(), u64::MAX);
    }

    /// The encoded order is the enum's order: the tag first, then the fields.
    #[test]
    fn encoding_keeps_the_stream_order_and_round_trips() {
        let positions = [
            PgPosition::Snapshot { txid: 0, row: 0 },
            PgPosition::Snapshot { txid: 3, row: -1 },
            PgPosition::Snapshot { txid: 3, row: 7 },
            PgPosition::Snapshot { txid: 256, row: 1 },
            PgPosition::Snapshot {
                txid: u64::MAX,
                row: i64::MAX,
            },
            PgPosition::Log {
                lsn: 0,
                row: i64::MIN,
            },
            PgPosition::Log { lsn: 100, row: 1 },
            PgPosition::Log {
                lsn: 101,
                row: i64::MIN,
            },
            PgPosition::Log {
                lsn: u64::MAX,
                row: i64::MAX,
            },
        ];
        for pair in positions.windows(2) {
            assert!(pair[0] < pair[1], "{pair:?}");
            assert!(pair[0].encode() < pair[1].encode(), "{pair:?}");
        }
        for p in positions {
            assert_eq!(PgPosition::decode(&p.encode()).unwrap(), p);
            assert_eq!(p.encode().to_string(), p.to_string());
            let restored = Position::from_bytes(p.encode().as_bytes()).unwrap();
            assert_eq!(PgPosition::try_from(restored).unwrap(), p);
        }
        assert_eq!(
            PgPosition::Log {
                lsn: (0x16 << 32) | 0xB374_D848,
                row: 7
            }
            .encode()
            .to_string(),
            "lsn 16/B374D848 row 7"
        );
        let err = PgPosition::decode(&Position::from_bytes(&[9; 17]).unwrap()).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Internal, "{err}");
    }
}
