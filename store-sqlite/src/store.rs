//! `SqliteStore`: the relay-side `Store` on one SQLite file.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{
    Account, DeliveryOutcome, DeliveryRecord, DeliveryState, Error, EventId, Exception,
    ExceptionQuery, Lag, NewException, OutboxEvent, Payload, PollingRelay, Position, Resolution,
    Store, StoreCapabilities, Wakeup,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::config::SqliteConfig;
use crate::connection::connect;
use crate::error::SqliteResultExt;
use crate::exceptions::{self, insert_exception};
use crate::position::{position_row, row_position};
use crate::shared::SharedConnection;
use crate::{time, wakeup};

/// The outbox store on SQLite. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) shared: SharedConnection,
    wakeup: Wakeup,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.config().path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) and migrates the database.
    pub async fn open(config: SqliteConfig) -> outbox_core::Result<Self> {
        let shared = SharedConnection::open(config).await?;
        // Keyed on the path SQLite resolved, so every store of one file shares it.
        let wakeup = shared
            .run(|conn| Ok(wakeup::for_path(conn.path().unwrap_or_default())))
            .await?;
        Ok(Self { shared, wakeup })
    }

    pub fn path(&self) -> &Path {
        &self.shared.config().path
    }

    pub fn config(&self) -> &SqliteConfig {
        self.shared.config()
    }

    /// A new connection to the same file, for the caller's own transactions.
    pub fn connect(&self) -> outbox_core::Result<Connection> {
        connect(self.shared.config())
    }

    /// The default polling relay over this store, woken by enqueues in this process.
    pub async fn polling_relay(&self, name: &str) -> outbox_core::Result<PollingRelay<Self>> {
        PollingRelay::open(self.clone(), name, Some(self.wakeup.clone())).await
    }
}

/// The row a read continues after; 0 sorts before every row (rowids start at 1).
pub(crate) fn row_after(position: Option<Position>) -> outbox_core::Result<i64> {
    position.as_ref().map_or(Ok(0), position_row)
}

pub(crate) fn internal(what: &str) -> impl Fn(outbox_core::Error) -> rusqlite::Error + '_ {
    move |e| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("{what}: {e}").into(),
        )
    }
}

pub(crate) fn event_from_row(row: &Row<'_>) -> rusqlite::Result<OutboxEvent> {
    let event_id: String = row.get(1)?;
    let account: String = row.get(2)?;
    Ok(OutboxEvent {
        position: row_position(row.get(0)?),
        event_id: EventId::parse(&event_id).map_err(internal("outbox_events.event_id"))?,
        account: Account::parse(&account).map_err(internal("outbox_events.account"))?,
        sequence: row.get::<_, i64>(3)? as u64,
        payload: Payload::from_stored(row.get(4)?),
        created_at: time::from_micros(row.get(5)?),
    })
}

pub(crate) fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<DeliveryRecord> {
    let event_id: String = row.get(0)?;
    let outcome: String = row.get(2)?;
    Ok(DeliveryRecord {
        event_id: EventId::parse(&event_id).map_err(internal("outbox_deliveries.event_id"))?,
        attempt: row.get(1)?,
        outcome: DeliveryOutcome::parse(&outcome).ok_or_else(|| {
            internal("outbox_deliveries.outcome")(Error::invalid("outcome", outcome.clone()))
        })?,
        ledger_tx_id: row.get::<_, Option<i64>>(3)?.map(|id| id as u64),
        error_code: row.get(4)?,
        detail: row.get(5)?,
        at: time::from_micros(row.get(6)?),
    })
}

/// Up to `limit` events after row `after`, in commit order: `read_committed`'s query,
/// shared with the reconciliation reads so both walk the outbox alike.
pub(crate) fn committed_after(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> outbox_core::Result<Vec<OutboxEvent>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT position, event_id, account, sequence, payload, created_at
             FROM outbox_events WHERE position > ?1 ORDER BY position LIMIT ?2",
        )
        .storage()?;
    let rows = stmt
        .query_map(
            params![after, i64::try_from(limit).unwrap_or(i64::MAX)],
            event_from_row,
        )
        .storage()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().storage()
}

/// `ids` as one JSON array of their texts, for `IN (SELECT value FROM json_each(?))`:
/// one statement for a whole batch. UUIDs need no escaping.
pub(crate) fn event_ids_json(ids: &[EventId]) -> String {
    let quoted: Vec<String> = ids.iter().map(|id| format!("\"{id}\"")).collect();
    format!("[{}]", quoted.join(","))
}

/// The delivery states of the events in `ids_json` (see [`event_ids_json`]) that have
/// records, in one query.
pub(crate) fn delivery_states_of(
    conn: &Connection,
    ids_json: &str,
) -> outbox_core::Result<HashMap<EventId, DeliveryState>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
             FROM outbox_deliveries WHERE event_id IN (SELECT value FROM json_each(?1))
             ORDER BY id",
        )
        .storage()?;
    let rows = stmt.query_map([ids_json], delivery_from_row).storage()?;
    let records = rows.collect::<rusqlite::Result<Vec<_>>>().storage()?;
    Ok(outbox_core::store::fold_delivery_states(records))
}

#[async_trait]
impl Store for SqliteStore {
    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(false, false)
    }

    async fn read_committed(
        &self,
        after: Option<Position>,
        limit: usize,
    ) -> outbox_core::Result<Vec<OutboxEvent>> {
        let after = row_after(after)?;
        self.shared
            .run(move |conn| committed_after(conn, after, limit))
            .await
    }

    async fn load_cursor(&self, relay: &str) -> outbox_core::Result<Option<Position>> {
        let relay = relay.to_owned();
        self.shared
            .run(move |conn| {
                conn.query_row(
                    "SELECT position FROM relay_cursors WHERE relay = ?1",
                    [relay],
                    |row| row.get(0),
                )
                .optional()
                .storage()
                .map(|p| p.map(row_position))
            })
            .await
    }

    async fn save_cursor(&self, relay: &str, position: Position) -> outbox_core::Result<()> {
        let relay = relay.to_owned();
        let row = position_row(&position)?;
        self.shared.run(move |conn| {
            conn.prepare_cached(
                "INSERT INTO relay_cursors (relay, position, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (relay) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
                 WHERE excluded.position > relay_cursors.position",
            )
            .storage()?
            .execute(params![relay, row, time::now_micros()])
            .storage()
            .map(drop)
        })
        .await
    }

    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> outbox_core::Result<()> {
        let records = records.to_vec();
        self.shared.run(move |conn| {
            let tx = conn.transaction().storage()?;
            {
                let mut stmt = tx
                    .prepare_cached(
                        "INSERT INTO outbox_deliveries (event_id, attempt, outcome, ledger_tx_id, error_code, detail, at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )
                    .storage()?;
                for r in &records {
                    stmt.execute(params![
                        r.event_id.to_string(),
                        r.attempt,
                        r.outcome.as_str(),
                        r.ledger_tx_id.map(|id| id as i64),
                        r.error_code,
                        r.detail,
                        r.at.timestamp_micros()
                    ])
                    .storage()?;
                }
            }
            tx.commit().storage()
        })
        .await
    }

    async fn deliveries(&self, event_id: EventId) -> outbox_core::Result<Vec<DeliveryRecord>> {
        self.shared
            .run(move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
                     FROM outbox_deliveries WHERE event_id = ?1 ORDER BY id",
                    )
                    .storage()?;
                let rows = stmt
                    .query_map([event_id.to_string()], delivery_from_row)
                    .storage()?;
                rows.collect::<rusqlite::Result<Vec<_>>>().storage()
            })
            .await
    }

    /// One query for the whole batch (the ids travel as one JSON array).
    async fn delivery_states(
        &self,
        event_ids: &[EventId],
    ) -> outbox_core::Result<HashMap<EventId, DeliveryState>> {
        if event_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let ids = event_ids_json(event_ids);
        self.shared
            .run(move |conn| delivery_states_of(conn, &ids))
            .await
    }

    async fn has_deliveries(&self) -> outbox_core::Result<bool> {
        self.shared
            .run(|conn| {
                conn.query_row(
                    "SELECT EXISTS (SELECT 1 FROM outbox_deliveries)",
                    [],
                    |row| row.get(0),
                )
                .storage()
            })
            .await
    }

    async fn raise_exception(&self, exception: &NewException) -> outbox_core::Result<bool> {
        let exception = exception.clone();
        self.shared
            .run(move |conn| insert_exception(conn, &exception))
            .await
    }

    async fn exceptions(&self) -> outbox_core::Result<Vec<Exception>> {
        self.exceptions_matching(&ExceptionQuery::default()).await
    }

    async fn exceptions_matching(
        &self,
        query: &ExceptionQuery,
    ) -> outbox_core::Result<Vec<Exception>> {
        let query = query.clone();
        self.shared
            .run(move |conn| exceptions::exceptions_matching(conn, &query))
            .await
    }

    async fn resolve_exception(
        &self,
        id: i64,
        resolved_by: &str,
        note: &str,
    ) -> outbox_core::Result<Resolution> {
        let (resolved_by, note) = (resolved_by.to_owned(), note.to_owned());
        self.shared
            .run(move |conn| exceptions::resolve_exception(conn, id, &resolved_by, &note))
            .await
    }

    async fn lag(&self, relay: &str) -> outbox_core::Result<Lag> {
        let relay = relay.to_owned();
        self.shared.run(move |conn| {
            let (pending, oldest): (i64, Option<i64>) = conn
                .query_row(
                    "SELECT count(*), min(created_at) FROM outbox_events
                     WHERE position > coalesce((SELECT position FROM relay_cursors WHERE relay = ?1), 0)",
                    [relay],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .storage()?;
            let now = time::now_micros();
            Ok(Lag {
                pending: pending as u64,
                oldest_pending_age: oldest.map(|at| Duration::from_micros(now.saturating_sub(at).max(0) as u64)),
            })
        })
        .await
    }
}
