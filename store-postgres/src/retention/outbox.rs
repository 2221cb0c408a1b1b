//! The outbox family: old outbox data leaves by dropping whole daily partitions, never
//! by a row DELETE (docs/ARCHITECTURE.md, P9), and only once every event in a partition
//! has a terminal delivery outcome.

use chrono::{DateTime, NaiveDate, Utc};
use outbox_core::{Error, KeptBecause, PeriodOutcome, Result, RetentionFamily, RetentionReport};
use sqlx::{AssertSqlSafe, PgPool};

use crate::error::PgResultExt;
use crate::partitions::{TablePartition, list_partitions};

/// What one pass over the outbox partitions did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionReport {
    /// Days whose `outbox_events` and `outbox_deliveries` partitions were dropped,
    /// with the rows they held (events and deliveries).
    pub dropped: Vec<(NaiveDate, u64)>,
    /// Days past retention kept because events in them have no terminal outcome yet,
    /// with how many such events.
    pub kept: Vec<(NaiveDate, u64)>,
}

/// Drops the daily partitions that ended at or before `cutoff` and whose events all
/// have a terminal delivery record (accepted, replayed or rejected). Each day is
/// dropped in its own transaction, events and deliveries together.
///
/// # Errors
/// Storage errors. A partition that cannot be dropped stops the pass; the days
/// already dropped stay dropped.
pub async fn drop_expired(pool: &PgPool, cutoff: DateTime<Utc>) -> Result<PartitionReport> {
    let partitions = list_partitions(pool).await?;
    let mut report = PartitionReport::default();
    let expired = partitions
        .iter()
        .filter(|p| p.parent == "outbox_events")
        .filter_map(|p| {
            let day = p.day()?;
            let end = day.succ_opt()?.and_hms_opt(0, 0, 0)?.and_utc();
            (end <= cutoff).then_some((day, p))
        });
    for (day, events) in expired {
        let pending = pending_events(pool, events).await?;
        if pending > 0 {
            tracing::info!(%day, pending, "retention: partition kept, events without a terminal outcome");
            report.kept.push((day, pending));
            continue;
        }
        let deliveries = partitions
            .iter()
            .find(|p| p.parent == "outbox_deliveries" && p.day() == Some(day));
        let rows = drop_day(pool, events, deliveries).await?;
        tracing::info!(%day, rows, "retention: partitions dropped");
        report.dropped.push((day, rows));
    }
    Ok(report)
}

/// Events of `partition` with no terminal delivery record.
async fn pending_events(pool: &PgPool, partition: &TablePartition) -> Result<u64> {
    let sql = format!(
        "SELECT count(*) FROM {} e WHERE NOT EXISTS (
             SELECT 1 FROM outbox_deliveries d WHERE d.event_id = e.event_id AND d.outcome <> 'failed')",
        quote_ident(&partition.name)?
    );
    let pending: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .storage()?;
    Ok(pending as u64)
}

/// Drops the day's partitions in one transaction; returns the rows they held.
async fn drop_day(
    pool: &PgPool,
    events: &TablePartition,
    deliveries: Option<&TablePartition>,
) -> Result<u64> {
    let mut tx = pool.begin().await.storage()?;
    let mut rows = 0;
    for partition in std::iter::once(events).chain(deliveries) {
        let name = quote_ident(&partition.name)?;
        let parent = quote_ident(&partition.parent)?;
        let held: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {name}")))
            .fetch_one(&mut *tx)
            .await
            .storage()?;
        rows += held.max(0) as u64;
        // DETACH first: dropping a detached table needs no lock on the parent beyond
        // the detach itself, and nothing can insert into it any more.
        sqlx::query(AssertSqlSafe(format!(
            "ALTER TABLE {parent} DETACH PARTITION {name}"
        )))
        .execute(&mut *tx)
        .await
        .storage()?;
        sqlx::query(AssertSqlSafe(format!("DROP TABLE {name}")))
            .execute(&mut *tx)
            .await
            .storage()?;
    }
    tx.commit().await.storage()?;
    Ok(rows)
}

/// [`drop_expired`] as verdicts of the outbox family.
pub(super) async fn report(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    report: &mut RetentionReport,
) -> Result<()> {
    let partitions = drop_expired(pool, cutoff).await?;
    let family = RetentionFamily::Outbox;
    let mut verdicts: Vec<(NaiveDate, PeriodOutcome)> = partitions
        .dropped
        .into_iter()
        .map(|(day, rows)| (day, PeriodOutcome::Dropped { rows }))
        .chain(partitions.kept.into_iter().map(|(day, count)| {
            let reason = KeptBecause::PendingEvents { count }.to_string();
            (day, PeriodOutcome::Kept { reason })
        }))
        .collect();
    verdicts.sort_by_key(|(day, _)| *day);
    for (day, outcome) in verdicts {
        report.push(family, day, None, outcome);
    }
    Ok(())
}

/// Partition names come from the catalogue, but are still checked: they are
/// interpolated into DDL.
fn quote_ident(name: &str) -> Result<String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(Error::invalid(
            "partition",
            format!("{name:?} is not a plain identifier"),
        ));
    }
    Ok(format!("\"{name}\""))
}
