//! `CompletenessStore` on SQLite: the outbox read in commit order with its delivery
//! states, and the completeness check's own records, its checkpoint
//! (`reconcile_checkpoints`) and the ledger transactions it saw (`reconcile_seen`).

use std::collections::HashMap;

use async_trait::async_trait;
use outbox_core::reconcile::completeness::{
    CompletenessCheckpoint, CompletenessStore, EventCheck, SeenTransaction,
};
use outbox_core::{DeliveryState, Error, ErrorKind, EventId, OutboxEvent, Position};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::{texts_json, unsigned};
use crate::SqliteStore;
use crate::error::SqliteResultExt;
use crate::position::{position_row, row_position};
use crate::store::{
    committed_after, delivery_states_of, event_from_row, event_ids_json, row_after,
};
use crate::time;

/// A ledger transaction id as SQLite's integer.
fn ledger_tx_param(field: &str, tx: u64) -> outbox_core::Result<i64> {
    i64::try_from(tx)
        .map_err(|_| Error::invalid(field, format!("{tx} does not fit SQLite's integer")))
}

fn seen_from_row(row: &Row<'_>) -> rusqlite::Result<SeenTransaction> {
    Ok(SeenTransaction {
        ledger_tx: unsigned("reconcile_seen.ledger_tx", row.get(0)?)?,
        event_id: row.get(1)?,
        reference: row.get(2)?,
    })
}

/// The events of `ids` the outbox holds, in one query.
fn events_of(conn: &Connection, ids_json: &str) -> outbox_core::Result<Vec<OutboxEvent>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT position, event_id, account, sequence, payload, created_at
             FROM outbox_events WHERE event_id IN (SELECT value FROM json_each(?1))",
        )
        .storage()?;
    let rows = stmt.query_map([ids_json], event_from_row).storage()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().storage()
}

/// The transactions seen under `name` for each event of `ids`, ascending, in one query.
fn seen_of(
    conn: &Connection,
    name: &str,
    ids_json: &str,
) -> outbox_core::Result<HashMap<String, Vec<u64>>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT event_id, ledger_tx FROM reconcile_seen
             WHERE name = ?1 AND event_id IN (SELECT value FROM json_each(?2))
             ORDER BY event_id, ledger_tx",
        )
        .storage()?;
    let rows = stmt
        .query_map(params![name, ids_json], |row| {
            Ok((
                row.get::<_, String>(0)?,
                unsigned("reconcile_seen.ledger_tx", row.get(1)?)?,
            ))
        })
        .storage()?;
    let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
    for row in rows {
        let (event_id, tx) = row.storage()?;
        seen.entry(event_id).or_default().push(tx);
    }
    Ok(seen)
}

#[async_trait]
impl CompletenessStore for SqliteStore {
    async fn completeness_checkpoint(
        &self,
        name: &str,
    ) -> outbox_core::Result<Option<CompletenessCheckpoint>> {
        let name = name.to_owned();
        let saved: Option<(Option<i64>, Option<Vec<u8>>)> = self
            .shared
            .run(move |conn| {
                conn.query_row(
                    "SELECT ledger_tx, position FROM reconcile_checkpoints WHERE name = ?1",
                    [name],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .storage()
            })
            .await?;
        let Some((ledger_tx, position)) = saved else {
            return Ok(None);
        };
        let ledger_tx = ledger_tx
            .map(|tx| unsigned("reconcile_checkpoints.ledger_tx", tx))
            .transpose()
            .storage()?;
        // Decoded and made again, so the position renders as this store's ("row 42").
        let position = position
            .map(|bytes| {
                Position::from_bytes(&bytes)
                    .and_then(|p| position_row(&p))
                    .map(row_position)
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::Internal,
                            format!("reconcile_checkpoints.position: {e}"),
                        )
                    })
            })
            .transpose()?;
        Ok(Some(CompletenessCheckpoint {
            ledger_tx,
            position,
        }))
    }

    /// One upsert; each side keeps the later of the saved value and the given one
    /// (BLOB comparison is byte order, the positions' order). A side given as `None`
    /// keeps what is saved.
    async fn save_completeness_checkpoint(
        &self,
        name: &str,
        checkpoint: &CompletenessCheckpoint,
    ) -> outbox_core::Result<()> {
        let name = name.to_owned();
        let ledger_tx = checkpoint
            .ledger_tx
            .map(|tx| ledger_tx_param("ledger_tx", tx))
            .transpose()?;
        let position = match &checkpoint.position {
            None => None,
            Some(p) => {
                // Refuses another store's position before anything is written.
                position_row(p)?;
                Some(p.as_bytes().to_vec())
            }
        };
        self.shared
            .run(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO reconcile_checkpoints (name, ledger_tx, position, saved_at)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (name) DO UPDATE SET
                        ledger_tx = CASE WHEN reconcile_checkpoints.ledger_tx IS NULL
                                           OR excluded.ledger_tx > reconcile_checkpoints.ledger_tx
                                         THEN excluded.ledger_tx ELSE reconcile_checkpoints.ledger_tx END,
                        position = CASE WHEN reconcile_checkpoints.position IS NULL
                                          OR excluded.position > reconcile_checkpoints.position
                                        THEN excluded.position ELSE reconcile_checkpoints.position END,
                        saved_at = excluded.saved_at",
                )
                .storage()?
                .execute(params![name, ledger_tx, position, time::now_micros()])
                .storage()
                .map(drop)
            })
            .await
    }

    async fn events_by_ids(
        &self,
        ids: &[EventId],
    ) -> outbox_core::Result<HashMap<EventId, (OutboxEvent, DeliveryState)>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let ids = event_ids_json(ids);
        self.shared
            .run(move |conn| {
                // One read transaction: the events and their records from one snapshot.
                let tx = conn.transaction().storage()?;
                let events = events_of(&tx, &ids)?;
                let mut states = delivery_states_of(&tx, &ids)?;
                tx.commit().storage()?;
                Ok(events
                    .into_iter()
                    .map(|event| {
                        let state = states.remove(&event.event_id).unwrap_or_default();
                        (event.event_id, (event, state))
                    })
                    .collect())
            })
            .await
    }

    /// Two index lookups joined by a UNION, so a transaction matching both comes back
    /// once. The indexes are named: without statistics the planner prefers walking
    /// the primary key in `ledger_tx` order (for the ORDER BY), every row of `name`.
    async fn seen_matching(
        &self,
        name: &str,
        event_ids: &[String],
        references: &[String],
    ) -> outbox_core::Result<Vec<SeenTransaction>> {
        if event_ids.is_empty() && references.is_empty() {
            return Ok(Vec::new());
        }
        let name = name.to_owned();
        let event_ids = texts_json(event_ids);
        let references = texts_json(references);
        self.shared
            .run(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT ledger_tx, event_id, reference FROM reconcile_seen INDEXED BY reconcile_seen_event
                         WHERE name = ?1 AND event_id IN (SELECT value FROM json_each(?2))
                         UNION
                         SELECT ledger_tx, event_id, reference FROM reconcile_seen INDEXED BY reconcile_seen_reference
                         WHERE name = ?1 AND reference IN (SELECT value FROM json_each(?3))
                         ORDER BY ledger_tx",
                    )
                    .storage()?;
                let rows = stmt
                    .query_map(params![name, event_ids, references], seen_from_row)
                    .storage()?;
                rows.collect::<rusqlite::Result<Vec<_>>>().storage()
            })
            .await
    }

    /// One prepared statement, run for each transaction inside one transaction: a
    /// page of thousands is one commit (one fsync), all or nothing.
    async fn record_seen(&self, name: &str, seen: &[SeenTransaction]) -> outbox_core::Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let name = name.to_owned();
        let rows = seen
            .iter()
            .map(|s| {
                Ok((
                    ledger_tx_param("seen.ledger_tx", s.ledger_tx)?,
                    s.event_id.clone(),
                    s.reference.clone(),
                ))
            })
            .collect::<outbox_core::Result<Vec<_>>>()?;
        self.shared
            .run(move |conn| {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .storage()?;
                {
                    let mut stmt = tx
                        .prepare_cached(
                            "INSERT INTO reconcile_seen (name, ledger_tx, event_id, reference, seen_at)
                             VALUES (?1, ?2, ?3, ?4, ?5)
                             ON CONFLICT (name, ledger_tx) DO NOTHING",
                        )
                        .storage()?;
                    let now = time::now_micros();
                    for (ledger_tx, event_id, reference) in &rows {
                        stmt.execute(params![name, ledger_tx, event_id, reference, now])
                            .storage()?;
                    }
                }
                tx.commit().storage()
            })
            .await
    }

    /// The page `read_committed` would return (rowid order is commit order on SQLite),
    /// then its delivery records and the transactions seen for it: three statements in
    /// one read transaction, whatever the page size.
    async fn events_to_check(
        &self,
        name: &str,
        after: Option<Position>,
        limit: usize,
    ) -> outbox_core::Result<Vec<EventCheck>> {
        let after = row_after(after)?;
        let name = name.to_owned();
        self.shared
            .run(move |conn| {
                let tx = conn.transaction().storage()?;
                let events = committed_after(&tx, after, limit)?;
                if events.is_empty() {
                    return Ok(Vec::new());
                }
                let ids: Vec<EventId> = events.iter().map(|e| e.event_id).collect();
                let ids = event_ids_json(&ids);
                let mut states = delivery_states_of(&tx, &ids)?;
                let mut seen = seen_of(&tx, &name, &ids)?;
                tx.commit().storage()?;
                Ok(events
                    .into_iter()
                    .map(|event| EventCheck {
                        delivery: states.remove(&event.event_id).unwrap_or_default(),
                        seen: seen.remove(&event.event_id.to_string()).unwrap_or_default(),
                        event,
                    })
                    .collect())
            })
            .await
    }
}
