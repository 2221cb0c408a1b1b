//! The CDC relay: outbox events from PostgreSQL logical replication, in commit order.
//!
//! [`CdcRelay`] implements [`outbox_core::Relay`] by streaming the outbox table's
//! INSERTs from a logical replication slot (plugin `pgoutput`, binary values, over the
//! streaming replication protocol with `pgwire-replication`), decoding the Relation,
//! Begin, Insert and Commit messages itself.
//!
//! ```no_run
//! # async fn run() -> outbox_core::Result<()> {
//! use outbox_core::Relay;
//! use outbox_store_postgres::cdc::{CdcConfig, CdcRelay};
//!
//! let mut config = CdcConfig::new("postgres://relay@db.internal/payments");
//! config.relay = "ledger-cdc".into();
//! let mut relay = CdcRelay::open(config).await?;
//! let batch = relay.next_batch(100).await?;
//! // … post the batch, record the outcomes durably, then:
//! if let Some(last) = batch.last() {
//!     relay.acknowledge(last.position).await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Positions
//! Streamed events carry [`PgPosition::Log { lsn, row }`](crate::PgPosition): `lsn` is
//! the commit LSN of the event's transaction (the start of its commit record, as
//! pgoutput's Begin and Commit report it), `row` is
//! `outbox_events.position`. Commit LSNs are the only globally ordered thing in the WAL
//! (docs/ARCHITECTURE.md, P4), so they order transactions; rows order the events inside one, which is
//! their insert order because `position` is `DEFAULT nextval()`. A decoded row that
//! breaks that order stops the relay with an `Internal` error rather than risk a skip.
//!
//! Events of the catch-up (below) carry the polling reader's `PgPosition::Snapshot { txid,
//! row }`, which sorts before every `Log` position: the dispatcher's frontier and its
//! "attempted" horizon stay ordered across the switch from catch-up to stream.
//!
//! # First start: the catch-up
//! A slot streams only what commits after it exists. So on its first start (no LSN
//! cursor yet) the relay creates the slot, then reads `X =
//! pg_snapshot_xmax(pg_current_snapshot())` and records it with the slot's start LSN
//! in a `relay_cursors` row of its own, `<relay>@cdc-handover`, written once (the first
//! handover recorded stands for good). It then returns, through
//! the polling reader's `(txid, position)` query gated by `pg_snapshot_xmin`, every row
//! with `txid < X` after the relay's saved cursor — a polling relay's cursor of the same
//! name, or from the start when there is none — and streams from the slot only once
//! `pg_snapshot_xmin ≥ X` and no such row is left, skipping streamed rows whose `txid`
//! column is below X (the catch-up sent them). Every transaction that committed before
//! the slot's start has an xid below X, and every row at or above X is streamed, so
//! nothing is lost and nothing is sent twice; an account's txids never decrease along
//! its sequence, so its events stay in sequence order across the switch.
//!
//! While catching up, [`Relay::acknowledge`](outbox_core::Relay::acknowledge) saves the
//! snapshot position as a polling-style cursor (`txid`, `position`) and confirms nothing
//! to the slot; the first log position replaces it with the LSN cursor. A relay stopped
//! mid-catch-up (even by SIGKILL) resumes after that cursor with the same X. The slot
//! is not read during the catch-up and retains WAL from its start meanwhile; a
//! transaction left open since before the slot holds the catch-up back, as it holds the
//! polling reader (the crate README's "horizon").
//!
//! # Guarantees
//! - Only committed rows, in commit order; a rolled-back insert never appears.
//! - [`Relay::acknowledge`](outbox_core::Relay::acknowledge) first saves the cursor
//!   row in `relay_cursors` (`lsn` + `position`) through the store's own cursor code,
//!   under the store's cursor rule (`outbox_core::Store`, "Cursors"): only forward, a
//!   position at or before the saved cursor succeeds and changes nothing. Only
//!   then does it confirm the position's **commit LSN** to the slot (the standby status
//!   update, within `status_interval_ms`). Not the commit's end: the acknowledged
//!   event may sit in the middle of its transaction, so the whole transaction stays in
//!   the slot. The slot is therefore never confirmed past the durable cursor.
//! - On the first start, every row committed before the slot, after the polling cursor
//!   of the same name (if any), comes first, in the polling reader's order (see above).
//! - On start, and after any stop (clean, crash, SIGKILL), streaming resumes from the
//!   cursor's commit LSN; rows at or before the cursor are skipped. The first event
//!   returned is exactly the first event after the durable cursor: nothing after it is
//!   skipped, nothing at or before it is returned again. (The dispatcher may still
//!   post again events after the cursor that it posted before a crash; the ledger's
//!   idempotency absorbs that.)
//! - Within one relay, each event is returned once, also across reconnects of the
//!   replication session.
//! - [`Relay::wait`](outbox_core::Relay::wait) reads the stream itself: it returns as
//!   soon as an event is decoded, or after the interval. Keepalives are answered on the
//!   way; nothing spins.
//!
//! # The slot, the publication, and lost events
//! At start the relay checks `wal_level` (anything but `logical` is a `Config` error
//! giving the exact fix: `ALTER SYSTEM SET wal_level = logical;` and a restart), then
//! creates when missing (`create_missing`) and otherwise validates:
//! - the publication: `FOR TABLE outbox_events WITH (publish = 'insert',
//!   publish_via_partition_root = true)`, so rows of every daily partition arrive
//!   under the root table; created before the slot, because pgoutput reads it through
//!   the slot's historic catalog snapshot;
//! - the slot: logical, plugin `pgoutput`, this database, WAL not lost. Anything else
//!   is a `Config` error naming the slot.
//!
//! A slot that resumes after the saved cursor means events were lost (pitfall P4: a
//! re-created slot starts at the present). The relay refuses to start, with a
//! `Config` error starting "events lost" and naming the slot, when:
//! - the slot is missing but the relay has a cursor (it never re-creates it then);
//! - the slot's `confirmed_flush_lsn` is after the cursor's LSN (someone advanced it,
//!   or dropped and re-created it);
//! - the slot's `wal_status` is `lost` (`max_slot_wal_keep_size` was exceeded).
//!
//! The first start records the slot's start point in the handover row, so the check
//! works from then on (against the LSN cursor once there is one). Recovery is
//! deliberate: deliver the events after the cursor another way (the polling relay),
//! then delete the relay's `relay_cursors` rows (`<relay>` and `<relay>@cdc-handover`).
//!
//! While the relay is caught up (everything it returned is acknowledged), it moves the
//! cursor and the slot to the WAL end a server keepalive reports, at most every
//! `idle_confirm_interval_ms`. Otherwise a quiet outbox in a busy database would pin
//! WAL at its last commit forever. Such a cursor has `row == BETWEEN_COMMITS`
//! (`i64::MIN`): before every row of the commit at that LSN.
//!
//! # Operations
//! - The role needs `REPLICATION` (or superuser), and to create the publication, the
//!   ownership of the outbox table; with `create_missing = false` a DBA creates both
//!   once. `pg_hba.conf` must allow replication connections.
//! - One session per slot: a second instance of the same relay fails to start with a
//!   transient "held by another session" error — the slot fences relay instances.
//!   After a crash the old session lets go within moments; the relay waits up to
//!   `slot_busy_timeout_ms` for that.
//! - A stopped relay's slot keeps WAL until it is consumed: watch
//!   [`CdcRelay::slot_lag`], set `max_slot_wal_keep_size`, and drop the slot
//!   (`SELECT pg_drop_replication_slot('outbox_cdc')`) with its cursor row when the
//!   relay is retired.
//! - To switch an outbox from polling to CDC: stop the polling relay and start the CDC
//!   relay under the same name. It catches up from the polling cursor, so nothing is
//!   lost and nothing before the cursor is sent again. Never run both at once under
//!   one name: the slot fences CDC instances only once they stream.
//! - The replication connection has no TLS (like sqlx in this workspace): a URL with
//!   `sslmode=require` or stricter is refused.
//!
//! # Cancel safety
//! `next_batch`, `wait` and `acknowledge` may be dropped at any await: decoded changes
//! are queued before anything else is awaited, so a cancelled call loses no event; a
//! cancelled `acknowledge` either saved the cursor or did not, and the slot is
//! confirmed only by a later, completed one.
//!
//! # Configuration
//! See [`CdcConfig`]: every field, its default and its meaning.

mod catch_up;
mod config;
mod decode;
mod error;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod leave;
mod position;
mod relay;
mod slot;
mod stream;

pub use config::{
    CdcConfig, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_CURSOR_TABLE, DEFAULT_IDLE_CONFIRM_INTERVAL_MS,
    DEFAULT_MAX_BATCH, DEFAULT_MAX_BUFFERED, DEFAULT_PUBLICATION, DEFAULT_RELAY, DEFAULT_SCHEMA,
    DEFAULT_SLOT, DEFAULT_SLOT_BUSY_TIMEOUT_MS, DEFAULT_STATUS_INTERVAL_MS, DEFAULT_TABLE,
};
pub use leave::LeftCdc;
pub use position::{BETWEEN_COMMITS, format_lsn, parse_lsn};
pub use relay::{CdcRelay, SlotLag};
pub use slot::{PLUGIN, check_wal_level};
