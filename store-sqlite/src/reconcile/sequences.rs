//! `InboxSequences` on SQLite: a consumer database's processed markers, its gap queue,
//! and whether retention's permits show markers removed. Read-only.

use async_trait::async_trait;
use outbox_core::reconcile::sequences::{AppliedMarker, ConsumerGap, InboxSequences, MarkerKey};
use outbox_core::{Account, Error, HeldGap, MessageKind};
use rusqlite::{Row, params};

use super::{limit_param, unsigned};
use crate::SqliteStore;
use crate::error::SqliteResultExt;
use crate::store::internal;
use crate::time;

/// The columns both marker queries select, in `marker_from_row`'s order. The index
/// `inbox_messages_by_sequence` (migration 0006) serves the order and the row-value
/// comparison; SQLite compares text by bytes, the order of the core's `MarkerKey`.
macro_rules! markers_sql {
    ($where:literal) => {
        concat!(
            "SELECT consumer, account, sequence, instruction_id, kind, applied_at
             FROM inbox_messages ",
            $where,
            " ORDER BY consumer, account, sequence, instruction_id LIMIT ?1"
        )
    };
}

pub(crate) fn marker_from_row(row: &Row<'_>) -> rusqlite::Result<AppliedMarker> {
    let account: String = row.get(1)?;
    let kind: String = row.get(4)?;
    Ok(AppliedMarker {
        consumer: row.get(0)?,
        account: Account::parse(&account).map_err(internal("inbox_messages.account"))?,
        sequence: unsigned("inbox_messages.sequence", row.get(2)?)?,
        instruction_id: row.get(3)?,
        kind: MessageKind::parse(&kind)
            .ok_or_else(|| internal("inbox_messages.kind")(Error::invalid("kind", kind.clone())))?,
        applied_at: time::from_micros(row.get(5)?),
    })
}

fn gap_from_row(row: &Row<'_>) -> rusqlite::Result<ConsumerGap> {
    let account: String = row.get(1)?;
    Ok(ConsumerGap {
        consumer: row.get(0)?,
        gap: HeldGap {
            account: Account::parse(&account).map_err(internal("inbox_held.account"))?,
            last_applied: unsigned("inbox_accounts.last_applied", row.get(2)?)?,
            lowest_held: unsigned("inbox_held.sequence", row.get(3)?)?,
            held_at: time::from_micros(row.get(4)?),
        },
        held: unsigned("inbox_held count", row.get(5)?)?,
    })
}

#[async_trait]
impl InboxSequences for SqliteStore {
    async fn markers_after(
        &self,
        after: Option<&MarkerKey>,
        limit: usize,
    ) -> outbox_core::Result<Vec<AppliedMarker>> {
        let after = match after {
            None => None,
            Some(key) => {
                let sequence = i64::try_from(key.sequence).map_err(|_| {
                    Error::invalid(
                        "after.sequence",
                        format!("{} does not fit SQLite's integer", key.sequence),
                    )
                })?;
                Some((key.clone(), sequence))
            }
        };
        let limit = limit_param(limit);
        self.shared
            .run(move |conn| {
                let rows = match &after {
                    None => {
                        let mut stmt = conn.prepare_cached(markers_sql!("")).storage()?;
                        let rows = stmt
                            .query_map(params![limit], marker_from_row)
                            .storage()?;
                        rows.collect::<rusqlite::Result<Vec<_>>>()
                    }
                    Some((key, sequence)) => {
                        let mut stmt = conn
                            .prepare_cached(markers_sql!(
                                "WHERE (consumer, account, sequence, instruction_id) > (?2, ?3, ?4, ?5)"
                            ))
                            .storage()?;
                        let rows = stmt
                            .query_map(
                                params![
                                    limit,
                                    key.consumer,
                                    key.account,
                                    sequence,
                                    key.instruction_id
                                ],
                                marker_from_row,
                            )
                            .storage()?;
                        rows.collect::<rusqlite::Result<Vec<_>>>()
                    }
                };
                rows.storage()
            })
            .await
    }

    /// One row per (consumer, account) with held messages: the lowest held one (its
    /// `held_at` dates the gap), how many are held, and the account's high-water mark
    /// (0 without an `inbox_accounts` row).
    async fn held_gaps(&self) -> outbox_core::Result<Vec<ConsumerGap>> {
        self.shared
            .run(|conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT g.consumer, g.account, coalesce(a.last_applied, 0), g.lowest, h.held_at, g.held
                         FROM (SELECT consumer, account, min(sequence) AS lowest, count(*) AS held
                               FROM inbox_held GROUP BY consumer, account) g
                         JOIN inbox_held h
                           ON h.consumer = g.consumer AND h.account = g.account AND h.sequence = g.lowest
                         LEFT JOIN inbox_accounts a ON a.consumer = g.consumer AND a.account = g.account
                         ORDER BY g.consumer, g.account",
                    )
                    .storage()?;
                let rows = stmt.query_map([], gap_from_row).storage()?;
                rows.collect::<rusqlite::Result<Vec<_>>>().storage()
            })
            .await
    }

    /// Retention leaves a permit behind for every day of markers it removed
    /// (`outbox_retention_permits`, family `inbox`, with the rows it counted).
    async fn markers_pruned(&self) -> outbox_core::Result<bool> {
        self.shared
            .run(|conn| {
                conn.query_row(
                    "SELECT EXISTS (SELECT 1 FROM outbox_retention_permits
                                    WHERE family = 'inbox' AND rows > 0)",
                    [],
                    |row| row.get(0),
                )
                .storage()
            })
            .await
    }
}
