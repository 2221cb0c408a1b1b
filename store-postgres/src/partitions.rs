//! Daily range partitions of `outbox_events` and `outbox_deliveries` on `event_id`.
//!
//! These are *table* partitions for retention (docs/ARCHITECTURE.md, P9: old data leaves
//! by dropping a partition, never by DELETE), not the fleet's account partitions.
//! Event ids are UUID v7, whose first 48 bits are unix milliseconds, so the range
//! `[day_bound(d), day_bound(d + 1))` holds exactly the ids minted on UTC day `d`.
//! Both tables use the same bounds, so an event and its delivery records leave
//! together. Ids outside every daily range land in the `_default` partitions.

use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use outbox_core::{Error, ErrorKind, Result};
use sqlx::{PgPool, Row};
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::PgConfig;
use crate::connection::ensure_current_partitions;
use crate::error::PgResultExt;

/// The first UUID v7 of UTC day `day` (its first millisecond, the rest zero): the
/// inclusive lower bound of that day's partitions. The same value as the SQL
/// function `outbox_day_bound(day)`.
pub fn day_bound(day: NaiveDate) -> Uuid {
    let millis = day
        .and_hms_opt(0, 0, 0)
        .map_or(0, |midnight| midnight.and_utc().timestamp_millis())
        .max(0) as u64;
    Uuid::from_u128(u128::from(millis & 0xFFFF_FFFF_FFFF) << 80)
}

/// The UTC day whose first millisecond `bound` encodes, if it is exactly a day bound.
pub fn bound_day(bound: Uuid) -> Option<NaiveDate> {
    let value = bound.as_u128();
    if value & ((1_u128 << 80) - 1) != 0 {
        return None;
    }
    let millis = i64::try_from(value >> 80).ok()?;
    let day = DateTime::<Utc>::from_timestamp_millis(millis)?.date_naive();
    (day_bound(day) == bound).then_some(day)
}

/// The range one partition covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionBounds {
    /// The catch-all for ids outside every range.
    Default,
    /// `from <= event_id < to`.
    Range { from: Uuid, to: Uuid },
}

/// One partition of `outbox_events` or `outbox_deliveries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePartition {
    /// `outbox_events` or `outbox_deliveries`.
    pub parent: String,
    /// The partition's table name, e.g. `outbox_events_p20261007`.
    pub name: String,
    pub bounds: PartitionBounds,
}

impl TablePartition {
    /// The UTC day a daily partition holds; `None` for the default partition or a
    /// range that is not exactly one day.
    pub fn day(&self) -> Option<NaiveDate> {
        match self.bounds {
            PartitionBounds::Default => None,
            PartitionBounds::Range { from, to } => {
                let day = bound_day(from)?;
                (day.succ_opt().map(day_bound) == Some(to)).then_some(day)
            }
        }
    }
}

/// Creates the missing daily partitions of both tables for `days` UTC days from
/// `from`, and returns the names of the partitions it created.
///
/// Idempotent, and safe from several processes at once. Creating a partition takes
/// an ACCESS EXCLUSIVE lock on its parent table for a moment, which waits for
/// transactions that are writing or reading it; after `lock_timeout` the call gives
/// up with a transient error rather than queueing every enqueue behind it. A day
/// whose range already has rows in the default partition is skipped with a server
/// WARNING (PostgreSQL refuses such a partition; moving the rows would need DELETE).
///
/// # Errors
/// `InvalidInput { field: "days" }` beyond 3650 days; storage errors otherwise.
pub async fn ensure_partitions(
    pool: &PgPool,
    from: NaiveDate,
    days: u32,
    lock_timeout: Duration,
) -> Result<Vec<String>> {
    if days > 3650 {
        return Err(Error::invalid(
            "days",
            format!("{days} days of partitions at once is more than ten years"),
        ));
    }
    let mut tx = pool.begin().await.storage()?;
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(format!("{}ms", lock_timeout.as_millis().max(1)))
        .execute(&mut *tx)
        .await
        .storage()?;
    let created: Vec<String> =
        sqlx::query_scalar("SELECT name FROM outbox_ensure_partitions($1, $2) AS name")
            .bind(from)
            .bind(days as i32)
            .fetch_all(&mut *tx)
            .await
            .storage()?;
    tx.commit().await.storage()?;
    if !created.is_empty() {
        tracing::info!(?created, "created outbox partitions");
    }
    Ok(created)
}

/// Every partition of `outbox_events` and `outbox_deliveries` with its bounds,
/// ordered by parent and name (daily partitions are named `<parent>_pYYYYMMDD`).
///
/// # Errors
/// Storage errors; `Internal` if a bound cannot be read.
pub async fn list_partitions(pool: &PgPool) -> Result<Vec<TablePartition>> {
    let rows = sqlx::query(
        "SELECT parent.relname::text, child.relname::text, pg_get_expr(child.relpartbound, child.oid)
         FROM pg_inherits i
         JOIN pg_class parent ON parent.oid = i.inhparent
         JOIN pg_class child ON child.oid = i.inhrelid
         WHERE i.inhparent IN ('outbox_events'::regclass, 'outbox_deliveries'::regclass)
         ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await
    .storage()?;
    rows.iter()
        .map(|row| {
            let name: String = row.get(1);
            let bound: String = row.get(2);
            Ok(TablePartition {
                parent: row.get(0),
                bounds: parse_bounds(&bound).map_err(|e| e.with("partition", &name))?,
                name,
            })
        })
        .collect()
}

/// Reads `pg_get_expr(relpartbound)`: `DEFAULT` or `FOR VALUES FROM ('…') TO ('…')`.
fn parse_bounds(text: &str) -> Result<PartitionBounds> {
    if text == "DEFAULT" {
        return Ok(PartitionBounds::Default);
    }
    let bad = || {
        Error::new(
            ErrorKind::Internal,
            format!("unexpected partition bound {text:?}"),
        )
    };
    let rest = text.strip_prefix("FOR VALUES FROM ('").ok_or_else(bad)?;
    let (from, rest) = rest.split_once("') TO ('").ok_or_else(bad)?;
    let to = rest.strip_suffix("')").ok_or_else(bad)?;
    Ok(PartitionBounds::Range {
        from: Uuid::parse_str(from).map_err(|_| bad())?,
        to: Uuid::parse_str(to).map_err(|_| bad())?,
    })
}

/// Keeps the partitions ahead of the calendar while `stop` has a sender: a process
/// that runs for weeks would otherwise outlive the partitions created at start and
/// send new rows to the default partition.
pub(crate) fn spawn_maintenance(pool: PgPool, config: PgConfig, mut stop: watch::Receiver<()>) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(config.partition_maintenance_interval) => {}
            }
            if let Err(e) = ensure_current_partitions(&pool, &config).await {
                tracing::warn!(error = %e, "outbox partition maintenance failed; retrying at the next interval");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_bounds_are_v7_millisecond_prefixes() {
        let day = NaiveDate::from_ymd_opt(2026, 10, 7).unwrap();
        let bound = day_bound(day);
        // 2026-10-07T00:00:00Z = 1_791_331_200_000 ms = 0x01a1_13a8_ec00
        assert_eq!(bound.to_string(), "01a113a8-ec00-0000-0000-000000000000");
        assert_eq!(bound_day(bound), Some(day));
        assert_eq!(bound_day(Uuid::now_v7()), None);
        // Every v7 id of that day sorts inside [bound(d), bound(d + 1)).
        let noon = day.and_hms_opt(12, 0, 0).unwrap().and_utc();
        let ts = uuid::Timestamp::from_unix(uuid::NoContext, noon.timestamp() as u64, 0);
        let id = Uuid::new_v7(ts);
        assert!(bound <= id && id < day_bound(day.succ_opt().unwrap()));
    }

    #[test]
    fn bounds_parse() {
        assert_eq!(parse_bounds("DEFAULT").unwrap(), PartitionBounds::Default);
        let text = "FOR VALUES FROM ('01a113a8-ec00-0000-0000-000000000000') TO ('01a118cf-4800-0000-0000-000000000000')";
        let PartitionBounds::Range { from, to } = parse_bounds(text).unwrap() else {
            panic!("not a range")
        };
        let partition = TablePartition {
            parent: "outbox_events".into(),
            name: "outbox_events_p20261007".into(),
            bounds: PartitionBounds::Range { from, to },
        };
        assert_eq!(partition.day(), NaiveDate::from_ymd_opt(2026, 10, 7));
        assert!(parse_bounds("FOR VALUES IN (1)").is_err());
    }
}
