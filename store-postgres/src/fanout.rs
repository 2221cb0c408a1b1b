//! `PgFanoutStore`: the Hop 2 fan-out log (`outbox_core::FanoutStore`) on PostgreSQL,
//! with positions that become visible in commit order.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{
    Account, AppendOutcome, DeadLetter, DeadLetterQuery, Error, ErrorKind, FanoutMessage,
    FanoutStore, MessageKind, NewDeadLetter, ReplayRequest, StoredMessage,
};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgPool, Row};

use crate::config::PgConfig;
use crate::connection::{connect, run_migrations};
use crate::error::PgResultExt;
use crate::fanout_dead_letters as dead_letters;

/// How long an append waits for the append lock by default before failing transiently.
pub const DEFAULT_APPEND_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The fan-out log on PostgreSQL (tables `fanout_deliveries`, `fanout_messages`,
/// `fanout_cursors`, `fanout_dead_letters`, `fanout_replay_requests`, created by the
/// crate's migrations). Cheap to clone; clones share
/// one pool.
///
/// # Commit order
///
/// A sequence value is drawn when a row is inserted, not when it commits: append A
/// draws position 10, append B draws 11 and commits first, a reader reads 11 and saves
/// its cursor, then A commits 10 behind the cursor and is never read (pitfall P1 in
/// docs/ARCHITECTURE.md). So every append first takes a transaction-scoped advisory lock whose key
/// is derived from the schema of `fanout_messages` (`hashtextextended('<schema>.fanout_append', 0)`),
/// and draws its positions only under it. PostgreSQL marks a transaction committed
/// (visible to new snapshots) before it releases the transaction's locks, so the next
/// append draws higher positions only after every lower position is visible or rolled
/// back: a reader that sees position `p` sees everything below it. Appends to one
/// schema are serialised, which the intake can afford: an append is a handful of
/// statements on one connection. Readers take no lock.
///
/// An append that waits longer than the lock timeout (see
/// [`PgFanoutStore::with_append_lock_timeout`]) fails with a transient error, so a
/// stuck appender makes the ledger retry its webhook rather than hang the intake.
#[derive(Clone)]
pub struct PgFanoutStore {
    pool: PgPool,
    config: Option<PgConfig>,
    lock_timeout: Duration,
}

impl std::fmt::Debug for PgFanoutStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgFanoutStore")
            .field("config", &self.config)
            .field("lock_timeout", &self.lock_timeout)
            .finish_non_exhaustive()
    }
}

impl PgFanoutStore {
    /// Connects and applies the migrations (the fan-out tables come with the outbox
    /// schema, in `config.schema`).
    ///
    /// # Errors
    /// `InvalidInput` for a bad URL or schema; storage errors, transient when the
    /// server cannot be reached.
    pub async fn open(config: PgConfig) -> outbox_core::Result<Self> {
        let pool = connect(&config).await?;
        run_migrations(&pool, &config).await?;
        Ok(Self {
            pool,
            config: Some(config),
            lock_timeout: DEFAULT_APPEND_LOCK_TIMEOUT,
        })
    }

    /// A store over an existing pool whose connections already find the fan-out
    /// tables (migrated by [`crate::migrate`]). Runs no migration and does not connect.
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            config: None,
            lock_timeout: DEFAULT_APPEND_LOCK_TIMEOUT,
        }
    }

    /// How long an append waits for the append lock before failing transiently
    /// (default [`DEFAULT_APPEND_LOCK_TIMEOUT`]; at least 1 ms).
    #[must_use]
    pub fn with_append_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The configuration the store was opened with (`None` for [`PgFanoutStore::from_pool`]).
    pub fn config(&self) -> Option<&PgConfig> {
        self.config.as_ref()
    }
}

pub(crate) fn i64_field(field: &str, value: u64) -> outbox_core::Result<i64> {
    i64::try_from(value)
        .map_err(|_| Error::invalid(field, format!("{value} does not fit a Postgres bigint")))
}

pub(crate) fn corrupt(column: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("{column}: {e}"))
}

pub(crate) fn u64_column(column: &str, value: i64) -> outbox_core::Result<u64> {
    u64::try_from(value).map_err(|_| corrupt(column, format!("negative value {value}")))
}

/// The new messages of one append as column arrays, for one `INSERT … SELECT unnest(…)`.
#[derive(Default)]
struct Columns {
    dedup_key: Vec<String>,
    instruction_id: Vec<String>,
    account: Vec<String>,
    sequence: Vec<i64>,
    kind: Vec<&'static str>,
    ledger: Vec<String>,
    ledger_tx_id: Vec<Option<i64>>,
    traceparent: Vec<Option<String>>,
    tracestate: Vec<Option<String>>,
    payload: Vec<Vec<u8>>,
}

impl Columns {
    /// Checks every message and keeps the first occurrence of each dedup key; returns
    /// the columns and how many later occurrences were dropped.
    fn of(messages: &[FanoutMessage]) -> outbox_core::Result<(Self, usize)> {
        let mut columns = Self::default();
        let mut seen = HashSet::with_capacity(messages.len());
        let mut duplicates = 0;
        for m in messages {
            let key = m.dedup_key();
            if !seen.insert(key.clone()) {
                duplicates += 1;
                continue;
            }
            columns.sequence.push(i64_field("sequence", m.sequence)?);
            columns.ledger_tx_id.push(
                m.ledger_tx_id
                    .map(|tx| i64_field("ledger_tx_id", tx))
                    .transpose()?,
            );
            columns.dedup_key.push(key);
            columns.instruction_id.push(m.instruction_id.clone());
            columns.account.push(m.account.as_str().to_owned());
            columns.kind.push(m.kind.as_str());
            columns.ledger.push(m.ledger.clone());
            columns.traceparent.push(m.traceparent.clone());
            columns.tracestate.push(m.tracestate.clone());
            columns.payload.push(m.payload.clone());
        }
        Ok((columns, duplicates))
    }

    fn len(&self) -> usize {
        self.dedup_key.len()
    }
}

pub(crate) fn message_from_row(row: &PgRow) -> outbox_core::Result<StoredMessage> {
    let account: String = row.get("account");
    let kind: String = row.get("kind");
    Ok(StoredMessage {
        position: u64_column("fanout_messages.position", row.get("position"))?,
        message: FanoutMessage {
            instruction_id: row.get("instruction_id"),
            account: Account::parse(&account).map_err(|e| corrupt("fanout_messages.account", e))?,
            sequence: u64_column("fanout_messages.sequence", row.get("sequence"))?,
            kind: MessageKind::parse(&kind)
                .ok_or_else(|| corrupt("fanout_messages.kind", &kind))?,
            ledger: row.get("ledger"),
            ledger_tx_id: row
                .get::<Option<i64>, _>("ledger_tx_id")
                .map(|tx| u64_column("fanout_messages.ledger_tx_id", tx))
                .transpose()?,
            traceparent: row.get("traceparent"),
            tracestate: row.get("tracestate"),
            payload: row.get("payload"),
        },
        received_at: row.get("received_at"),
    })
}

impl PgFanoutStore {
    async fn append_once(
        &self,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        let (columns, in_batch_duplicates) = Columns::of(messages)?;
        let mut tx = self.pool.begin().await.storage()?;
        // The append lock first (see the type's docs), with its wait bounded; one round
        // trip. The key names the schema that holds fanout_messages on this
        // connection's search_path, so stores of other schemas do not wait for us.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET LOCAL lock_timeout = '{}ms';
             SELECT pg_advisory_xact_lock(hashtextextended(n.nspname || '.fanout_append', 0))
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = 'fanout_messages'::regclass",
            self.lock_timeout.as_millis().max(1)
        )))
        .execute(&mut *tx)
        .await
        .storage()?;
        let first_time = sqlx::query(
            "INSERT INTO fanout_deliveries (delivery_id) VALUES ($1)
             ON CONFLICT (delivery_id) DO NOTHING",
        )
        .bind(delivery_id)
        .execute(&mut *tx)
        .await
        .storage()?
        .rows_affected()
            == 1;
        if !first_time {
            tx.rollback().await.storage()?;
            return Ok(AppendOutcome {
                delivery_seen: true,
                ..AppendOutcome::default()
            });
        }
        let mut stored = 0;
        if !columns.dedup_key.is_empty() {
            // Drawn under the lock, then handed out in ascending order, so the
            // messages of one delivery keep their order.
            let mut positions: Vec<i64> = sqlx::query_scalar(
                "SELECT nextval('fanout_position_seq') FROM generate_series(1, $1)",
            )
            .bind(columns.len() as i64)
            .fetch_all(&mut *tx)
            .await
            .storage()?;
            positions.sort_unstable();
            stored = sqlx::query(
                "INSERT INTO fanout_messages (position, dedup_key, instruction_id, account, sequence,
                     kind, ledger, ledger_tx_id, traceparent, tracestate, payload)
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                     $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[], $11::bytea[])
                 ON CONFLICT (dedup_key) DO NOTHING",
            )
            .bind(&positions)
            .bind(&columns.dedup_key)
            .bind(&columns.instruction_id)
            .bind(&columns.account)
            .bind(&columns.sequence)
            .bind(&columns.kind)
            .bind(&columns.ledger)
            .bind(&columns.ledger_tx_id)
            .bind(&columns.traceparent)
            .bind(&columns.tracestate)
            .bind(&columns.payload)
            .execute(&mut *tx)
            .await
            .storage()?
            .rows_affected() as usize;
        }
        tx.commit().await.storage()?;
        Ok(AppendOutcome {
            stored,
            duplicates: in_batch_duplicates + (columns.len() - stored),
            delivery_seen: false,
        })
    }
}

/// Cancel safety: dropping an `append` future before it returns rolls its transaction
/// back (sqlx sends the ROLLBACK when the connection goes back to the pool, which also
/// ends the append lock); nothing of the delivery is kept and its retry is a first
/// delivery. The other methods only read or move a cursor forward.
#[async_trait]
impl FanoutStore for PgFanoutStore {
    async fn append(
        &self,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        self.append_once(delivery_id, messages)
            .await
            .map_err(|e| e.with("delivery_id", delivery_id))
    }

    async fn read_after(
        &self,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        // Positions are at most i64::MAX: anything above reads nothing.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT position, instruction_id, account, sequence, kind, ledger, ledger_tx_id,
                    traceparent, tracestate, payload, received_at
             FROM fanout_messages WHERE position > $1 ORDER BY position LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .storage()?;
        rows.iter().map(message_from_row).collect()
    }

    async fn load_cursor(&self, transport: &str) -> outbox_core::Result<u64> {
        let position: Option<i64> =
            sqlx::query_scalar("SELECT position FROM fanout_cursors WHERE transport = $1")
                .bind(transport)
                .fetch_optional(&self.pool)
                .await
                .storage()?;
        position.map_or(Ok(0), |p| u64_column("fanout_cursors.position", p))
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> outbox_core::Result<()> {
        // Forward only: a lower value (a slower instance, a stale retry) is ignored.
        sqlx::query(
            "INSERT INTO fanout_cursors (transport, position) VALUES ($1, $2)
             ON CONFLICT (transport) DO UPDATE
             SET position = excluded.position, updated_at = now()
             WHERE excluded.position > fanout_cursors.position",
        )
        .bind(transport)
        .bind(i64_field("position", position)?)
        .execute(&self.pool)
        .await
        .storage()
        .map(drop)
    }

    async fn append_dead_letters(
        &self,
        letters: &[NewDeadLetter],
    ) -> outbox_core::Result<Vec<u64>> {
        dead_letters::append(&self.pool, letters).await
    }

    async fn read_dead_letters(
        &self,
        query: &DeadLetterQuery<'_>,
    ) -> outbox_core::Result<Vec<DeadLetter>> {
        dead_letters::read(&self.pool, query).await
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &Account,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        dead_letters::read_set_aside(&self.pool, destination, account, after, limit).await
    }

    async fn request_replay(
        &self,
        destination: &str,
        account: &Account,
    ) -> outbox_core::Result<ReplayRequest> {
        dead_letters::request_replay(&self.pool, destination, account).await
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> outbox_core::Result<Vec<ReplayRequest>> {
        dead_letters::read_replay_requests(&self.pool, destination, after).await
    }
}
