//! `TreasuryConsumer`: a `MessageSink` that keeps per-account, per-asset balances
//! from the postings of the ledger transactions it receives.
//!
//! Deliveries are written through a [`GroupCommit`]: the deliveries that arrive
//! (from the transport's concurrent queue or partition workers) while one commit is
//! being flushed share the next, each in a savepoint of its own, so the consumer is
//! not held to one disk flush per message (docs/ARCHITECTURE.md#group-commit-on-sqlite).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use outbox_core::{
    Accepted, FanoutMessage, GapAlarm, InboxEngine, InboxMessage, MessageSink, Result,
};
use outbox_store_sqlite::{
    GroupCommit, SqliteConfig, SqliteInbox, SqliteStore, connect, map_error,
};
use rusqlite::{Connection, TransactionBehavior};

use super::impact::deltas;
use super::stats::ConsumerStats;

/// Applies ledger transactions to `treasury_balances` through an inbox.
#[derive(Debug, Clone)]
pub struct TreasuryConsumer {
    config: SqliteConfig,
    engine: InboxEngine,
    stats: Arc<ConsumerStats>,
    /// Deliveries are applied through it, on one kept connection: SQLite has a
    /// single write lock anyway.
    deliveries: Arc<GroupCommit<Vec<FanoutMessage>, Vec<Accepted>>>,
}

impl TreasuryConsumer {
    /// Opens (and migrates) the consumer database.
    pub async fn open(
        config: SqliteConfig,
        consumer: &str,
        gap_alarm_after: Duration,
    ) -> Result<Self> {
        drop(SqliteStore::open(config.clone()).await?);
        let writer = connect(&config)?;
        writer
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS treasury_balances (
                     account TEXT NOT NULL, asset TEXT NOT NULL, balance INTEGER NOT NULL,
                     PRIMARY KEY (account, asset)) WITHOUT ROWID",
            )
            .map_err(map_error)?;
        let engine = InboxEngine::new(consumer).gap_alarm_after(gap_alarm_after);
        let apply = engine.clone();
        let deliveries = GroupCommit::new(
            Arc::new(Mutex::new(writer)),
            Box::new(move |conn, messages: &Vec<FanoutMessage>, _now| {
                apply_delivery(&apply, conn, messages)
            }),
        );
        Ok(Self {
            config,
            engine,
            stats: Arc::new(ConsumerStats::default()),
            deliveries,
        })
    }

    pub fn stats(&self) -> &ConsumerStats {
        &self.stats
    }

    /// Applies one message in its own transaction on `conn` (a connection from
    /// [`TreasuryConsumer::connect`]), without group commit: for callers that apply
    /// messages one by one (the inbox benchmark's one-transaction-per-message row).
    ///
    /// # Errors
    /// `InvalidInput` naming the field (permanent) for a message that can never be
    /// applied (a payload that is not a ledger transaction, a float amount), before
    /// anything is written: it is never held, where it would fail the message that
    /// fills its gap.
    pub fn apply_one(&self, conn: &mut Connection, message: InboxMessage) -> Result<Accepted> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_error)?;
        let accepted = apply_message(&self.engine, &tx, message)?;
        tx.commit().map_err(map_error)?;
        self.record(&accepted);
        Ok(accepted)
    }

    fn record(&self, accepted: &Accepted) {
        self.stats.record(accepted);
        outbox_core::metrics::inbox_accepted(self.engine.consumer(), accepted);
    }

    /// A connection to the consumer database, for [`TreasuryConsumer::apply_one`].
    pub fn connect(&self) -> Result<Connection> {
        connect(&self.config)
    }

    /// Raises alarms for gaps older than the alarm age (never skips them).
    pub fn check_gaps(&self) -> Result<Vec<GapAlarm>> {
        let mut conn = connect(&self.config)?;
        let tx = conn.transaction().map_err(map_error)?;
        let alarms = block_on(self.engine.check_gaps(&mut SqliteInbox::new(&tx)))?;
        tx.commit().map_err(map_error)?;
        Ok(alarms)
    }

    /// Balances per (account, asset) as the treasury table holds them.
    pub fn balances(&self) -> Result<BTreeMap<(String, String), i64>> {
        let conn = connect(&self.config)?;
        let mut stmt = conn
            .prepare("SELECT account, asset, balance FROM treasury_balances")
            .map_err(map_error)?;
        let rows = stmt
            .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
            .map_err(map_error)?;
        rows.collect::<rusqlite::Result<_>>().map_err(map_error)
    }

    /// Instructions applied per account, by sequence: `(account, sequence, instruction id, kind)`.
    pub fn applied(&self) -> Result<Vec<(String, u64, String, String)>> {
        let conn = connect(&self.config)?;
        let mut stmt = conn
            .prepare("SELECT account, sequence, instruction_id, kind FROM inbox_messages ORDER BY account, sequence")
            .map_err(map_error)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get(2)?, r.get(3)?))
            })
            .map_err(map_error)?;
        rows.collect::<rusqlite::Result<_>>().map_err(map_error)
    }
}

/// The SQLite inbox and this handler never wait on anything, so their futures finish
/// on the first poll: completing them here keeps the `!Send` transaction on this
/// (blocking) thread, with or without a runtime around it.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    future
        .now_or_never()
        .expect("SQLite inbox futures complete on their first poll")
}

fn apply_postings(conn: &Connection, message: &InboxMessage) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO treasury_balances (account, asset, balance) VALUES (?1, ?2, ?3)
             ON CONFLICT (account, asset) DO UPDATE SET balance = balance + excluded.balance",
        )
        .map_err(map_error)?;
    for d in deltas(message)? {
        stmt.execute((&d.account, &d.asset, d.amount))
            .map_err(map_error)?;
    }
    Ok(())
}

/// One message through the inbox on `conn` (the caller's transaction or savepoint).
/// Its postings are checked before the inbox sees it, so a message that can never
/// be applied is refused rather than held.
fn apply_message(
    engine: &InboxEngine,
    conn: &Connection,
    message: InboxMessage,
) -> Result<Accepted> {
    deltas(&message)?;
    let mut inbox = SqliteInbox::new(conn);
    let mut handler =
        |inbox: &mut SqliteInbox<'_>, m: &InboxMessage| apply_postings(inbox.connection(), m);
    block_on(engine.accept(&mut inbox, message, &mut handler))
}

/// A delivery's messages in order, inside its savepoint of the group: an error
/// rolls back the whole delivery, which the transport then offers again.
fn apply_delivery(
    engine: &InboxEngine,
    conn: &Connection,
    messages: &[FanoutMessage],
) -> Result<Vec<Accepted>> {
    let mut outcomes = Vec::with_capacity(messages.len());
    for fanned_out in messages {
        // In the trace the message carries: docs/TRACING.md.
        let _span = outbox_core::trace::inbox_apply_span(fanned_out, engine.consumer()).entered();
        let accepted = apply_message(engine, conn, fanned_out.to_inbox())?;
        tracing::debug!(
            instruction_id = %fanned_out.instruction_id,
            account = %fanned_out.account,
            sequence = fanned_out.sequence,
            ?accepted,
            "treasury inbox"
        );
        outcomes.push(accepted);
    }
    Ok(outcomes)
}

#[async_trait]
impl MessageSink for TreasuryConsumer {
    /// Applies the delivery's messages in order, all or none, and answers once they
    /// are durable. A message that can never be applied (see
    /// [`TreasuryConsumer::apply_one`]) fails its whole delivery, and nothing of it is
    /// kept; the deliveries grouped with it are not affected.
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        let outcomes = self
            .deliveries
            .submit(messages)
            .await
            .map_err(|e| e.with("delivery", delivery_id))?;
        for accepted in &outcomes {
            self.record(accepted);
        }
        Ok(())
    }
}
