//! `PgTreasuryConsumer`: the reference consumer on PostgreSQL — the inbox and the
//! treasury balances in one transaction per message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{
    Accepted, FanoutMessage, GapAlarm, Handler, InboxEngine, InboxMessage, MessageSink, Result,
};
use outbox_store_postgres::{PgConfig, PgInbox, PgStore, map_error};
use sqlx::{PgConnection, PgPool};
use tracing::Instrument;

use super::impact::deltas;
use super::stats::ConsumerStats;

/// Applies ledger transactions to `treasury_balances` through a Postgres inbox.
#[derive(Debug, Clone)]
pub struct PgTreasuryConsumer {
    pool: PgPool,
    engine: InboxEngine,
    stats: Arc<ConsumerStats>,
}

/// Collects the deltas of every message one transaction applies (the message and the
/// held ones it releases), so they are written at the end in one statement, in one
/// global row order.
#[derive(Default)]
struct CollectImpact {
    summed: BTreeMap<(String, String), i64>,
}

impl Handler<PgInbox<'_>> for CollectImpact {
    async fn apply(&mut self, _inbox: &mut PgInbox<'_>, message: &InboxMessage) -> Result<()> {
        add_deltas(&mut self.summed, message)
    }
}

/// Adds `message`'s deltas to `summed`, per (account, asset).
fn add_deltas(summed: &mut BTreeMap<(String, String), i64>, message: &InboxMessage) -> Result<()> {
    for d in deltas(message)? {
        let total = summed.entry((d.account, d.asset)).or_default();
        *total = total.checked_add(d.amount).ok_or_else(|| {
            outbox_core::Error::invalid("postings", "the amounts overflow a signed 64-bit sum")
        })?;
    }
    Ok(())
}

/// Writes a message's treasury impact on `conn`, summed per (account, asset) into one
/// statement: one round trip whatever the number of postings (a single upsert may not
/// touch the same row twice, hence the sums).
pub async fn write_impact(conn: &mut PgConnection, message: &InboxMessage) -> Result<()> {
    let mut summed = BTreeMap::new();
    add_deltas(&mut summed, message)?;
    write_summed(conn, summed).await
}

/// One upsert of every balance row in `summed`, in (account, asset) order. Every
/// transaction locks the rows it shares with others (`world`, fee accounts) in that
/// one order, so two of them never wait for each other in a cycle (a deadlock).
async fn write_summed(
    conn: &mut PgConnection,
    summed: BTreeMap<(String, String), i64>,
) -> Result<()> {
    if summed.is_empty() {
        return Ok(());
    }
    let (mut accounts, mut assets, mut amounts) = (Vec::new(), Vec::new(), Vec::new());
    for ((account, asset), amount) in summed {
        accounts.push(account);
        assets.push(asset);
        amounts.push(amount);
    }
    // unnest yields the rows in array order, and the upsert locks them in that order.
    sqlx::query(
        "INSERT INTO treasury_balances (account, asset, balance)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
         ON CONFLICT (account, asset) DO UPDATE SET balance = treasury_balances.balance + excluded.balance",
    )
    .bind(accounts)
    .bind(assets)
    .bind(amounts)
    .execute(conn)
    .await
    .map_err(map_error)?;
    Ok(())
}

impl PgTreasuryConsumer {
    /// Connects (and migrates) the consumer database.
    pub async fn open(config: PgConfig, consumer: &str, gap_alarm_after: Duration) -> Result<Self> {
        let store = PgStore::open(config).await?;
        let pool = store.pool().clone();
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS treasury_balances (
                 account TEXT NOT NULL, asset TEXT NOT NULL, balance BIGINT NOT NULL,
                 PRIMARY KEY (account, asset))",
        )
        .execute(&pool)
        .await
        .map_err(map_error)?;
        Ok(Self {
            pool,
            engine: InboxEngine::new(consumer).gap_alarm_after(gap_alarm_after),
            stats: Arc::new(ConsumerStats::default()),
        })
    }

    pub fn stats(&self) -> &ConsumerStats {
        &self.stats
    }

    /// Applies one message in its own transaction: the inbox's decision, then the
    /// impact of everything it applied (the message and the held ones it released) in
    /// one statement.
    ///
    /// # Errors
    /// `InvalidInput` naming the field (permanent) for a message that can never be
    /// applied (a payload that is not a ledger transaction, a float amount), before
    /// anything is written: it is never held, where it would fail the message that
    /// fills its gap. Storage errors keep their class (a deadlock is transient).
    pub async fn apply_one(&self, message: InboxMessage) -> Result<Accepted> {
        deltas(&message)?;
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let mut impact = CollectImpact::default();
        let accepted = {
            let mut inbox = PgInbox::new(&mut tx);
            self.engine.accept(&mut inbox, message, &mut impact).await?
        };
        write_summed(&mut tx, impact.summed).await?;
        tx.commit().await.map_err(map_error)?;
        self.stats.record(&accepted);
        outbox_core::metrics::inbox_accepted(self.engine.consumer(), &accepted);
        Ok(accepted)
    }

    /// Raises alarms for gaps older than the alarm age (never skips them).
    pub async fn check_gaps(&self) -> Result<Vec<GapAlarm>> {
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let alarms = self.engine.check_gaps(&mut PgInbox::new(&mut tx)).await?;
        tx.commit().await.map_err(map_error)?;
        Ok(alarms)
    }

    /// Balances per (account, asset) as the treasury table holds them.
    pub async fn balances(&self) -> Result<BTreeMap<(String, String), i64>> {
        let rows: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT account, asset, balance FROM treasury_balances")
                .fetch_all(&self.pool)
                .await
                .map_err(map_error)?;
        Ok(rows.into_iter().map(|(a, s, b)| ((a, s), b)).collect())
    }

    /// Instructions applied, by account and sequence: `(account, sequence, instruction id, kind)`.
    pub async fn applied(&self) -> Result<Vec<(String, u64, String, String)>> {
        let rows: Vec<(String, i64, String, String)> = sqlx::query_as(
            "SELECT account, sequence, instruction_id, kind FROM inbox_messages
             WHERE consumer = $1 ORDER BY account, sequence",
        )
        .bind(self.engine.consumer())
        .fetch_all(&self.pool)
        .await
        .map_err(map_error)?;
        Ok(rows
            .into_iter()
            .map(|(a, s, i, k)| (a, s as u64, i, k))
            .collect())
    }
}

#[async_trait]
impl MessageSink for PgTreasuryConsumer {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        for message in messages {
            let (id, sequence) = (message.instruction_id.clone(), message.sequence);
            // In the trace the message carries: docs/TRACING.md.
            let span = outbox_core::trace::inbox_apply_span(&message, self.engine.consumer());
            let accepted = self
                .apply_one(message.to_inbox())
                .instrument(span)
                .await
                .map_err(|e| e.with("delivery", delivery_id))?;
            tracing::debug!(instruction_id = %id, account = %message.account.as_str(), sequence, ?accepted, "treasury inbox");
        }
        Ok(())
    }
}
