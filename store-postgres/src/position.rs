//! Conversions between `Position` and the Postgres types that carry it.
//!
//! sqlx has no codec for `xid8` or `pg_lsn`, so both travel as text (`'1234'::xid8`,
//! `'16/B374D848'::pg_lsn`); the conversions live here, once.

use outbox_core::{Error, ErrorKind, Position, Result};

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
    match after {
        None => Ok((0, 0)),
        Some(Position::Snapshot { txid, row }) => Ok((txid, row)),
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
        let p = Position::Snapshot { txid: 9, row: 4 };
        assert_eq!(snapshot_after(Some(p)).unwrap(), (9, 4));
        assert!(snapshot_after(Some(Position::Row(3))).is_err());
        assert_eq!(parse_xid8("txid", &xid8_text(u64::MAX)).unwrap(), u64::MAX);
    }
}
