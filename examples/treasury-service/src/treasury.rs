//! `Treasury`: the service's consumer. One database transaction per message: the
//! inbox's decision (duplicate, stale, held, applied) and the treasury's booking of
//! what it applied commit together, or not at all.

use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{
    Accepted, FanoutMessage, GapAlarm, InboxEngine, InboxMessage, MessageSink, Result,
};
use outbox_store_postgres::{PgConfig, PgInbox, connect, map_error, migrate};
use sqlx::PgPool;

use crate::book::Book;
use crate::payload::decode;
use crate::schema::create_tables;

/// Applies Hop 2 messages to the treasury's tables through a PostgreSQL inbox.
#[derive(Debug, Clone)]
pub struct Treasury {
    pool: PgPool,
    engine: InboxEngine,
}

impl Treasury {
    /// Connects, creates the inbox tables (the outbox migrations) and the treasury's
    /// own, and keys the inbox on `consumer`. A gap open longer than
    /// `gap_alarm_after` raises an alarm at the next [`check_gaps`](Self::check_gaps).
    ///
    /// # Errors
    /// `InvalidInput` naming `database` or `schema`; storage errors (transient when the
    /// server cannot be reached).
    pub async fn open(
        config: &PgConfig,
        consumer: &str,
        gap_alarm_after: Duration,
    ) -> Result<Self> {
        let pool = connect(config).await?;
        migrate(&pool, config).await?;
        create_tables(&pool).await?;
        Ok(Self {
            pool,
            engine: InboxEngine::new(consumer).gap_alarm_after(gap_alarm_after),
        })
    }

    /// The pool the treasury writes through.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The consumer name the inbox rows are keyed on.
    pub fn consumer(&self) -> &str {
        self.engine.consumer()
    }

    /// Takes one message in its own transaction and commits.
    ///
    /// # Errors
    /// - `InvalidInput` naming the field (permanent) when the payload cannot be read;
    ///   checked before the transaction opens, so nothing is written and the message
    ///   is never held.
    /// - Storage errors keep their class (`map_error`): a deadlock, a serialization
    ///   failure or a lost connection is transient. The transaction rolled back, so
    ///   running the message again is safe.
    pub async fn apply(&self, message: InboxMessage) -> Result<Accepted> {
        decode(&message)?;
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let accepted = {
            let mut inbox = PgInbox::new(&mut tx);
            self.engine.accept(&mut inbox, message, &mut Book).await?
        };
        tx.commit().await.map_err(map_error)?;
        Ok(accepted)
    }

    /// Raises an alarm (an `exceptions` row and an error log line, once per gap) for
    /// every gap open longer than the alarm age. Never skips one: the held messages
    /// wait for the missing sequence, however long it takes.
    ///
    /// # Errors
    /// Storage errors, classified by `map_error`.
    pub async fn check_gaps(&self) -> Result<Vec<GapAlarm>> {
        let mut tx = self.pool.begin().await.map_err(map_error)?;
        let alarms = self.engine.check_gaps(&mut PgInbox::new(&mut tx)).await?;
        tx.commit().await.map_err(map_error)?;
        Ok(alarms)
    }
}

#[async_trait]
impl MessageSink for Treasury {
    /// Applies each message of the delivery in turn. `Ok` means every one is
    /// committed (or known), so the subscriber may ack the delivery.
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        for message in messages {
            let message = message.to_inbox();
            let (id, account, sequence) = (
                message.instruction_id.clone(),
                message.account.clone(),
                message.sequence,
            );
            // The subscriber adds the delivery, account and sequence to the error.
            let accepted = self
                .apply(message)
                .await
                .map_err(|e| e.with("instruction", &id))?;
            match accepted {
                Accepted::Applied { .. } | Accepted::Duplicate | Accepted::Held { .. } => {
                    tracing::debug!(delivery = delivery_id, instruction = %id, %account, sequence, ?accepted, "treasury inbox");
                }
                // Recorded in `exceptions` by the engine, in the same transaction: a
                // person must look. Acking is right, the message can never be applied.
                Accepted::Stale { .. }
                | Accepted::Conflict { .. }
                | Accepted::ConflictingOutcome { .. } => {
                    tracing::warn!(delivery = delivery_id, instruction = %id, %account, sequence, ?accepted, "treasury inbox: not applied, exception recorded");
                }
            }
        }
        Ok(())
    }
}
