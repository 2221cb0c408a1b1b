//! `InboxSequences` on PostgreSQL: a consumer database's processed markers, its gap
//! queue, and whether retention's permits show markers removed. Read-only.

use async_trait::async_trait;
use outbox_core::reconcile::sequences::{AppliedMarker, ConsumerGap, InboxSequences, MarkerKey};
use outbox_core::{Account, HeldGap, MessageKind};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::limit_param;
use crate::PgStore;
use crate::error::PgResultExt;
use crate::store::{corrupt, i64_field, u64_column};

/// The columns both marker queries select and their order. Text compares as bytes
/// (`COLLATE "C"`), the order of the core's `MarkerKey` whatever the database's
/// collation; the index `inbox_messages_by_sequence` (migration 9) has exactly these
/// columns and collations, so it serves the order and the row comparison.
macro_rules! markers_sql {
    ($where:literal) => {
        concat!(
            r#"SELECT consumer, account, sequence, instruction_id, kind, applied_at
               FROM inbox_messages "#,
            $where,
            r#" ORDER BY consumer COLLATE "C", account COLLATE "C", sequence, instruction_id COLLATE "C"
               LIMIT $1"#
        )
    };
}

pub(crate) fn marker_from_row(row: &PgRow) -> outbox_core::Result<AppliedMarker> {
    let account: String = row.get("account");
    let kind: String = row.get("kind");
    Ok(AppliedMarker {
        consumer: row.get("consumer"),
        account: Account::parse(&account).map_err(|e| corrupt("inbox_messages.account", e))?,
        sequence: u64_column("inbox_messages.sequence", row.get("sequence"))?,
        instruction_id: row.get("instruction_id"),
        kind: MessageKind::parse(&kind).ok_or_else(|| corrupt("inbox_messages.kind", &kind))?,
        applied_at: row.get("applied_at"),
    })
}

fn gap_from_row(row: &PgRow) -> outbox_core::Result<ConsumerGap> {
    let account: String = row.get("account");
    Ok(ConsumerGap {
        consumer: row.get("consumer"),
        gap: HeldGap {
            account: Account::parse(&account).map_err(|e| corrupt("inbox_held.account", e))?,
            last_applied: u64_column("inbox_accounts.last_applied", row.get("last_applied"))?,
            lowest_held: u64_column("inbox_held.sequence", row.get("lowest"))?,
            held_at: row.get("held_at"),
        },
        held: u64_column("inbox_held count", row.get("held"))?,
    })
}

#[async_trait]
impl InboxSequences for PgStore {
    async fn markers_after(
        &self,
        after: Option<&MarkerKey>,
        limit: usize,
    ) -> outbox_core::Result<Vec<AppliedMarker>> {
        let limit = limit_param(limit);
        let rows = match after {
            None => {
                sqlx::query(markers_sql!(""))
                    .bind(limit)
                    .fetch_all(self.pool())
                    .await
            }
            Some(key) => {
                sqlx::query(markers_sql!(
                    r#"WHERE (consumer COLLATE "C", account COLLATE "C", sequence, instruction_id COLLATE "C")
                             > ($2, $3, $4, $5)"#
                ))
                .bind(limit)
                .bind(&key.consumer)
                .bind(&key.account)
                .bind(i64_field("after.sequence", key.sequence)?)
                .bind(&key.instruction_id)
                .fetch_all(self.pool())
                .await
            }
        }
        .storage()?;
        rows.iter().map(marker_from_row).collect()
    }

    /// One row per (consumer, account) with held messages: the lowest held one (its
    /// `held_at` dates the gap), how many are held, and the account's high-water mark
    /// (0 without an `inbox_accounts` row).
    async fn held_gaps(&self) -> outbox_core::Result<Vec<ConsumerGap>> {
        let rows = sqlx::query(
            r#"SELECT g.consumer, g.account, coalesce(a.last_applied, 0) AS last_applied,
                      g.lowest, h.held_at, g.held
               FROM (SELECT consumer, account, min(sequence) AS lowest, count(*) AS held
                     FROM inbox_held GROUP BY consumer, account) g
               JOIN inbox_held h
                 ON h.consumer = g.consumer AND h.account = g.account AND h.sequence = g.lowest
               LEFT JOIN inbox_accounts a ON a.consumer = g.consumer AND a.account = g.account
               ORDER BY g.consumer COLLATE "C", g.account COLLATE "C""#,
        )
        .fetch_all(self.pool())
        .await
        .storage()?;
        rows.iter().map(gap_from_row).collect()
    }

    /// Retention leaves a permit behind for every day of markers it removed
    /// (`outbox_retention_permits`, family `inbox`, with the rows it counted).
    async fn markers_pruned(&self) -> outbox_core::Result<bool> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM outbox_retention_permits
                            WHERE family = 'inbox' AND rows > 0)",
        )
        .fetch_one(self.pool())
        .await
        .storage()
    }
}
