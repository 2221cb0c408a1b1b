//! `enqueue`: writes an outbox row in the caller's own transaction.

use outbox_core::{Error, ErrorKind, NewEvent, OutboxEvent};
use sqlx::{Connection, PgConnection, Row};

use crate::error::PgResultExt;
use crate::notify::NOTIFY_CHANNEL;
use crate::position::{PgPosition, parse_xid8, xid8_text};

/// Checks the caller-supplied id and takes the account's next sequence, in one round
/// trip.
///
/// - The duplicate check runs first, so a refused id writes nothing and the caller's
///   transaction stays usable (no error is raised inside it).
/// - The upsert locks the account's counter row until the caller's transaction ends:
///   a second enqueue for the account waits here, so numbers are gapless and sequence
///   order is commit order.
/// - `last_txid` becomes greatest(previous, own xid), and that is the txid written on
///   the row: when a transaction that got its xid earlier (it wrote the payout intent
///   first) waits here behind a younger one, its row must still sort after the younger
///   one's, or the (txid, position) reader would return sequence N+1 before N.
const ALLOCATE: &str = "
WITH duplicate AS (
    SELECT 1 FROM outbox_events WHERE $2::uuid IS NOT NULL AND event_id = $2::uuid
), counter AS (
    INSERT INTO outbox_sequences AS s (account, last_sequence, last_txid)
    SELECT $1, 1, pg_current_xact_id()
    WHERE NOT EXISTS (SELECT 1 FROM duplicate)
    ON CONFLICT (account) DO UPDATE
        SET last_sequence = s.last_sequence + 1,
            last_txid = greatest(s.last_txid, pg_current_xact_id())
    RETURNING last_sequence, last_txid
)
SELECT EXISTS (SELECT 1 FROM duplicate),
       (SELECT last_sequence FROM counter),
       (SELECT last_txid::text FROM counter)";

/// Inserts the row and, when asked, queues the wake-up, which PostgreSQL delivers on
/// commit only (and once per transaction, however many rows it enqueued).
const INSERT: &str = "
WITH inserted AS (
    INSERT INTO outbox_events (event_id, account, sequence, payload, txid)
    VALUES ($1, $2, $3, $4, $5::text::xid8)
    RETURNING position, created_at
), notified AS (
    SELECT pg_notify($6, '') WHERE $7::bool
)
SELECT position, created_at FROM inserted LEFT JOIN notified ON true";

/// How [`enqueue_with`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// `NOTIFY outbox_events` on commit, so polling relays wake at once (default).
    ///
    /// A notifying transaction takes a database-wide lock through its commit, so
    /// notifying writers commit one at a time (measured: 1.48× the cost of the same
    /// transaction without it, 8 clients). Writers with a CDC relay, or content with
    /// the poll interval as latency, turn it off.
    pub notify: bool,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        Self { notify: true }
    }
}

/// Enqueues `event` in the transaction open on `conn`: pass `&mut *tx` for a
/// `sqlx::Transaction<'_, Postgres>` (from `pool.begin()` or `conn.begin()`).
///
/// The account's next sequence is allocated under a lock on its counter row that is
/// held until the transaction ends, so a rollback leaves neither a row nor a gap and
/// one account's enqueues commit in sequence order. The exact payload bytes the relay
/// will send are stored. Relays are woken through `NOTIFY outbox_events` when the
/// transaction commits.
///
/// Takes `&mut PgConnection` rather than a generic `Executor`: it runs two statements
/// (the payload embeds the sequence, so the row cannot be written before the number
/// is known), and an `Executor` is consumed by its first statement.
///
/// # Errors
/// - `InvalidInput` naming the field when the event is invalid, or `event_id` when
///   the caller-supplied id is already enqueued (committed, or earlier in this
///   transaction); nothing has been written and the transaction stays usable. Should
///   another transaction insert the same id concurrently, the insert waits for it and
///   then fails with the same `InvalidInput`, but the transaction is then aborted.
/// - `InvalidInput { field: "transaction" }` outside a transaction. Only transactions
///   opened through sqlx (`begin()`) are recognised, not a raw `BEGIN` statement.
/// - Storage errors; deadlocks, serialization failures and lock timeouts are
///   transient: roll back and run the whole transaction again.
///
/// # Cancel safety
/// Not cancel-safe on its own: dropping the future between its two statements leaves
/// the sequence taken in the open transaction. Roll that transaction back (dropping a
/// `sqlx::Transaction` does).
pub async fn enqueue(
    conn: &mut PgConnection,
    event: &NewEvent,
) -> outbox_core::Result<OutboxEvent> {
    enqueue_with(conn, event, EnqueueOptions::default()).await
}

/// [`enqueue`] with options (for example without the NOTIFY wake-up).
///
/// # Errors
/// As [`enqueue`].
pub async fn enqueue_with(
    conn: &mut PgConnection,
    event: &NewEvent,
    options: EnqueueOptions,
) -> outbox_core::Result<OutboxEvent> {
    use tracing::Instrument;
    // The payload takes this span's trace context (feature `otel`): docs/TRACING.md.
    let span = outbox_core::trace::enqueue_span(&event.account);
    write(conn, event, options).instrument(span).await
}

async fn write(
    conn: &mut PgConnection,
    event: &NewEvent,
    options: EnqueueOptions,
) -> outbox_core::Result<OutboxEvent> {
    if !conn.is_in_transaction() {
        return Err(Error::invalid(
            "transaction",
            "enqueue must run inside the caller's transaction (the one that writes the payout intent): pass &mut *tx from pool.begin()",
        ));
    }
    event.validate()?;
    if let Some(target) = event.revert_target() {
        // A round trip only reverts pay for; read before anything is written, so a
        // refusal leaves the caller's transaction usable.
        let owner: Option<String> =
            sqlx::query_scalar("SELECT account FROM outbox_events WHERE event_id = $1")
                .bind(target.as_uuid())
                .fetch_optional(&mut *conn)
                .await
                .storage()?;
        event.check_revert_target(owner.as_deref())?;
    }
    let supplied = event.event_id;
    let event_id = supplied.unwrap_or_default();

    let allocated = sqlx::query(ALLOCATE)
        .bind(event.account.as_str())
        .bind(supplied.map(|id| id.as_uuid()))
        .fetch_one(&mut *conn)
        .await
        .storage()?;
    if allocated.get::<bool, _>(0) {
        return Err(Error::invalid(
            "event_id",
            format!("{event_id} is already enqueued"),
        ));
    }
    let (Some(sequence), Some(txid)) = (
        allocated.get::<Option<i64>, _>(1),
        allocated.get::<Option<String>, _>(2),
    ) else {
        return Err(Error::new(
            ErrorKind::Internal,
            "the sequence counter returned no row",
        ));
    };
    let txid = parse_xid8("outbox_sequences.last_txid", &txid)?;
    let sequence = u64::try_from(sequence).map_err(|_| {
        Error::new(
            ErrorKind::Internal,
            format!("negative sequence counter {sequence}"),
        )
    })?;
    // Cannot fail after validate() above; if it ever did, the caller's transaction
    // holds a taken number and must be rolled back, which the error makes them do.
    let payload = event.encode_as(event_id, sequence)?;

    let inserted = sqlx::query(INSERT)
        .bind(event_id.as_uuid())
        .bind(event.account.as_str())
        .bind(sequence as i64)
        .bind(payload.as_bytes())
        .bind(xid8_text(txid))
        .bind(NOTIFY_CHANNEL)
        .bind(options.notify)
        .fetch_one(&mut *conn)
        .await
        .storage()
        .map_err(|e| e.with("event_id", event_id).with("account", &event.account))?;
    outbox_core::metrics::event_enqueued();
    Ok(OutboxEvent {
        position: PgPosition::Snapshot {
            txid,
            row: inserted.get("position"),
        }
        .encode(),
        event_id,
        account: event.account.clone(),
        sequence,
        payload,
        created_at: inserted.get("created_at"),
    })
}
