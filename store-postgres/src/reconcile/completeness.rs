//! `CompletenessStore` on PostgreSQL: the outbox read in commit order with its
//! delivery states, and the completeness check's own records, its checkpoint
//! (`reconcile_checkpoints`) and the ledger transactions it saw (`reconcile_seen`).

use std::collections::HashMap;

use async_trait::async_trait;
use outbox_core::reconcile::completeness::{
    CompletenessCheckpoint, CompletenessStore, EventCheck, SeenTransaction,
};
use outbox_core::{DeliveryState, EventId, OutboxEvent, Position, Store};
use sqlx::Row;
use uuid::Uuid;

use crate::PgStore;
use crate::error::PgResultExt;
use crate::position::{PgPosition, snapshot_after};
use crate::store::{corrupt, event_from_row, i64_field, u64_column};

#[async_trait]
impl CompletenessStore for PgStore {
    async fn completeness_checkpoint(
        &self,
        name: &str,
    ) -> outbox_core::Result<Option<CompletenessCheckpoint>> {
        let saved: Option<(Option<i64>, Option<Vec<u8>>)> =
            sqlx::query_as("SELECT ledger_tx, position FROM reconcile_checkpoints WHERE name = $1")
                .bind(name)
                .fetch_optional(self.pool())
                .await
                .storage()?;
        let Some((ledger_tx, position)) = saved else {
            return Ok(None);
        };
        let ledger_tx = ledger_tx
            .map(|tx| u64_column("reconcile_checkpoints.ledger_tx", tx))
            .transpose()?;
        // Decoded and made again, so the position renders as this store's
        // ("txid 812 row 4").
        let position = position
            .map(|bytes| {
                Position::from_bytes(&bytes)
                    .and_then(|p| PgPosition::decode(&p))
                    .map(PgPosition::encode)
                    .map_err(|e| corrupt("reconcile_checkpoints.position", e))
            })
            .transpose()?;
        Ok(Some(CompletenessCheckpoint {
            ledger_tx,
            position,
        }))
    }

    /// One upsert; each side keeps the greater of the saved value and the given one
    /// (`greatest` ignores NULL, so a side given as `None` keeps what is saved; bytea
    /// compares by bytes, the positions' order).
    async fn save_completeness_checkpoint(
        &self,
        name: &str,
        checkpoint: &CompletenessCheckpoint,
    ) -> outbox_core::Result<()> {
        let ledger_tx = checkpoint
            .ledger_tx
            .map(|tx| i64_field("ledger_tx", tx))
            .transpose()?;
        // Only positions `events_to_check` hands out (the polling reader's snapshot
        // positions) are kept: anything else is refused before anything is written.
        if checkpoint.position.is_some() {
            snapshot_after(checkpoint.position)?;
        }
        let position = checkpoint.position.map(|p| p.as_bytes().to_vec());
        sqlx::query(
            "INSERT INTO reconcile_checkpoints AS c (name, ledger_tx, position, saved_at)
             VALUES ($1, $2, $3, clock_timestamp())
             ON CONFLICT (name) DO UPDATE SET
                ledger_tx = greatest(c.ledger_tx, excluded.ledger_tx),
                position = greatest(c.position, excluded.position),
                saved_at = excluded.saved_at",
        )
        .bind(name)
        .bind(ledger_tx)
        .bind(position)
        .execute(self.pool())
        .await
        .storage()
        .map(drop)
    }

    async fn events_by_ids(
        &self,
        ids: &[EventId],
    ) -> outbox_core::Result<HashMap<EventId, (OutboxEvent, DeliveryState)>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let uuids: Vec<Uuid> = ids.iter().map(EventId::as_uuid).collect();
        let rows = sqlx::query(
            "SELECT position, event_id, account, sequence, payload, created_at, txid::text AS txid_text
             FROM outbox_events WHERE event_id = ANY($1::uuid[])",
        )
        .bind(uuids)
        .fetch_all(self.pool())
        .await
        .storage()?;
        let events = rows
            .iter()
            .map(event_from_row)
            .collect::<outbox_core::Result<Vec<_>>>()?;
        let found: Vec<EventId> = events.iter().map(|e| e.event_id).collect();
        let mut states = self.delivery_states(&found).await?;
        Ok(events
            .into_iter()
            .map(|event| {
                let state = states.remove(&event.event_id).unwrap_or_default();
                (event.event_id, (event, state))
            })
            .collect())
    }

    /// Two index lookups (`reconcile_seen_event`, `reconcile_seen_reference`) joined
    /// by a UNION, so a transaction matching both comes back once.
    async fn seen_matching(
        &self,
        name: &str,
        event_ids: &[String],
        references: &[String],
    ) -> outbox_core::Result<Vec<SeenTransaction>> {
        if event_ids.is_empty() && references.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, String, Option<String>)> = sqlx::query_as(
            "SELECT ledger_tx, event_id, reference FROM reconcile_seen
             WHERE name = $1 AND event_id = ANY($2::text[])
             UNION
             SELECT ledger_tx, event_id, reference FROM reconcile_seen
             WHERE name = $1 AND reference = ANY($3::text[])
             ORDER BY ledger_tx",
        )
        .bind(name)
        .bind(event_ids)
        .bind(references)
        .fetch_all(self.pool())
        .await
        .storage()?;
        rows.into_iter()
            .map(|(tx, event_id, reference)| {
                Ok(SeenTransaction {
                    ledger_tx: u64_column("reconcile_seen.ledger_tx", tx)?,
                    event_id,
                    reference,
                })
            })
            .collect()
    }

    /// One statement for the whole batch: the rows travel as three arrays (`unnest`),
    /// and a transaction already recorded under `name` is skipped by the primary key.
    async fn record_seen(&self, name: &str, seen: &[SeenTransaction]) -> outbox_core::Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut ledger_txs = Vec::with_capacity(seen.len());
        let mut event_ids = Vec::with_capacity(seen.len());
        let mut references = Vec::with_capacity(seen.len());
        for s in seen {
            ledger_txs.push(i64_field("seen.ledger_tx", s.ledger_tx)?);
            event_ids.push(s.event_id.as_str());
            references.push(s.reference.as_deref());
        }
        sqlx::query(
            "INSERT INTO reconcile_seen (name, ledger_tx, event_id, reference)
             SELECT $1, t.ledger_tx, t.event_id, t.reference
             FROM unnest($2::bigint[], $3::text[], $4::text[]) AS t(ledger_tx, event_id, reference)
             ON CONFLICT (name, ledger_tx) DO NOTHING",
        )
        .bind(name)
        .bind(ledger_txs)
        .bind(event_ids)
        .bind(references)
        .execute(self.pool())
        .await
        .storage()
        .map(drop)
    }

    /// The page is `read_committed`'s own (its positions, and its horizon: only rows
    /// below `pg_snapshot_xmin`, so an event that commits later with a lower position
    /// is delayed to a later page, never skipped); then one query for the page's
    /// delivery records and one for the transactions seen.
    async fn events_to_check(
        &self,
        name: &str,
        after: Option<Position>,
        limit: usize,
    ) -> outbox_core::Result<Vec<EventCheck>> {
        let events = Store::read_committed(self, after, limit).await?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<EventId> = events.iter().map(|e| e.event_id).collect();
        let mut states = self.delivery_states(&ids).await?;
        let texts: Vec<String> = ids.iter().map(EventId::to_string).collect();
        let rows = sqlx::query(
            "SELECT event_id, ledger_tx FROM reconcile_seen
             WHERE name = $1 AND event_id = ANY($2::text[])
             ORDER BY event_id, ledger_tx",
        )
        .bind(name)
        .bind(&texts)
        .fetch_all(self.pool())
        .await
        .storage()?;
        let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
        for row in &rows {
            let tx = u64_column("reconcile_seen.ledger_tx", row.get("ledger_tx"))?;
            seen.entry(row.get("event_id")).or_default().push(tx);
        }
        Ok(events
            .into_iter()
            .zip(texts)
            .map(|(event, text)| EventCheck {
                delivery: states.remove(&event.event_id).unwrap_or_default(),
                seen: seen.remove(&text).unwrap_or_default(),
                event,
            })
            .collect())
    }
}
