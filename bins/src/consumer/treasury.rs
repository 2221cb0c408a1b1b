//! `TreasuryConsumer`: a `MessageSink` that keeps per-account, per-asset balances
//! from the postings of the ledger transactions it receives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use outbox_core::{
    Accepted, Error, ErrorKind, FanoutMessage, GapAlarm, InboxEngine, InboxMessage, MessageSink,
    Result,
};
use outbox_store_sqlite::{SqliteConfig, SqliteInbox, SqliteStore, connect, map_error};
use rusqlite::{Connection, TransactionBehavior};

use super::impact::deltas;
use super::stats::ConsumerStats;

/// Applies ledger transactions to `treasury_balances` through an inbox.
#[derive(Debug, Clone)]
pub struct TreasuryConsumer {
    config: SqliteConfig,
    engine: InboxEngine,
    stats: Arc<ConsumerStats>,
    /// The connection deliveries are applied on, opened on first use.
    writer: Arc<Mutex<Option<Connection>>>,
}

impl TreasuryConsumer {
    /// Opens (and migrates) the consumer database.
    pub async fn open(
        config: SqliteConfig,
        consumer: &str,
        gap_alarm_after: Duration,
    ) -> Result<Self> {
        drop(SqliteStore::open(config.clone()).await?);
        connect(&config)?
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS treasury_balances (
                     account TEXT NOT NULL, asset TEXT NOT NULL, balance INTEGER NOT NULL,
                     PRIMARY KEY (account, asset)) WITHOUT ROWID",
            )
            .map_err(map_error)?;
        Ok(Self {
            config,
            engine: InboxEngine::new(consumer).gap_alarm_after(gap_alarm_after),
            stats: Arc::new(ConsumerStats::default()),
            writer: Arc::default(),
        })
    }

    pub fn stats(&self) -> &ConsumerStats {
        &self.stats
    }

    /// Applies one message in its own transaction on `conn` (a connection from
    /// [`TreasuryConsumer::connect`], reused across the messages of a delivery).
    ///
    /// # Errors
    /// `InvalidInput` naming the field (permanent) for a message that can never be
    /// applied (a payload that is not a ledger transaction, a float amount), before
    /// anything is written: it is never held, where it would fail the message that
    /// fills its gap.
    pub fn apply_one(&self, conn: &mut Connection, message: InboxMessage) -> Result<Accepted> {
        deltas(&message)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_error)?;
        let mut inbox = SqliteInbox::new(&tx);
        let mut handler =
            |inbox: &mut SqliteInbox<'_>, m: &InboxMessage| apply_postings(inbox.connection(), m);
        let accepted = block_on(self.engine.accept(&mut inbox, message, &mut handler))?;
        tx.commit().map_err(map_error)?;
        self.stats.record(&accepted);
        outbox_core::metrics::inbox_accepted(self.engine.consumer(), &accepted);
        Ok(accepted)
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

#[async_trait]
impl MessageSink for TreasuryConsumer {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        let this = self.clone();
        let delivery_id = delivery_id.to_owned();
        tokio::task::spawn_blocking(move || {
            // One writer at a time through one kept connection: SQLite has a single
            // write lock anyway, and concurrent deliveries would otherwise wait in
            // its busy handler's sleeps (and each open a connection).
            let mut writer = this.writer.lock().unwrap_or_else(|p| p.into_inner());
            if writer.is_none() {
                *writer = Some(this.connect()?);
            }
            let conn = writer.as_mut().expect("connected above");
            for fanned_out in &messages {
                // In the trace the message carries: docs/TRACING.md.
                let _span = outbox_core::trace::inbox_apply_span(fanned_out, this.engine.consumer()).entered();
                let message = fanned_out.to_inbox();
                let (id, account, sequence) = (message.instruction_id.clone(), message.account.clone(), message.sequence);
                let accepted = this.apply_one(conn, message).map_err(|e| e.with("delivery", &delivery_id))?;
                tracing::debug!(instruction_id = %id, %account, sequence, ?accepted, "treasury inbox");
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Internal, format!("consumer task failed: {e}")))?
    }
}
