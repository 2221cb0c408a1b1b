//! `PgStore`: the relay-side `Store` on a PostgreSQL pool, with the commit-order-safe
//! (txid, position) reader.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use outbox_core::{
    Account, DeliveryOutcome, DeliveryRecord, DeliveryState, Error, ErrorKind, EventId, Exception,
    ExceptionQuery, Lag, NewException, OutboxEvent, Payload, PollingRelay, Position, Resolution,
    Store, StoreCapabilities, Wakeup,
};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tokio::sync::{OnceCell, watch};
use uuid::Uuid;

use crate::config::PgConfig;
use crate::connection::{connect, ensure_current_partitions, run_migrations};
use crate::cursors::CursorTable;
use crate::error::PgResultExt;
use crate::exceptions::{self, insert_exception};
use crate::fleet::Fence;
use crate::horizon::{self, Horizon};
use crate::notify;
use crate::partitions::{self, TablePartition};
use crate::position::{PgPosition, parse_xid8, snapshot_after, xid8_text};

/// The outbox store on PostgreSQL. Cheap to clone; clones share one pool, one
/// LISTEN task and one partition-maintenance task, which stop when the last clone is
/// dropped.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
    /// Set on a fleet partition's view: only its accounts, fenced cursor writes.
    scope: Option<Scope>,
}

/// One fleet partition of the accounts (`hashtextextended(account, 0)` modulo the
/// partition count) and the lock that must still be held for its cursor to move.
#[derive(Debug, Clone, Copy)]
struct Scope {
    partition: i32,
    partitions: i32,
    fence: Option<Fence>,
}

struct Inner {
    pool: PgPool,
    /// Every cursor read and write goes through it (the crate's one cursor owner).
    cursors: CursorTable,
    config: Option<PgConfig>,
    wakeup: Wakeup,
    /// Set once the LISTEN task runs.
    listening: OnceCell<()>,
    maintaining: OnceCell<()>,
    /// Background tasks end when this sender is dropped with the store.
    stop: watch::Sender<()>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("config", &self.inner.config)
            .field("listening", &self.inner.listening.initialized())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects, applies the migrations and makes sure the daily partitions around
    /// today exist.
    ///
    /// Should creating a partition time out on its lock (a long transaction holds
    /// `outbox_events`), the store opens anyway with a warning: rows still land in
    /// the default partition, and the next maintenance run creates the partitions.
    ///
    /// # Errors
    /// `InvalidInput` for a bad URL or schema; storage errors (transient when the
    /// server cannot be reached).
    pub async fn open(config: PgConfig) -> outbox_core::Result<Self> {
        let pool = connect(&config).await?;
        run_migrations(&pool, &config).await?;
        match ensure_current_partitions(&pool, &config).await {
            Ok(_) => {}
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "outbox partitions not created at open; will retry");
            }
            Err(e) => return Err(e),
        }
        Ok(Self::build(pool, Some(config)))
    }

    /// A store over an existing pool whose connections already find the outbox tables
    /// (migrated by [`crate::migrate`]). Runs no migration.
    pub fn from_pool(pool: PgPool) -> Self {
        Self::build(pool, None)
    }

    fn build(pool: PgPool, config: Option<PgConfig>) -> Self {
        let (stop, _) = watch::channel(());
        Self {
            inner: Arc::new(Inner {
                pool,
                cursors: CursorTable::on_search_path(),
                config,
                // Writers notify only while a relay waits (crate::notify).
                wakeup: Wakeup::on_demand(),
                listening: OnceCell::new(),
                maintaining: OnceCell::new(),
                stop,
            }),
            scope: None,
        }
    }

    /// A view of fleet partition `partition` of `partitions`: reads return only its
    /// accounts, and with a `fence` a cursor write succeeds only while that advisory
    /// lock is held (an instance that lost the partition cannot move its cursor).
    /// Shares the pool and background tasks.
    ///
    /// # Errors
    /// `InvalidInput` when `partition` is not below `partitions`.
    pub fn partition_view(
        &self,
        partition: u32,
        partitions: u32,
        fence: Option<Fence>,
    ) -> outbox_core::Result<Self> {
        if partition >= partitions {
            return Err(Error::invalid(
                "partition",
                format!("{partition} is not below the partition count {partitions}"),
            ));
        }
        let int = |field: &str, v: u32| {
            i32::try_from(v).map_err(|_| Error::invalid(field, format!("{v} is too large")))
        };
        Ok(Self {
            inner: Arc::clone(&self.inner),
            scope: Some(Scope {
                partition: int("partition", partition)?,
                partitions: int("partitions", partitions)?,
                fence,
            }),
        })
    }

    /// The pool, for the caller's own transactions: `store.pool().begin()`, then
    /// `enqueue(&mut *tx, …)`.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The configuration the store was opened with (`None` for [`PgStore::from_pool`]).
    pub fn config(&self) -> Option<&PgConfig> {
        self.inner.config.as_ref()
    }

    /// The default polling relay over this store, woken by `NOTIFY outbox_events`
    /// from any process; the poll interval stays the fallback. Also keeps the daily
    /// partitions ahead of the calendar while the store lives (when opened from a
    /// config).
    ///
    /// # Errors
    /// `Config` when relay `name`'s cursor is a CDC relay's (an LSN): the polling
    /// reader cannot resume from it, see [`PgStore::leave_cdc`]. Storage errors while
    /// loading the cursor or subscribing.
    pub async fn polling_relay(&self, name: &str) -> outbox_core::Result<PollingRelay<Self>> {
        if let Some(cursor @ PgPosition::Log { .. }) =
            self.inner.cursors.load(&self.inner.pool, name).await?
        {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "relay {name:?} was last run by the CDC relay (its cursor is {cursor}), which the \
                     polling reader cannot resume from. Run it with --cdc to stay on CDC, or switch it \
                     to polling once with --from-cdc (the CDC relay stopped): see the runbook, \
                     \"Switch polling ↔ CDC\""
                ),
            )
            .with("relay", name));
        }
        let wakeup = self.wakeup().await?;
        self.start_partition_maintenance().await;
        PollingRelay::open(self.clone(), name, Some(wakeup)).await
    }

    /// Switches relay `name` from CDC to polling: its LSN cursor is set back to the
    /// CDC handover's txid bound, its "@attempted" horizon to the current snapshot's
    /// xmax, and the handover is forgotten, in one transaction (the `cdc::leave` module
    /// says why that skips and repeats nothing). `None` when the cursor is not a CDC
    /// one (nothing to do). Call it only while no relay of this name runs (hold its
    /// name lock, [`crate::PgRelayLock`]); the slot and publication are left alone.
    ///
    /// # Errors
    /// Storage errors; a transient one when the cursor changed meanwhile.
    pub async fn leave_cdc(&self, name: &str) -> outbox_core::Result<Option<crate::cdc::LeftCdc>> {
        crate::cdc::leave::leave(&self.inner.pool, &self.inner.cursors, name).await
    }

    /// The wake-up the LISTEN task signals, starting that task on first use. Returns
    /// once LISTEN is in place, so no commit after it is missed.
    ///
    /// It is an on-demand wake-up (`Wakeup::on_demand`): writers notify only while a
    /// relay waits on it through [`PollingRelay`], which says when it does (the
    /// crate's README, "LISTEN/NOTIFY"). A loop of your own that waits on it without a
    /// `PollingRelay` is not counted, and so not woken.
    ///
    /// # Errors
    /// Storage errors while subscribing.
    pub async fn wakeup(&self) -> outbox_core::Result<Wakeup> {
        self.inner
            .listening
            .get_or_try_init(|| {
                notify::start(
                    &self.inner.pool,
                    self.inner.wakeup.clone(),
                    self.inner.stop.subscribe(),
                )
            })
            .await?;
        Ok(self.inner.wakeup.clone())
    }

    /// Starts the periodic partition check (once per store; needs a config).
    pub async fn start_partition_maintenance(&self) {
        let Some(config) = self.inner.config.clone() else {
            return;
        };
        self.inner
            .maintaining
            .get_or_init(|| async {
                partitions::spawn_maintenance(
                    self.inner.pool.clone(),
                    config,
                    self.inner.stop.subscribe(),
                );
            })
            .await;
    }

    /// What stalls the xmin-gated reader right now: see [`Horizon`].
    ///
    /// # Errors
    /// Storage errors.
    pub async fn horizon(&self) -> outbox_core::Result<Horizon> {
        horizon::measure(&self.inner.pool).await
    }

    /// Creates the missing daily partitions for `days` UTC days from `from`; returns
    /// the names created. See [`partitions::ensure_partitions`].
    ///
    /// # Errors
    /// Storage errors; a lock wait beyond the configured timeout is transient.
    pub async fn ensure_partitions(
        &self,
        from: NaiveDate,
        days: u32,
    ) -> outbox_core::Result<Vec<String>> {
        let lock_timeout = self
            .inner
            .config
            .as_ref()
            .map_or(Duration::from_secs(5), |c| c.partition_lock_timeout);
        partitions::ensure_partitions(&self.inner.pool, from, days, lock_timeout).await
    }

    /// Every partition of `outbox_events` and `outbox_deliveries` with its bounds.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn partitions(&self) -> outbox_core::Result<Vec<TablePartition>> {
        partitions::list_partitions(&self.inner.pool).await
    }
}

pub(crate) fn corrupt(column: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("{column}: {e}"))
}

pub(crate) fn u64_column(column: &str, value: i64) -> outbox_core::Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(column, format!("negative value {value}")))
}

pub(crate) fn i64_field(field: &str, value: u64) -> outbox_core::Result<i64> {
    i64::try_from(value)
        .map_err(|_| Error::invalid(field, format!("{value} does not fit a Postgres bigint")))
}

pub(crate) fn event_from_row(row: &PgRow) -> outbox_core::Result<OutboxEvent> {
    // Selected as text under another name: ORDER BY `txid` would otherwise sort by the
    // text form ('100' < '99'), skip rows past the cursor and defeat the index.
    let txid: String = row.get("txid_text");
    let account: String = row.get("account");
    Ok(OutboxEvent {
        position: PgPosition::Snapshot {
            txid: parse_xid8("outbox_events.txid", &txid)?,
            row: row.get("position"),
        }
        .encode(),
        event_id: EventId::from_uuid(row.get::<Uuid, _>("event_id"))
            .map_err(|e| corrupt("outbox_events.event_id", e))?,
        account: Account::parse(&account).map_err(|e| corrupt("outbox_events.account", e))?,
        sequence: u64_column("outbox_events.sequence", row.get("sequence"))?,
        payload: Payload::from_stored(row.get("payload")),
        created_at: row.get("created_at"),
    })
}

pub(crate) fn delivery_from_row(row: &PgRow) -> outbox_core::Result<DeliveryRecord> {
    let outcome: String = row.get("outcome");
    let attempt: i64 = row.get("attempt");
    Ok(DeliveryRecord {
        event_id: EventId::from_uuid(row.get::<Uuid, _>("event_id"))
            .map_err(|e| corrupt("outbox_deliveries.event_id", e))?,
        attempt: u32::try_from(attempt)
            .map_err(|_| corrupt("outbox_deliveries.attempt", attempt))?,
        outcome: DeliveryOutcome::parse(&outcome)
            .ok_or_else(|| corrupt("outbox_deliveries.outcome", &outcome))?,
        ledger_tx_id: row
            .get::<Option<i64>, _>("ledger_tx_id")
            .map(|id| u64_column("outbox_deliveries.ledger_tx_id", id))
            .transpose()?,
        error_code: row.get("error_code"),
        detail: row.get("detail"),
        at: row.get("at"),
    })
}

#[async_trait]
impl Store for PgStore {
    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::new(true, true)
    }

    /// Reads in (txid, position) order, only below `pg_snapshot_xmin`: every row
    /// there belongs to a transaction that has ended, and every transaction still
    /// running (or yet to start) writes a txid at or above it, so no later commit can
    /// sort before the returned rows. One account's rows sort in sequence order
    /// because enqueue raises the txid to the account's previous one.
    async fn read_committed(
        &self,
        after: Option<Position>,
        limit: usize,
    ) -> outbox_core::Result<Vec<OutboxEvent>> {
        let (txid, row) = snapshot_after(after)?;
        // Through the function of migration 0010: it keeps the read at the price of
        // the rows returned, however many wait behind the cursor.
        let rows = sqlx::query(
            "SELECT position, event_id, account, sequence, payload, created_at, txid::text AS txid_text
             FROM outbox_read_committed($1::text::xid8, $2, $3, $4::int4, $5::int4)",
        )
        .bind(xid8_text(txid))
        .bind(row)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(self.scope.map(|s| s.partitions))
        .bind(self.scope.map(|s| s.partition))
        .fetch_all(&self.inner.pool)
        .await
        .storage()?;
        rows.iter().map(event_from_row).collect()
    }

    async fn load_cursor(&self, relay: &str) -> outbox_core::Result<Option<Position>> {
        let saved = self.inner.cursors.load(&self.inner.pool, relay).await?;
        Ok(saved.map(PgPosition::encode))
    }

    /// Through the crate's cursor table: forward only in `PgPosition` order, and on a
    /// fleet partition's view only while that partition's advisory lock is held.
    async fn save_cursor(&self, relay: &str, position: Position) -> outbox_core::Result<()> {
        let position = PgPosition::decode(&position)?;
        let fence = self.scope.and_then(|s| s.fence);
        self.inner
            .cursors
            .save(&self.inner.pool, relay, position, fence)
            .await
    }

    /// One statement, so all records or none; `WITH ORDINALITY` keeps their order
    /// in the `id` sequence.
    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> outbox_core::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut event_ids = Vec::with_capacity(records.len());
        let mut attempts = Vec::with_capacity(records.len());
        let mut outcomes = Vec::with_capacity(records.len());
        let mut ledger_tx_ids = Vec::with_capacity(records.len());
        let mut error_codes = Vec::with_capacity(records.len());
        let mut details = Vec::with_capacity(records.len());
        let mut ats: Vec<DateTime<Utc>> = Vec::with_capacity(records.len());
        for r in records {
            event_ids.push(r.event_id.as_uuid());
            attempts.push(i64::from(r.attempt));
            outcomes.push(r.outcome.as_str());
            ledger_tx_ids.push(
                r.ledger_tx_id
                    .map(|id| i64_field("ledger_tx_id", id))
                    .transpose()?,
            );
            error_codes.push(r.error_code.clone());
            details.push(r.detail.clone());
            ats.push(r.at);
        }
        sqlx::query(
            "INSERT INTO outbox_deliveries (event_id, attempt, outcome, ledger_tx_id, error_code, detail, at)
             SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
             FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[])
                  WITH ORDINALITY AS r(event_id, attempt, outcome, ledger_tx_id, error_code, detail, at, n)
             ORDER BY n",
        )
        .bind(event_ids)
        .bind(attempts)
        .bind(outcomes)
        .bind(ledger_tx_ids)
        .bind(error_codes)
        .bind(details)
        .bind(ats)
        .execute(&self.inner.pool)
        .await
        .storage()
        .map(drop)
    }

    async fn deliveries(&self, event_id: EventId) -> outbox_core::Result<Vec<DeliveryRecord>> {
        let rows = sqlx::query(
            "SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
             FROM outbox_deliveries WHERE event_id = $1 ORDER BY id",
        )
        .bind(event_id.as_uuid())
        .fetch_all(&self.inner.pool)
        .await
        .storage()?;
        rows.iter().map(delivery_from_row).collect()
    }

    /// One query for the whole batch.
    async fn delivery_states(
        &self,
        event_ids: &[EventId],
    ) -> outbox_core::Result<HashMap<EventId, DeliveryState>> {
        if event_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let ids: Vec<Uuid> = event_ids.iter().map(|id| id.as_uuid()).collect();
        let rows = sqlx::query(
            "SELECT event_id, attempt, outcome, ledger_tx_id, error_code, detail, at
             FROM outbox_deliveries WHERE event_id = ANY($1::uuid[]) ORDER BY id",
        )
        .bind(ids)
        .fetch_all(&self.inner.pool)
        .await
        .storage()?;
        let records = rows
            .iter()
            .map(delivery_from_row)
            .collect::<outbox_core::Result<Vec<_>>>()?;
        Ok(outbox_core::store::fold_delivery_states(records))
    }

    async fn has_deliveries(&self) -> outbox_core::Result<bool> {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outbox_deliveries)")
            .fetch_one(&self.inner.pool)
            .await
            .storage()
    }

    async fn raise_exception(&self, exception: &NewException) -> outbox_core::Result<bool> {
        insert_exception(&self.inner.pool, exception).await
    }

    async fn exceptions(&self) -> outbox_core::Result<Vec<Exception>> {
        exceptions::exceptions_matching(&self.inner.pool, &ExceptionQuery::default()).await
    }

    async fn exceptions_matching(
        &self,
        query: &ExceptionQuery,
    ) -> outbox_core::Result<Vec<Exception>> {
        exceptions::exceptions_matching(&self.inner.pool, query).await
    }

    async fn resolve_exception(
        &self,
        id: i64,
        resolved_by: &str,
        note: &str,
    ) -> outbox_core::Result<Resolution> {
        exceptions::resolve_exception(&self.inner.pool, id, resolved_by, note).await
    }

    /// Counts every committed row after the cursor, including those the horizon still
    /// holds back, so a stalled reader shows up as lag. For a CDC cursor (an LSN) the
    /// comparison falls back to the row position, an approximation.
    async fn lag(&self, relay: &str) -> outbox_core::Result<Lag> {
        // A literal prefix, so each variant stays one static statement.
        macro_rules! pending_after {
            ($condition:literal) => {
                concat!(
                    "SELECT count(*) AS pending,
                            (extract(epoch FROM clock_timestamp() - min(created_at)) * 1e6)::bigint AS age_us
                     FROM outbox_events ",
                    $condition
                )
            };
        }
        let cursor = self.inner.cursors.load(&self.inner.pool, relay).await?;
        let query = match cursor {
            None => sqlx::query(pending_after!("")),
            Some(PgPosition::Snapshot { txid, row }) => sqlx::query(pending_after!(
                "WHERE (txid, position) > ($1::text::xid8, $2)"
            ))
            .bind(xid8_text(txid))
            .bind(row),
            Some(log @ PgPosition::Log { .. }) => {
                sqlx::query(pending_after!("WHERE position > $1")).bind(log.row())
            }
        };
        let row = query.fetch_one(&self.inner.pool).await.storage()?;
        let pending: i64 = row.get("pending");
        let age_us: Option<i64> = row.get("age_us");
        Ok(Lag {
            pending: pending.max(0) as u64,
            oldest_pending_age: age_us.map(|us| Duration::from_micros(us.max(0) as u64)),
        })
    }
}
