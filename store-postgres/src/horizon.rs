//! What stalls the xmin-gated reader (docs/ARCHITECTURE.md, pitfall P3): the transactions holding
//! the snapshot horizon, and how much committed outbox data waits behind them.
//!
//! The reader returns rows whose txid is below `pg_snapshot_xmin(pg_current_snapshot())`,
//! the oldest transaction id still running anywhere on the server (every database,
//! not only this one). While one transaction that has an xid stays open, everything
//! committed after it waits. Only transactions holding an xid count: a read-only
//! transaction's snapshot (`backend_xmin`) holds back VACUUM but not this gate.

use std::time::Duration;

use outbox_core::Result;
use sqlx::{PgPool, Row};

use crate::error::PgResultExt;
use crate::position::parse_xid8;

/// The reader's horizon right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Horizon {
    /// `pg_snapshot_xmin`: rows with a txid at or above it are not returned yet.
    pub xmin: u64,
    /// Committed outbox rows the reader cannot return yet because of the horizon.
    pub held_back: u64,
    /// Transactions that hold an xid, oldest xid first: the first pins `xmin`.
    pub holders: Vec<HorizonHolder>,
}

impl Horizon {
    /// The transaction that pins the horizon, if any is open.
    pub fn oldest(&self) -> Option<&HorizonHolder> {
        self.holders.first()
    }

    /// How long the oldest holder has been open (zero when none is): the metric to
    /// alert on, next to `held_back`.
    pub fn age(&self) -> Duration {
        self.oldest().map_or(Duration::ZERO, |h| h.age)
    }
}

/// One open transaction that holds a transaction id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HorizonHolder {
    /// Backend process id (`pg_terminate_backend` takes it); `None` for a prepared
    /// transaction, which has no backend.
    pub pid: Option<i32>,
    /// The transaction id, widened to 64 bits like `xid8`.
    pub xid: u64,
    /// Time since the transaction started (for a prepared one: since PREPARE).
    pub age: Duration,
    pub database: Option<String>,
    pub user: Option<String>,
    pub application_name: Option<String>,
    /// `active`, `idle in transaction`, …, or `prepared`.
    pub state: Option<String>,
    /// The global id of a prepared transaction.
    pub prepared_gid: Option<String>,
}

/// Measures the horizon. `pg_stat_activity` shows other roles' transaction ids only to
/// superusers and members of `pg_read_all_stats`: grant that role to the monitoring
/// user, or `holders` misses them (`xmin` and `held_back` are always right).
pub(crate) async fn measure(pool: &PgPool) -> Result<Horizon> {
    let snapshot = sqlx::query(
        "SELECT pg_snapshot_xmin(s)::text AS xmin, pg_snapshot_xmax(s)::text AS xmax,
                (SELECT count(*) FROM outbox_events WHERE txid >= pg_snapshot_xmin(s)) AS held_back
         FROM pg_current_snapshot() AS s",
    )
    .fetch_one(pool)
    .await
    .storage()?;
    let xmin = parse_xid8("pg_snapshot_xmin", snapshot.get("xmin"))?;
    let xmax = parse_xid8("pg_snapshot_xmax", snapshot.get("xmax"))?;
    let held_back = snapshot.get::<i64, _>("held_back").max(0) as u64;

    let rows = sqlx::query(
        "SELECT a.pid, a.backend_xid::text AS xid,
                (extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, a.backend_start)) * 1e6)::bigint AS age_us,
                a.datname::text AS database, a.usename::text AS username, a.application_name,
                a.state, NULL::text AS gid
         FROM pg_stat_activity a
         WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
         UNION ALL
         SELECT NULL, p.transaction::text,
                (extract(epoch FROM clock_timestamp() - p.prepared) * 1e6)::bigint,
                p.database::text, p.owner::text, NULL, 'prepared', p.gid
         FROM pg_prepared_xacts p",
    )
    .fetch_all(pool)
    .await
    .storage()?;
    let mut holders = rows
        .iter()
        .map(|row| {
            let xid: String = row.get("xid");
            let short: u32 = xid.parse().map_err(|e| {
                outbox_core::Error::new(
                    outbox_core::ErrorKind::Internal,
                    format!("backend_xid {xid:?}: {e}"),
                )
            })?;
            Ok(HorizonHolder {
                pid: row.get("pid"),
                xid: widen(short, xmax),
                age: Duration::from_micros(
                    row.get::<Option<i64>, _>("age_us").unwrap_or(0).max(0) as u64
                ),
                database: row.get("database"),
                user: row.get("username"),
                application_name: row.get("application_name"),
                state: row.get("state"),
                prepared_gid: row.get("gid"),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    holders.sort_by_key(|h| h.xid);
    Ok(Horizon {
        xmin,
        held_back,
        holders,
    })
}

/// Widens a 32-bit xid to the 64-bit `xid8` numbering, given a 64-bit xid that is not
/// older than it (the snapshot's xmax): same epoch, unless that would put it in the
/// future, in which case it belongs to the previous epoch.
fn widen(xid: u32, reference: u64) -> u64 {
    let candidate = (reference & !0xFFFF_FFFF) | u64::from(xid);
    if candidate > reference && candidate >= 1 << 32 {
        candidate - (1 << 32)
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_follows_the_reference_epoch() {
        assert_eq!(widen(740, 751), 740);
        let reference = (3_u64 << 32) | 10;
        assert_eq!(widen(5, reference), (3 << 32) | 5);
        // An xid from just before the wrap-around belongs to the previous epoch.
        assert_eq!(
            widen(u32::MAX - 1, reference),
            (2 << 32) | u64::from(u32::MAX - 1)
        );
    }

    #[test]
    fn age_is_the_oldest_holders() {
        let holder = HorizonHolder {
            pid: Some(7),
            xid: 700,
            age: Duration::from_secs(3),
            database: None,
            user: None,
            application_name: None,
            state: None,
            prepared_gid: None,
        };
        let horizon = Horizon {
            xmin: 700,
            held_back: 2,
            holders: vec![holder.clone()],
        };
        assert_eq!(horizon.oldest(), Some(&holder));
        assert_eq!(horizon.age(), Duration::from_secs(3));
        let empty = Horizon {
            xmin: 800,
            held_back: 0,
            holders: vec![],
        };
        assert_eq!(empty.age(), Duration::ZERO);
    }
}
