//! The consumer-side families: the inbox's processed markers (`inbox_messages`, by
//! the UTC day applied) and the exception queue (`exceptions` with their
//! `exception_resolutions`, by the day detected, once every one of the day is
//! resolved).
//! The per-account high-water marks (`inbox_accounts`) and the gap queue
//! (`inbox_held`) are not records of the past and never leave by retention: without
//! the marks a redelivered old message could be applied again.

use outbox_core::{KeptBecause, RetentionFamily};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{DAY, Pass, days};
use crate::error::SqliteResultExt;

pub(super) fn run_markers(conn: &mut Connection, pass: &mut Pass<'_>) -> outbox_core::Result<()> {
    let family = RetentionFamily::Inbox;
    let days = days(
        conn,
        "SELECT applied_at - applied_at % ?1 AS day FROM inbox_messages WHERE applied_at < ?2
         GROUP BY day ORDER BY day",
        pass.horizon,
    )?;
    for start in days {
        let bounds = params![start, start + DAY];
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()?;
        let held: Option<(String, String, i64)> = tx
            .query_row(
                "SELECT m.consumer, m.account,
                        (SELECT count(*) FROM inbox_held h WHERE h.consumer = m.consumer AND h.account = m.account)
                 FROM inbox_messages m
                 WHERE m.applied_at >= ?1 AND m.applied_at < ?2
                   AND EXISTS (SELECT 1 FROM inbox_held h WHERE h.consumer = m.consumer AND h.account = m.account)
                 LIMIT 1",
                bounds,
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()
            .storage()?;
        if let Some((consumer, account, count)) = held {
            let reason = KeptBecause::Held {
                consumer,
                account,
                count: count as u64,
            };
            pass.kept(family, start, None, reason);
            continue;
        }
        let rows: i64 = tx
            .query_row(
                "SELECT count(*) FROM inbox_messages WHERE applied_at >= ?1 AND applied_at < ?2",
                bounds,
                |row| row.get(0),
            )
            .storage()?;
        pass.grant(&tx, family, start, None, rows)?;
        tx.execute(
            "DELETE FROM inbox_messages WHERE applied_at >= ?1 AND applied_at < ?2",
            bounds,
        )
        .storage()?;
        tx.commit().storage()?;
        pass.dropped(family, start, None, rows);
    }
    Ok(())
}

pub(super) fn run_exceptions(
    conn: &mut Connection,
    pass: &mut Pass<'_>,
) -> outbox_core::Result<()> {
    let family = RetentionFamily::Exceptions;
    let days = days(
        conn,
        "SELECT detected_at - detected_at % ?1 AS day FROM exceptions WHERE detected_at < ?2
         GROUP BY day ORDER BY day",
        pass.horizon,
    )?;
    for start in days {
        let bounds = params![start, start + DAY];
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()?;
        // Every exception of the day must be resolved: an open one keeps its day (and
        // the database refuses to delete it whatever the permit says).
        let (open, oldest): (i64, Option<i64>) = tx
            .query_row(
                "SELECT count(*), min(x.id) FROM exceptions x
                 WHERE x.detected_at >= ?1 AND x.detected_at < ?2
                   AND NOT EXISTS (SELECT 1 FROM exception_resolutions r WHERE r.exception_id = x.id)",
                bounds,
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .storage()?;
        if let Some(oldest_id) = oldest {
            let reason = KeptBecause::OpenExceptions {
                count: open as u64,
                oldest_id,
            };
            pass.kept(family, start, None, reason);
            continue;
        }
        // What an exception points at must be resolved before the exception goes: an
        // event of its account still without a terminal delivery, or a message of its
        // account still held, from before the day ended.
        let open: Option<(String, bool)> = tx
            .query_row(
                "SELECT account, held FROM (
                     SELECT x.account,
                            EXISTS (SELECT 1 FROM inbox_held h WHERE h.account = x.account AND h.held_at < ?2) AS held,
                            EXISTS (SELECT 1 FROM outbox_events e
                                    WHERE e.account = x.account AND e.created_at < ?2
                                      AND NOT EXISTS (SELECT 1 FROM outbox_deliveries d
                                                      WHERE d.event_id = e.event_id AND d.outcome <> 'failed')) AS pending
                     FROM exceptions x WHERE x.detected_at >= ?1 AND x.detected_at < ?2)
                 WHERE held OR pending LIMIT 1",
                bounds,
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .storage()?;
        if let Some((account, held)) = open {
            let reason = KeptBecause::AccountOpen { account, held };
            pass.kept(family, start, None, reason);
            continue;
        }
        // The exceptions and their resolutions, counted together on the permit.
        let rows: i64 = tx
            .query_row(
                "SELECT count(*) + count(r.id) FROM exceptions x
                 LEFT JOIN exception_resolutions r ON r.exception_id = x.id
                 WHERE x.detected_at >= ?1 AND x.detected_at < ?2",
                bounds,
                |row| row.get(0),
            )
            .storage()?;
        pass.grant(&tx, family, start, None, rows)?;
        // The exceptions first: a resolution may leave only once its exception is gone
        // (the foreign key is checked at commit).
        let ids: Vec<i64> = {
            let mut stmt = tx
                .prepare("DELETE FROM exceptions WHERE detected_at >= ?1 AND detected_at < ?2 RETURNING id")
                .storage()?;
            let ids = stmt.query_map(bounds, |row| row.get(0)).storage()?;
            ids.collect::<rusqlite::Result<_>>().storage()?
        };
        let ids = format!(
            "[{}]",
            ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
        );
        tx.execute(
            "DELETE FROM exception_resolutions WHERE exception_id IN (SELECT value FROM json_each(?1))",
            [ids],
        )
        .storage()?;
        tx.commit().storage()?;
        pass.dropped(family, start, None, rows);
    }
    Ok(())
}
