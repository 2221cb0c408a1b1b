//! `enqueue`: writes an outbox row in the caller's own transaction.

use outbox_core::{Error, ErrorKind, NewEvent, OutboxEvent};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::SqliteResultExt;
use crate::{time, wakeup};

/// Enqueues `event` in the transaction open on `conn` (pass `&tx`: a
/// `rusqlite::Transaction` derefs to `Connection`).
///
/// Allocates the account's next sequence inside the same transaction (under SQLite's
/// write lock), so a rollback leaves neither a row nor a gap, and stores the exact
/// payload bytes the relay will send.
///
/// # Errors
/// - `InvalidInput` naming the field when the event is invalid or its `event_id` is
///   already enqueued; nothing has been written and the transaction stays usable.
/// - `InvalidInput { field: "transaction" }` outside a transaction.
/// - Storage errors; BUSY/LOCKED are transient.
pub fn enqueue(conn: &Connection, event: &NewEvent) -> outbox_core::Result<OutboxEvent> {
    // The payload takes this span's trace context (feature `otel`): docs/TRACING.md.
    let _span = outbox_core::trace::enqueue_span(&event.account).entered();
    if conn.is_autocommit() {
        return Err(Error::invalid(
            "transaction",
            "enqueue must run inside the caller's transaction (the one that writes the payout intent)",
        ));
    }
    event.validate()?;
    if let Some(id) = event.event_id {
        let exists = conn
            .query_row(
                "SELECT 1 FROM outbox_events WHERE event_id = ?1",
                [id.to_string()],
                |_| Ok(()),
            )
            .optional()
            .storage()?
            .is_some();
        if exists {
            return Err(Error::invalid(
                "event_id",
                format!("{id} is already enqueued"),
            ));
        }
    }
    if let Some(target) = event.revert_target() {
        let owner: Option<String> = conn
            .prepare_cached("SELECT account FROM outbox_events WHERE event_id = ?1")
            .storage()?
            .query_row([target.to_string()], |row| row.get(0))
            .optional()
            .storage()?;
        event.check_revert_target(owner.as_deref())?;
    }
    // Safe without a counter row: the transaction holds (or, at the INSERT below,
    // must take) SQLite's single write lock; a deferred transaction whose snapshot went
    // stale meanwhile gets BUSY (transient) instead of a duplicate sequence. Numbering
    // continues after the account's events that retention removed
    // (`outbox_retired_sequences`), never again from 1.
    let sequence: i64 = conn
        .prepare_cached(
            "SELECT max(coalesce((SELECT max(sequence) FROM outbox_events WHERE account = ?1), 0),
                        coalesce((SELECT last_sequence FROM outbox_retired_sequences WHERE account = ?1), 0)) + 1",
        )
        .storage()?
        .query_row([event.account.as_str()], |row| row.get(0))
        .storage()?;
    let sequence = u64::try_from(sequence)
        .map_err(|_| Error::new(ErrorKind::Internal, "negative sequence counter"))?;
    let (event_id, payload) = event.encode(sequence)?;
    let created_at = time::now_micros();
    let position: i64 = conn
        .prepare_cached(
            "INSERT INTO outbox_events (event_id, account, sequence, payload, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5) RETURNING position",
        )
        .storage()?
        .query_row(
            params![
                event_id.to_string(),
                event.account.as_str(),
                sequence as i64,
                payload.as_bytes(),
                created_at
            ],
            |row| row.get(0),
        )
        .storage()?;
    // Wakes relays of this file; one that looks before our commit finds nothing and
    // re-checks shortly (PollingRelay), and other processes rely on the poll interval.
    if let Some(path) = conn.path() {
        wakeup::notify(path);
    }
    outbox_core::metrics::event_enqueued();
    Ok(OutboxEvent {
        position: crate::position::row_position(position),
        event_id,
        account: event.account.clone(),
        sequence,
        payload,
        created_at: time::from_micros(created_at),
    })
}
