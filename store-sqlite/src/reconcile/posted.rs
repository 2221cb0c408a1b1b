//! `PostedHistory` on SQLite: the events the relay last posted on some accounts, for
//! the balance check to name what came before a drift.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::reconcile::balances::{PostedEvent, PostedHistory};
use outbox_core::{Account, EventId};
use rusqlite::params;

use super::{limit_param, texts_json, unsigned};
use crate::SqliteStore;
use crate::error::SqliteResultExt;
use crate::store::internal;

#[async_trait]
impl PostedHistory for SqliteStore {
    /// An event counts as posted when its first terminal delivery record (the one
    /// `DeliveryState::terminal` folds to) is accepted or replayed; that record's
    /// ledger transaction is returned. The accounts' rows come from the
    /// `(account, sequence)` index; only their rows at or before `before` are sorted.
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
        let accounts = texts_json(&accounts);
        let before = before.timestamp_micros();
        let limit = limit_param(limit);
        self.shared
            .run(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT e.account, e.sequence, e.event_id, d.ledger_tx_id
                         FROM outbox_events e
                         JOIN outbox_deliveries d ON d.id = (
                             SELECT min(t.id) FROM outbox_deliveries t
                             WHERE t.event_id = e.event_id AND t.outcome <> 'failed')
                         WHERE e.account IN (SELECT value FROM json_each(?1))
                           AND e.created_at <= ?2
                           AND d.outcome IN ('accepted', 'replayed')
                         ORDER BY e.created_at DESC, e.sequence DESC
                         LIMIT ?3",
                    )
                    .storage()?;
                let rows = stmt
                    .query_map(params![accounts, before, limit], |row| {
                        let account: String = row.get(0)?;
                        let event_id: String = row.get(2)?;
                        Ok(PostedEvent {
                            account: Account::parse(&account)
                                .map_err(internal("outbox_events.account"))?,
                            sequence: unsigned("outbox_events.sequence", row.get(1)?)?,
                            event_id: EventId::parse(&event_id)
                                .map_err(internal("outbox_events.event_id"))?,
                            ledger_tx: row
                                .get::<_, Option<i64>>(3)?
                                .map(|tx| unsigned("outbox_deliveries.ledger_tx_id", tx))
                                .transpose()?,
                        })
                    })
                    .storage()?;
                rows.collect::<rusqlite::Result<Vec<_>>>().storage()
            })
            .await
    }
}
