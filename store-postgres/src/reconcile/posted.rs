//! `PostedHistory` on PostgreSQL: the events the relay last posted on some accounts,
//! for the balance check to name what came before a drift.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::reconcile::balances::{PostedEvent, PostedHistory};
use outbox_core::{Account, EventId};
use sqlx::Row;
use uuid::Uuid;

use super::limit_param;
use crate::PgStore;
use crate::error::PgResultExt;
use crate::store::{corrupt, u64_column};

#[async_trait]
impl PostedHistory for PgStore {
    /// An event counts as posted when its first terminal delivery record (the one
    /// `DeliveryState::terminal` folds to) is accepted or replayed; that record's
    /// ledger transaction is returned. The accounts' rows come from the
    /// `(account, sequence)` index, each event's first terminal record from the
    /// deliveries' `(event_id, id)` key; only rows at or before `before` are sorted.
    async fn last_posted(
        &self,
        accounts: &[Account],
        before: DateTime<Utc>,
        limit: usize,
    ) -> outbox_core::Result<Vec<PostedEvent>> {
        if accounts.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let accounts: Vec<&str> = accounts.iter().map(Account::as_str).collect();
        let rows = sqlx::query(
            "SELECT e.account, e.sequence, e.event_id, d.ledger_tx_id
             FROM outbox_events e
             CROSS JOIN LATERAL (
                 SELECT t.outcome, t.ledger_tx_id FROM outbox_deliveries t
                 WHERE t.event_id = e.event_id AND t.outcome <> 'failed'
                 ORDER BY t.id LIMIT 1) d
             WHERE e.account = ANY($1::text[])
               AND e.created_at <= $2
               AND d.outcome IN ('accepted', 'replayed')
             ORDER BY e.created_at DESC, e.sequence DESC
             LIMIT $3",
        )
        .bind(&accounts)
        .bind(before)
        .bind(limit_param(limit))
        .fetch_all(self.pool())
        .await
        .storage()?;
        rows.iter()
            .map(|row| {
                let account: String = row.get("account");
                Ok(PostedEvent {
                    account: Account::parse(&account)
                        .map_err(|e| corrupt("outbox_events.account", e))?,
                    sequence: u64_column("outbox_events.sequence", row.get("sequence"))?,
                    event_id: EventId::from_uuid(row.get::<Uuid, _>("event_id"))
                        .map_err(|e| corrupt("outbox_events.event_id", e))?,
                    ledger_tx: row
                        .get::<Option<i64>, _>("ledger_tx_id")
                        .map(|tx| u64_column("outbox_deliveries.ledger_tx_id", tx))
                        .transpose()?,
                })
            })
            .collect()
    }
}
