//! `Position`: where an event sits in a relay's commit-ordered stream.

use std::fmt;

/// A resumable position. Each relay kind uses one variant; all carry the row position.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Position {
    /// A row position where position order is commit order (SQLite: one writer at a time).
    Row(i64),
    /// A Postgres `(txid xid8, position)` pair read under a snapshot-xmin gate.
    Snapshot { txid: u64, row: i64 },
    /// A Postgres commit LSN from logical replication, and the row inside that commit.
    Log { lsn: u64, row: i64 },
}

impl Position {
    /// The outbox row's own position (`outbox_events.position`).
    pub fn row(&self) -> i64 {
        match *self {
            Self::Row(row) | Self::Snapshot { row, .. } | Self::Log { row, .. } => row,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Row(row) => write!(f, "row {row}"),
            Self::Snapshot { txid, row } => write!(f, "txid {txid} row {row}"),
            Self::Log { lsn, row } => {
                write!(f, "lsn {:X}/{:X} row {row}", lsn >> 32, lsn & 0xFFFF_FFFF)
            }
        }
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
