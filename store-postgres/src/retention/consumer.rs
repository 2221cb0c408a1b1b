//! The consumer-side families: the inbox's processed markers (`inbox_messages`, by
//! the UTC day applied) and the exception queue (`exceptions` with their
//! `exception_resolutions`, by the day detected, once every one of the day is
//! resolved).
//! The per-account high-water marks (`inbox_accounts`) and the gap queue
//! (`inbox_held`) never leave by retention: without the marks a redelivered old
//! message could be applied again.

use chrono::{DateTime, Utc};
use outbox_core::{KeptBecause, RetentionFamily};
use sqlx::PgPool;

use super::{Pass, day_end};
use crate::error::PgResultExt;

pub(super) async fn run_markers(pool: &PgPool, pass: &mut Pass<'_>) -> outbox_core::Result<()> {
    let family = RetentionFamily::Inbox;
    let days: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT DISTINCT outbox_utc_day(applied_at) AS day FROM inbox_messages
         WHERE applied_at < $1 ORDER BY day",
    )
    .bind(pass.horizon)
    .fetch_all(pool)
    .await
    .storage()?;
    for start in days {
        let end = day_end(start);
        let mut tx = Pass::begin(pool).await?;
        let held: Option<(String, String, i64)> = sqlx::query_as(
            "SELECT m.consumer, m.account,
                    (SELECT count(*) FROM inbox_held h WHERE h.consumer = m.consumer AND h.account = m.account)
             FROM inbox_messages m
             WHERE m.applied_at >= $1 AND m.applied_at < $2
               AND EXISTS (SELECT 1 FROM inbox_held h WHERE h.consumer = m.consumer AND h.account = m.account)
             LIMIT 1",
        )
        .bind(start)
        .bind(end)
        .fetch_optional(&mut *tx)
        .await
        .storage()?;
        if let Some((consumer, account, count)) = held {
            let reason = KeptBecause::Held {
                consumer,
                account,
                count: count.max(0) as u64,
            };
            pass.kept(family, start, None, reason);
            continue;
        }
        let rows: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM inbox_messages WHERE applied_at >= $1 AND applied_at < $2",
        )
        .bind(start)
        .bind(end)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        if rows == 0 {
            continue;
        }
        pass.grant(&mut tx, family, start, None, rows).await?;
        sqlx::query("DELETE FROM inbox_messages WHERE applied_at >= $1 AND applied_at < $2")
            .bind(start)
            .bind(end)
            .execute(&mut *tx)
            .await
            .storage()?;
        tx.commit().await.storage()?;
        pass.dropped(family, start, None, rows);
    }
    Ok(())
}

pub(super) async fn run_exceptions(pool: &PgPool, pass: &mut Pass<'_>) -> outbox_core::Result<()> {
    let family = RetentionFamily::Exceptions;
    let days: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT DISTINCT outbox_utc_day(detected_at) AS day FROM exceptions
         WHERE detected_at < $1 ORDER BY day",
    )
    .bind(pass.horizon)
    .fetch_all(pool)
    .await
    .storage()?;
    for start in days {
        let end = day_end(start);
        let mut tx = Pass::begin(pool).await?;
        // Every exception of the day must be resolved: an open one keeps its day (and
        // the database refuses to delete it whatever the permit says).
        let (open, oldest): (i64, Option<i64>) = sqlx::query_as(
            "SELECT count(*), min(x.id) FROM exceptions x
             WHERE x.detected_at >= $1 AND x.detected_at < $2
               AND NOT EXISTS (SELECT 1 FROM exception_resolutions r WHERE r.exception_id = x.id)",
        )
        .bind(start)
        .bind(end)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        if let Some(oldest_id) = oldest {
            let reason = KeptBecause::OpenExceptions {
                count: open.max(0) as u64,
                oldest_id,
            };
            pass.kept(family, start, None, reason);
            continue;
        }
        // What an exception points at must be resolved before the exception goes: an
        // event of its account minted before the day ended and still without a
        // terminal delivery, or a message of its account held since before then.
        let open: Option<(String, bool)> = sqlx::query_as(
            "SELECT account, held FROM (
                 SELECT x.account,
                        EXISTS (SELECT 1 FROM inbox_held h WHERE h.account = x.account AND h.held_at < $2) AS held,
                        EXISTS (SELECT 1 FROM outbox_events e
                                WHERE e.account = x.account
                                  AND e.event_id < outbox_day_bound(($2 AT TIME ZONE 'UTC')::date)
                                  AND NOT EXISTS (SELECT 1 FROM outbox_deliveries d
                                                  WHERE d.event_id = e.event_id AND d.outcome <> 'failed')) AS pending
                 FROM exceptions x WHERE x.detected_at >= $1 AND x.detected_at < $2) o
             WHERE held OR pending LIMIT 1",
        )
        .bind(start)
        .bind(end)
        .fetch_optional(&mut *tx)
        .await
        .storage()?;
        if let Some((account, held)) = open {
            pass.kept(
                family,
                start,
                None,
                KeptBecause::AccountOpen { account, held },
            );
            continue;
        }
        // The exceptions and their resolutions, counted together on the permit.
        let rows: i64 = sqlx::query_scalar(
            "SELECT count(*) + count(r.id) FROM exceptions x
             LEFT JOIN exception_resolutions r ON r.exception_id = x.id
             WHERE x.detected_at >= $1 AND x.detected_at < $2",
        )
        .bind(start)
        .bind(end)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        if rows == 0 {
            continue;
        }
        pass.grant(&mut tx, family, start, None, rows).await?;
        // The exceptions first: a resolution may leave only once its exception is gone
        // (the foreign key is deferred to the commit).
        let ids: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM exceptions WHERE detected_at >= $1 AND detected_at < $2 RETURNING id",
        )
        .bind(start)
        .bind(end)
        .fetch_all(&mut *tx)
        .await
        .storage()?;
        sqlx::query("DELETE FROM exception_resolutions WHERE exception_id = ANY($1)")
            .bind(ids)
            .execute(&mut *tx)
            .await
            .storage()?;
        tx.commit().await.storage()?;
        pass.dropped(family, start, None, rows);
    }
    Ok(())
}
