//! `CdcRelay`: outbox events from PostgreSQL logical replication, in commit order, with
//! a durable cursor and a slot confirmed only up to that cursor; on its first start,
//! everything committed before the slot first, through the catch-up.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use outbox_core::{Error, ErrorKind, OutboxEvent, Position, Relay, Result};
use pgwire_replication::{Lsn, PgWireError, ReplicationClient, ReplicationEvent};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::time::Instant;

use super::catch_up::{self, CatchUp, Handover};
use super::config::{CdcConfig, ReplicationTarget, redact};
use super::decode::{self, Message, OutboxLayout};
use super::error;
use super::position::{BETWEEN_COMMITS, format_lsn, log_parts, not_ours};
use super::slot;
use super::stream;
use crate::cursors::CursorTable;
use crate::position::PgPosition;

/// A [`Relay`] that tails the outbox through a logical replication slot.
///
/// Positions are `PgPosition::Log { lsn: commit LSN, row }`: commit LSNs order
/// transactions, rows order events inside one. Events committed before the slot
/// existed come first, from the catch-up, as `PgPosition::Snapshot` (which sorts
/// before every log position). The cursor is written through the store's cursor table
/// under the store's cursor rule (`outbox_core::Store`, "Cursors"). See the module
/// docs for the guarantees after a restart.
pub struct CdcRelay {
    config: CdcConfig,
    target: ReplicationTarget,
    pool: PgPool,
    cursors: CursorTable,
    /// Where the slot took over from the catch-up; `None` for a cursor saved before
    /// the catch-up existed (nothing to skip then).
    handover: Option<Handover>,
    /// Set until the catch-up has returned every row committed before the slot.
    catch_up: Option<CatchUp>,
    session: Option<Session>,
    /// A stream failure seen where it could not be returned (in `wait`, or after
    /// events were already buffered); `next_batch` reports it, then reconnects.
    broken: Option<Error>,
    intake: Intake,
    /// The last position handed out by `next_batch`.
    returned: Option<Position>,
    /// The durable cursor: a snapshot position while catching up, then a log position.
    acknowledged: Option<Position>,
    last_idle_confirm: Instant,
}

/// Decoded events not yet handed out, and how far decoding got.
#[derive(Debug, Default)]
struct Intake {
    ready: VecDeque<OutboxEvent>,
    /// The last position queued (or returned). A new session re-sends everything
    /// after the slot's confirmed point, so anything at or before this is a repeat.
    taken: Option<Position>,
}

/// One replication connection and the pgoutput state that lives as long as it.
struct Session {
    client: ReplicationClient,
    /// Relation id → the outbox layout, or `None` for another table.
    relations: HashMap<u32, Option<OutboxLayout>>,
    /// Commit LSN of the transaction being received (from its Begin).
    commit_lsn: Option<u64>,
    /// The last outbox position decoded in this session, to check the order.
    last: Option<Position>,
}

/// How far the slot retains WAL for this relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLag {
    /// WAL the server keeps for the slot (from its restart point to the current WAL end).
    pub retained_wal_bytes: u64,
    /// WAL after the slot's confirmed point: what a restart would read again or newly.
    pub unconfirmed_wal_bytes: u64,
    /// Whether a replication session holds the slot now.
    pub active: bool,
}

impl CdcRelay {
    /// Connects, checks the server and the slot, and resumes after the saved cursor:
    /// streaming when it is an LSN, catching up otherwise (a first start, a polling
    /// relay's cursor of the same name, or a catch-up cut short).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for `wal_level` other than `logical`, a slot with the wrong
    /// plugin or database, a slot that moved past the saved cursor or is missing while
    /// a cursor exists (events lost), an invalid configuration; storage errors otherwise
    /// (transient for connection trouble and a slot held by another session).
    pub async fn open(config: CdcConfig) -> Result<Self> {
        config.validate()?;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(config.connect_timeout())
            .connect_with(config.connect_options()?)
            .await
            .map_err(|e| {
                error::sql("connecting to PostgreSQL", e).with("url", redact(&config.url))
            })?;
        Self::open_with_pool(config, pool).await
    }

    /// Like [`CdcRelay::open`], with the caller's pool for cursor and slot queries.
    pub async fn open_with_pool(config: CdcConfig, pool: PgPool) -> Result<Self> {
        config.validate()?;
        let target = config.replication_target()?;
        slot::check_server_wal_level(&pool).await?;
        let cursors = CursorTable::qualified(&config.schema, &config.cursor_table);
        let saved = cursors
            .load(&pool, &config.relay)
            .await?
            .map(PgPosition::encode);
        let mut handover = catch_up::load(&pool, &cursors, &config.relay).await?;
        // The publication first: pgoutput reads it through the slot's historic
        // catalog snapshot, so it must exist before the slot starts decoding.
        slot::ensure_publication(&pool, &config).await?;
        let stream_from = stream_cursor(saved, handover);
        let state = slot::ensure_slot(&pool, &config, stream_from).await?;
        if stream_from.is_none() {
            // First start: the slot exists now, so the bound X read in `begin` splits
            // the outbox into the catch-up's rows and the stream's (see `catch_up`).
            let new =
                catch_up::begin(&pool, &cursors, &config.relay, state.confirmed_flush).await?;
            slot::check_against_cursor(&config, state.confirmed_flush, Some(new.stream_start()))?;
            tracing::info!(relay = %config.relay, slot = %config.slot, created = state.created, after = ?saved, below_txid = new.below_txid, "CDC relay catches up on what was committed before its slot, then streams");
            handover = Some(new);
        }
        let catch_up = match (saved, handover) {
            (Some(position), _) if is_log(position) => None,
            (_, None) => None,
            (after, Some(handover)) => Some(CatchUp::new(&config, handover, after)),
        };
        let streaming = catch_up.is_none();
        let mut relay = Self {
            config,
            target,
            pool,
            cursors,
            handover,
            catch_up,
            session: None,
            broken: None,
            intake: Intake {
                ready: VecDeque::new(),
                taken: stream_cursor(saved, handover),
            },
            returned: saved,
            acknowledged: saved,
            last_idle_confirm: Instant::now(),
        };
        // While catching up the slot is not read; the session starts once it is done.
        if streaming {
            relay.connect().await?;
        }
        Ok(relay)
    }

    pub fn config(&self) -> &CdcConfig {
        &self.config
    }

    /// WAL kept for the slot and not yet confirmed, for metrics and alarms: a slot
    /// that is not consumed keeps WAL until the disk fills.
    pub async fn slot_lag(&self) -> Result<SlotLag> {
        let row: Option<(i64, i64, bool)> = sqlx::query_as(
            "SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, \
                    COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint, \
                    active \
             FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.config.slot)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| error::sql("reading the slot lag", e))?;
        let (retained, unconfirmed, active) = row.ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("replication slot {:?} does not exist", self.config.slot),
            )
            .with("slot", &self.config.slot)
        })?;
        Ok(SlotLag {
            retained_wal_bytes: u64::try_from(retained).unwrap_or(0),
            unconfirmed_wal_bytes: u64::try_from(unconfirmed).unwrap_or(0),
            active,
        })
    }

    /// Stops the replication session cleanly (the slot is free when this returns).
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(mut session) = self.session.take() {
            let timeout = self.config.connect_timeout();
            match tokio::time::timeout(timeout, session.client.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "replication session ended with an error")
                }
                Err(_) => session.client.abort(),
            }
        }
        Ok(())
    }

    /// Starts a session from the durable cursor. The slot is checked before (it may
    /// have been dropped or moved while no session held it; once started, the
    /// session's first status update could mask an advance) and after (once held,
    /// nobody else can move it).
    async fn connect(&mut self) -> Result<()> {
        let cursor = stream_cursor(self.acknowledged, self.handover);
        let from = match cursor {
            Some(position) => log_parts(position)?.0,
            None => 0,
        };
        slot::verify(&self.pool, &self.config, cursor).await?;
        let client = stream::start(&self.config, &self.target, from).await?;
        self.session = Some(Session {
            client,
            relations: HashMap::new(),
            commit_lsn: None,
            last: None,
        });
        if let Err(e) = slot::verify(&self.pool, &self.config, cursor).await {
            self.session = None;
            return Err(e);
        }
        Ok(())
    }

    /// Records a stream failure; the session is dropped and `next_batch` reports it.
    fn fail(&mut self, err: Error) {
        tracing::warn!(relay = %self.config.relay, slot = %self.config.slot, error = %err, "CDC stream failed");
        self.session = None;
        self.broken.get_or_insert(err);
    }

    /// Handles one result of the replication client.
    async fn receive(
        &mut self,
        received: std::result::Result<Option<ReplicationEvent>, PgWireError>,
    ) {
        let outcome = match received {
            Ok(Some(event)) => self.on_event(event).await,
            Ok(None) => {
                Err(Error::new(ErrorKind::Storage, "the replication stream ended").transient(None))
            }
            Err(e) => Err(error::replication("reading the replication stream", &e)),
        };
        if let Err(err) = outcome {
            self.fail(err.with("slot", &self.config.slot));
        }
    }

    async fn on_event(&mut self, event: ReplicationEvent) -> Result<()> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        match event {
            ReplicationEvent::Begin { final_lsn, .. } => {
                if let Some(open) = session.commit_lsn {
                    return Err(protocol(format!(
                        "Begin of commit {final_lsn} inside commit {}",
                        format_lsn(open)
                    )));
                }
                session.commit_lsn = Some(final_lsn.0);
            }
            ReplicationEvent::Commit { lsn, .. } => match session.commit_lsn.take() {
                Some(open) if open == lsn.0 => {}
                open => {
                    return Err(protocol(format!(
                        "Commit {lsn} does not close the open transaction ({:?})",
                        open.map(format_lsn)
                    )));
                }
            },
            ReplicationEvent::XLogData { data, .. } => {
                on_change(
                    session,
                    &mut self.intake,
                    &self.config,
                    self.handover,
                    &data,
                )?;
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => self.confirm_idle(wal_end.0).await,
            ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
        }
        Ok(())
    }

    /// While everything received is acknowledged, moves the cursor and the slot to the
    /// server's WAL end (from a keepalive). Without this a quiet outbox in a busy
    /// database pins WAL forever: the slot would stay at the last outbox commit.
    ///
    /// Safe because the keepalive follows, in stream order, every commit before that
    /// point; none of them holds an unacknowledged outbox row.
    async fn confirm_idle(&mut self, wal_end: u64) {
        let Some(session) = self.session.as_ref() else {
            return;
        };
        let caught_up = self.intake.ready.is_empty()
            && session.commit_lsn.is_none()
            && self.returned == self.acknowledged;
        let behind = stream_cursor(self.acknowledged, self.handover)
            .and_then(|a| log_parts(a).ok())
            .is_some_and(|(lsn, _)| lsn < wal_end);
        if !caught_up
            || !behind
            || self.last_idle_confirm.elapsed() < self.config.idle_confirm_interval()
        {
            return;
        }
        self.last_idle_confirm = Instant::now();
        let idle = PgPosition::Log {
            lsn: wal_end,
            row: BETWEEN_COMMITS,
        };
        let position = idle.encode();
        match self
            .cursors
            .save(&self.pool, &self.config.relay, idle, None)
            .await
        {
            Ok(()) => {
                self.acknowledged = Some(position);
                self.returned = Some(position);
                self.intake.taken = Some(position);
                session.client.update_applied_lsn(Lsn(wal_end));
                tracing::debug!(relay = %self.config.relay, position = %position, "idle: slot moved to the WAL end");
            }
            // Not fatal: the next keepalive tries again.
            Err(e) => {
                tracing::debug!(relay = %self.config.relay, error = %e, "idle confirmation failed")
            }
        }
    }

    /// Decodes whatever the client already holds, without waiting.
    async fn pump(&mut self) {
        while self.intake.ready.len() < self.config.max_buffered && self.broken.is_none() {
            let Some(session) = self.session.as_mut() else {
                break;
            };
            let Some(received) = session.client.recv().now_or_never() else {
                break;
            };
            self.receive(received).await;
        }
    }
}

/// Where streaming resumes: the saved LSN cursor, else the handover's slot start
/// (while catching up, or caught up with nothing streamed yet).
fn stream_cursor(saved: Option<Position>, handover: Option<Handover>) -> Option<Position> {
    match saved {
        Some(position) if is_log(position) => Some(position),
        _ => handover.map(Handover::stream_start),
    }
}

/// Whether `position` is a streamed (log) position rather than a catch-up one.
fn is_log(position: Position) -> bool {
    matches!(PgPosition::decode(&position), Ok(PgPosition::Log { .. }))
}

/// Applies one pgoutput change: learns relations, queues new outbox inserts (except
/// those the catch-up delivered).
fn on_change(
    session: &mut Session,
    intake: &mut Intake,
    config: &CdcConfig,
    handover: Option<Handover>,
    data: &[u8],
) -> Result<()> {
    match decode::parse(data)? {
        Message::Relation(relation) => {
            let is_outbox = relation.namespace == config.schema && relation.name == config.table;
            let layout = if is_outbox {
                Some(OutboxLayout::of(&relation)?)
            } else {
                None
            };
            session.relations.insert(relation.id, layout);
        }
        Message::Insert { relation, tuple } => {
            // Another table of a wider publication: not ours.
            let Some(Some(layout)) = session.relations.get(&relation) else {
                return Ok(());
            };
            let commit_lsn = session
                .commit_lsn
                .ok_or_else(|| protocol("Insert outside a transaction".to_owned()))?;
            let position = PgPosition::Log {
                lsn: commit_lsn,
                row: layout.position(&tuple)?,
            }
            .encode();
            // Resuming needs positions that grow in stream order: commit LSNs do, and
            // rows inside a commit do when `position` is DEFAULT nextval() (one session
            // draws increasing values). A caller-chosen position could break that.
            if session.last.is_some_and(|last| position <= last) {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!(
                        "outbox rows out of position order inside commit {}: {position} after {}; \
                         outbox positions must come from the table's sequence in insert order",
                        format_lsn(commit_lsn),
                        session.last.map(|p| p.to_string()).unwrap_or_default()
                    ),
                ));
            }
            session.last = Some(position);
            if intake.taken.is_some_and(|taken| position <= taken) {
                return Ok(());
            }
            // Committed after the slot's start but below X: the catch-up sent it.
            if let Some(handover) = handover
                && handover.caught_up(layout.txid(&tuple)?)
            {
                return Ok(());
            }
            let event = layout.event(&tuple, commit_lsn)?;
            intake.taken = Some(position);
            intake.ready.push_back(event);
        }
        Message::Update { relation } | Message::Delete { relation } => {
            if matches!(session.relations.get(&relation), Some(Some(_))) {
                tracing::error!(table = %config.table, "an outbox row was updated or deleted: the table must be append-only (docs/ARCHITECTURE.md, invariant 4)");
            }
        }
        Message::Truncate | Message::Ignored => {}
    }
    Ok(())
}

fn protocol(message: String) -> Error {
    Error::new(ErrorKind::Internal, format!("pgoutput stream: {message}"))
}

#[async_trait]
impl Relay for CdcRelay {
    fn name(&self) -> &str {
        &self.config.relay
    }

    /// While catching up, reads the outbox below X; then reconnects first when the
    /// stream broke and returns what is decoded now. Never waits.
    async fn next_batch(&mut self, max: usize) -> Result<Vec<OutboxEvent>> {
        if let Some(catch_up) = self.catch_up.as_mut() {
            match catch_up
                .next(&self.pool, max.min(self.config.max_batch))
                .await?
            {
                Some(batch) => {
                    if let Some(last) = batch.last() {
                        self.returned = Some(last.position);
                    }
                    return Ok(batch);
                }
                None => {
                    tracing::info!(relay = %self.config.relay, slot = %self.config.slot, "CDC catch-up complete: streaming from the slot");
                    self.catch_up = None;
                }
            }
        }
        // Events queued before a failure are committed: they are handed out first,
        // and the new session's repeats of them are skipped.
        if self.intake.ready.is_empty() {
            if let Some(err) = self.broken.take() {
                return Err(err);
            }
            if self.session.is_none() {
                self.connect().await?;
            }
        }
        self.pump().await;
        let n = max.min(self.config.max_batch).min(self.intake.ready.len());
        let batch: Vec<OutboxEvent> = self.intake.ready.drain(..n).collect();
        if let Some(last) = batch.last() {
            self.returned = Some(last.position);
        }
        Ok(batch)
    }

    /// Saves `through` through the store's cursor table (the store's cursor rule: a
    /// position at or before the saved one changes nothing), then confirms its commit
    /// LSN to the slot. A catch-up (snapshot) position is saved as a polling-style
    /// cursor, and confirms nothing: the slot stays at its start until the first log
    /// position.
    ///
    /// Confirming the commit LSN (not its end) keeps that whole transaction in the
    /// slot: `through` may sit in the middle of it. After a restart the transaction is
    /// streamed again and its rows up to `through` are skipped against the cursor.
    /// The slot is never confirmed past the saved cursor: `through` is at or before it.
    async fn acknowledge(&mut self, through: Position) -> Result<()> {
        let position = PgPosition::decode(&through).map_err(|_| not_ours(through))?;
        if self.acknowledged.is_some_and(|a| through <= a) {
            return Ok(());
        }
        if self.returned.is_none_or(|r| through > r) {
            return Err(Error::invalid(
                "position",
                format!(
                    "{through} is after the last event this relay returned ({:?}); acknowledging it could lose events",
                    self.returned
                ),
            ));
        }
        self.cursors
            .save(&self.pool, &self.config.relay, position, None)
            .await?;
        self.acknowledged = Some(through);
        if let (Some(session), PgPosition::Log { lsn, .. }) = (&self.session, position) {
            session.client.update_applied_lsn(Lsn(lsn));
        }
        Ok(())
    }

    fn acknowledged(&self) -> Option<Position> {
        self.acknowledged
    }

    /// Returns at once when events are decoded; otherwise reads the stream until one
    /// arrives or `interval` passes. Keepalives are handled on the way.
    async fn wait(&mut self, interval: Duration) {
        let deadline = Instant::now() + interval;
        loop {
            if !self.intake.ready.is_empty() || self.broken.is_some() {
                return;
            }
            let Some(session) = self.session.as_mut() else {
                tokio::time::sleep_until(deadline).await;
                return;
            };
            let received = tokio::select! {
                received = session.client.recv() => received,
                () = tokio::time::sleep_until(deadline) => return,
            };
            self.receive(received).await;
        }
    }
}

impl fmt::Debug for CdcRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CdcRelay")
            .field("relay", &self.config.relay)
            .field("slot", &self.config.slot)
            .field("catching_up", &self.catch_up.is_some())
            .field("streaming", &self.session.is_some())
            .field("buffered", &self.intake.ready.len())
            .field("returned", &self.returned)
            .field("acknowledged", &self.acknowledged)
            .finish_non_exhaustive()
    }
}
