//! Leaving CDC for polling under the same relay name ([`crate::PgStore::leave_cdc`]).
//!
//! A CDC relay's cursor is a commit LSN, which the polling reader cannot resume
//! from, and no polling position is equivalent to it: CDC orders by commit LSN,
//! polling by `(txid, position)`, and a transaction with a low txid may commit after
//! the CDC relay's last acknowledged LSN. So the cursor is not *mapped*; it is set
//! back to a polling position before which everything is certainly delivered, and the
//! dispatcher's replay check does the rest:
//!
//! - **Cursor**: `(X, 0)`, X being the txid bound of the relay's CDC handover
//!   (`<relay>@cdc-handover`, see `catch_up`). An LSN cursor exists only once the
//!   catch-up had delivered every row below X, and every row at or above X came (or
//!   was still to come) through the stream. Rows at or above X are read again. A CDC
//!   cursor saved before handovers existed has none: then from the start.
//! - **"@attempted" horizon**: `(xmax, 0)` with `xmax = pg_snapshot_xmax` read now,
//!   replacing the CDC relay's log horizon. The CDC relay is stopped (the caller holds
//!   the name's lock), so everything it could have posted had committed, and every
//!   committed row has a txid below xmax. Every re-read row up to there is
//!   "uncertain" to the dispatcher: looked up in the delivery records (in batches) —
//!   a terminal one is not sent again, a recorded refusal only gets its rejection
//!   notice again (the ledger replays it), one without an outcome is sent alone after
//!   a look for its notice on the ledger. Rows after the horizon are read as usual.
//!   The log horizon could not stay: every snapshot position sorts before it, so
//!   every event would be "uncertain" for good.
//! - **Handover**: deleted, so a later `--cdc` start is a first start again (a new
//!   slot's catch-up from this polling cursor) instead of a refusal of the old
//!   handover against a dropped or advanced slot.
//!
//! All three in one transaction. The slot and publication are not touched: dropping
//! them is the operator's step (crate README, "CDC → polling").

use outbox_core::store::attempted_cursor;
use outbox_core::{Error, ErrorKind, Result};
use sqlx::PgPool;

use super::catch_up;
use crate::cursors::CursorTable;
use crate::error::map_error;
use crate::position::{PgPosition, parse_xid8, xid8_text};

/// What [`crate::PgStore::leave_cdc`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftCdc {
    /// The CDC relay's cursor that was replaced.
    pub cdc_cursor: PgPosition,
    /// The polling cursor the relay resumes after.
    pub resume_after: PgPosition,
    /// The dispatcher's new "@attempted" horizon: rows up to it are checked against
    /// their delivery records before anything is sent.
    pub checked_through: PgPosition,
    /// Whether the handover gave the start (else the relay re-reads from the start).
    pub from_handover: bool,
    /// Outbox rows after `resume_after` when the switch was made: read again (or for
    /// the first time).
    pub rows_after: i64,
}

/// Switches relay `relay` from its CDC cursor to polling; `None` when its cursor is
/// not a log position (a polling relay already, or no cursor: nothing to do).
pub(crate) async fn leave(
    pool: &PgPool,
    cursors: &CursorTable,
    relay: &str,
) -> Result<Option<LeftCdc>> {
    let mut tx = pool.begin().await.map_err(map_error)?;
    let Some(cdc_cursor @ PgPosition::Log { .. }) = cursors.load(&mut *tx, relay).await? else {
        return Ok(None);
    };
    let handover_key = catch_up::key(relay);
    let handover = cursors.load_boundary(&mut *tx, &handover_key).await?;
    // Positions start at 1, so row 0 sorts before every row of txid X.
    let resume_after = PgPosition::Snapshot {
        txid: handover.map_or(0, |h| h.txid),
        row: 0,
    };
    let xmax: String = sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
        .fetch_one(&mut *tx)
        .await
        .map_err(map_error)?;
    let checked_through = PgPosition::Snapshot {
        txid: parse_xid8("pg_snapshot_xmax", &xmax)?,
        row: 0,
    };
    if !cursors.rewind_log(&mut *tx, relay, resume_after).await? {
        return Err(Error::new(
            ErrorKind::Storage,
            format!("relay {relay:?}: its cursor changed while switching to polling (is a relay of this name running?)"),
        )
        .with("relay", relay)
        .transient(None));
    }
    cursors
        .rewind_log(&mut *tx, &attempted_cursor(relay), checked_through)
        .await?;
    if handover.is_some() {
        cursors.forget_boundary(&mut *tx, &handover_key).await?;
    }
    let rows_after: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events WHERE (txid, position) > ($1::text::xid8, 0)",
    )
    .bind(xid8_text(handover.map_or(0, |h| h.txid)))
    .fetch_one(&mut *tx)
    .await
    .map_err(map_error)?;
    tx.commit().await.map_err(map_error)?;
    Ok(Some(LeftCdc {
        cdc_cursor,
        resume_after,
        checked_through,
        from_handover: handover.is_some(),
        rows_after,
    }))
}
