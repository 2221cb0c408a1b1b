//! The outbox family: `outbox_events` and their `outbox_deliveries`, by the UTC day
//! of the event's `created_at`.

use outbox_core::{KeptBecause, RetentionFamily};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{DAY, Pass};
use crate::error::SqliteResultExt;

const FAMILY: RetentionFamily = RetentionFamily::Outbox;

/// The rows of one day. Positions follow commit order and `created_at` follows the
/// clock, so the day's position range bounds the scan and the time range decides.
const IN_DAY: &str = "position BETWEEN ?1 AND ?2 AND created_at >= ?3 AND created_at < ?4";

pub(super) fn run(conn: &mut Connection, pass: &mut Pass<'_>) -> outbox_core::Result<()> {
    let days: Vec<(i64, i64, i64)> = {
        let mut stmt = conn
            .prepare(
                "SELECT created_at - created_at % ?1 AS day, min(position), max(position)
                 FROM outbox_events WHERE created_at < ?2 GROUP BY day ORDER BY day",
            )
            .storage()?;
        let rows = stmt
            .query_map(params![DAY, pass.horizon], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .storage()?;
        rows.collect::<rusqlite::Result<_>>().storage()?
    };
    for (start, low, high) in days {
        let bounds = params![low, high, start, start + DAY];
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()?;
        let pending: i64 = tx
            .query_row(
                &format!(
                    "SELECT count(*) FROM outbox_events e WHERE {IN_DAY} AND NOT EXISTS (
                         SELECT 1 FROM outbox_deliveries d
                         WHERE d.event_id = e.event_id AND d.outcome <> 'failed')"
                ),
                bounds,
                |row| row.get(0),
            )
            .storage()?;
        if pending > 0 {
            pass.kept(
                FAMILY,
                start,
                None,
                KeptBecause::PendingEvents {
                    count: pending as u64,
                },
            );
            continue;
        }
        // A plain rowid is max + 1: removing the newest row would hand its position
        // out again, behind every relay cursor.
        let newest: Option<(i64, i64)> = tx
            .query_row(
                "SELECT position, created_at FROM outbox_events ORDER BY position DESC LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .storage()?;
        if let Some((position, at)) = newest
            && (start..start + DAY).contains(&at)
        {
            pass.kept(
                FAMILY,
                start,
                None,
                KeptBecause::NewestEvent {
                    position: position as u64,
                },
            );
            continue;
        }
        let events: i64 = tx
            .query_row(
                &format!("SELECT count(*) FROM outbox_events WHERE {IN_DAY}"),
                bounds,
                |row| row.get(0),
            )
            .storage()?;
        let deliveries: i64 = tx
            .query_row(
                &format!(
                    "SELECT count(*) FROM outbox_deliveries
                     WHERE event_id IN (SELECT event_id FROM outbox_events WHERE {IN_DAY})"
                ),
                bounds,
                |row| row.get(0),
            )
            .storage()?;
        // Each account's numbering continues after its highest removed sequence.
        tx.execute(
            &format!(
                "INSERT INTO outbox_retired_sequences (account, last_sequence)
                 SELECT account, max(sequence) FROM outbox_events WHERE {IN_DAY} GROUP BY account
                 ON CONFLICT (account) DO UPDATE
                 SET last_sequence = max(last_sequence, excluded.last_sequence)"
            ),
            bounds,
        )
        .storage()?;
        pass.grant(&tx, FAMILY, start, None, events + deliveries)?;
        // Deliveries first: their trigger finds the permit through their event.
        tx.execute(
            &format!(
                "DELETE FROM outbox_deliveries
                 WHERE event_id IN (SELECT event_id FROM outbox_events WHERE {IN_DAY})"
            ),
            bounds,
        )
        .storage()?;
        tx.execute(&format!("DELETE FROM outbox_events WHERE {IN_DAY}"), bounds)
            .storage()?;
        tx.commit().storage()?;
        pass.dropped(FAMILY, start, None, events + deliveries);
    }
    Ok(())
}
