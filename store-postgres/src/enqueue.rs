//! `enqueue`: writes an outbox row in the caller's own transaction.

use outbox_core::{Error, ErrorKind, NewEvent, OutboxEvent};
use sqlx::{Connection, PgConnection, Row};

use crate::error::PgResultExt;
use crate::notify::{notify_channel, wakeup_lock_sql, wakeup_payload_sql};
use crate::payload_split::SplitPayload;
use crate::position::{PgPosition, parse_xid8};

/// The whole enqueue in one statement (one round trip), shaped like the statement a
/// team would write by hand (one CTE, one insert):
///
/// - `counter` takes the account's next sequence. The upsert locks the account's
///   counter row until the caller's transaction ends: a second enqueue for the account
///   waits here, so numbers are gapless and sequence order is commit order.
///   `last_txid` becomes greatest(previous, own xid), and that is the txid written on
///   the row: when a transaction that got its xid earlier (it wrote the payout intent
///   first) waits here behind a younger one, its row must still sort after the younger
///   one's, or the (txid, position) reader would return sequence N+1 before N.
/// - The insert writes the row, its payload built from the two halves around the
///   sequence digits ([`SplitPayload`]). A caller-supplied id takes the `ON CONFLICT`
///   form: a duplicate inserts nothing and returns no row (after waiting for a
///   concurrent writer of the same id), and no error aborts the caller's transaction.
///   A generated UUID v7 takes the plain insert: there is nothing to probe for.
/// - `notified`, computed once the row is in (so the transaction has its xid), queues
///   the NOTIFY only while a polling relay waits for one (crate::notify, "the
///   idle-period wake-up"): its LISTEN session then holds, or queues for, the
///   exclusive wake-up lock, and the shared try fails. Otherwise the shared lock is
///   held to the end of the caller's transaction, which is what lets a relay that
///   starts waiting later know this commit is behind it. `CASE` fixes the order: no
///   lock is tried when `notify` is off.
macro_rules! enqueue_statement {
    ($on_conflict:literal) => {
        concat!(
            "WITH counter AS (
    INSERT INTO outbox_sequences AS s (account, last_sequence, last_txid)
    VALUES ($1, 1, pg_current_xact_id())
    ON CONFLICT (account) DO UPDATE
        SET last_sequence = s.last_sequence + 1,
            last_txid = greatest(s.last_txid, pg_current_xact_id())
    RETURNING last_sequence, last_txid
)
INSERT INTO outbox_events (event_id, account, sequence, payload, txid)
SELECT $2, $1, last_sequence, $3::bytea || convert_to(last_sequence::text, 'UTF8') || $4::bytea, last_txid
FROM counter ",
            $on_conflict,
            "
RETURNING sequence, txid::text AS txid, position, created_at,
    CASE WHEN NOT $5::bool THEN false
         WHEN pg_try_advisory_xact_lock_shared(",
            wakeup_lock_sql!(),
            ") THEN false
         ELSE pg_notify('",
            notify_channel!(),
            "', ",
            wakeup_payload_sql!(),
            ") IS NOT NULL
    END AS notified"
        )
    };
}

/// [`enqueue_statement`] for an id enqueue generated (a fresh UUID v7).
const ENQUEUE: &str = enqueue_statement!("");
/// [`enqueue_statement`] for a caller-supplied id: a duplicate inserts nothing.
const ENQUEUE_SUPPLIED_ID: &str = enqueue_statement!("ON CONFLICT (event_id) DO NOTHING");

/// Gives back the number a refused duplicate took, in the same transaction and under
/// the counter row's lock, so it is the latest one: the counter row goes if the
/// statement created it (number 1), else it steps back. The raised `last_txid` may
/// stay: it is this transaction's own xid, which the account's next row must follow
/// anyway.
const RETURN_NUMBER: &str = "
WITH created AS (
    DELETE FROM outbox_sequences WHERE account = $1 AND last_sequence = 1
)
UPDATE outbox_sequences SET last_sequence = last_sequence - 1
WHERE account = $1 AND last_sequence > 1";

/// How [`enqueue_with`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Wake a polling relay that waits for new events (default): the transaction then
    /// sends `NOTIFY outbox_events` on commit. While no relay waits (it is busy
    /// reading, or none runs) nothing is sent, and the relay still finds the row at
    /// once (see "LISTEN/NOTIFY" in the crate's README).
    ///
    /// A notifying transaction takes a database-wide lock through its commit, which
    /// is why only the writers that meet a waiting relay notify. `false` never
    /// notifies: for writers whose relay is the CDC relay, or content with the poll
    /// interval as latency while the relay is idle.
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
/// will send are stored. A polling relay that waits for events is woken through
/// `NOTIFY outbox_events` when the transaction commits; one that is busy reads the
/// row without it.
///
/// One statement, one round trip: the counter, the row (whose payload embeds the
/// sequence, put in place by SQL) and the wake-up. A refused duplicate id costs a
/// second one. Takes `&mut PgConnection` rather than a generic `Executor`, since an
/// `Executor` is consumed by its first statement.
///
/// # Errors
/// - `InvalidInput` naming the field when the event is invalid, or `event_id` when
///   the caller-supplied id is already enqueued (committed, or earlier in this
///   transaction); nothing has been written and the transaction stays usable. Should
///   another transaction insert the same id concurrently, enqueue waits for it: when
///   it commits the id is refused in the same way, when it rolls back the event is
///   enqueued.
/// - `InvalidInput { field: "transaction" }` outside a transaction. Only transactions
///   opened through sqlx (`begin()`) are recognised, not a raw `BEGIN` statement.
/// - Storage errors; deadlocks, serialization failures and lock timeouts are
///   transient: roll back and run the whole transaction again.
///
/// # Cancel safety
/// Not cancel-safe on its own: dropping the future once its statement reached the
/// server may leave the sequence taken in the open transaction. Roll that
/// transaction back (dropping a `sqlx::Transaction` does).
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
    // Encoded before anything is written: should it fail, nothing is.
    let split = SplitPayload::encode(event, event_id)?;

    let statement = if supplied.is_some() {
        ENQUEUE_SUPPLIED_ID
    } else {
        ENQUEUE
    };
    let written = sqlx::query(statement)
        .bind(event.account.as_str())
        .bind(event_id.as_uuid())
        .bind(&split.before)
        .bind(&split.after)
        .bind(options.notify)
        .fetch_optional(&mut *conn)
        .await
        .storage()
        .map_err(|e| e.with("event_id", event_id).with("account", &event.account))?;
    let Some(written) = written else {
        // The id is already enqueued (committed, or earlier in this transaction).
        sqlx::query(RETURN_NUMBER)
            .bind(event.account.as_str())
            .execute(&mut *conn)
            .await
            .storage()?;
        return Err(Error::invalid(
            "event_id",
            format!("{event_id} is already enqueued"),
        ));
    };
    let taken: i64 = written.get("sequence");
    let txid = parse_xid8("outbox_events.txid", written.get("txid"))?;
    let sequence = u64::try_from(taken)
        .map_err(|_| Error::new(ErrorKind::Internal, format!("negative sequence {taken}")))?;
    outbox_core::metrics::event_enqueued();
    Ok(OutboxEvent {
        position: PgPosition::Snapshot {
            txid,
            row: written.get("position"),
        }
        .encode(),
        event_id,
        account: event.account.clone(),
        sequence,
        payload: split.with_sequence(sequence),
        created_at: written.get("created_at"),
    })
}
