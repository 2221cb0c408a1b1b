//! The webhook intake: the ledger's verified deliveries (read by the ledger adapter's
//! decoder) appended to the fan-out log, then the fan-out loop woken.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::fanout::WebhookDecoder;
use outbox_core::{FanoutMessage, FanoutStore, MessageSink, Result, Wakeup};

use crate::config::ReceiverConfig;
use crate::receiver::{RunningReceiver, start_receiver};

/// A [`MessageSink`] that appends each delivery to a [`FanoutStore`].
///
/// Dedup is the store's job (on the webhook id and on each message's
/// [`FanoutMessage::dedup_key`]), so a retried delivery or a ledger replay's re-emit
/// is answered 2xx without storing anything twice. `accept` returns only after the
/// append is durable, so the receiver's 2xx means "stored".
pub struct FanoutIntake {
    store: Arc<dyn FanoutStore>,
    wakeup: Option<Wakeup>,
}

impl FanoutIntake {
    /// `wakeup` is notified after every append that stored something new, so the
    /// fan-out loop does not wait for its poll interval.
    pub fn new(store: Arc<dyn FanoutStore>, wakeup: Option<Wakeup>) -> Self {
        Self { store, wakeup }
    }
}

impl fmt::Debug for FanoutIntake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanoutIntake")
            .field("wakeup", &self.wakeup.is_some())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl MessageSink for FanoutIntake {
    /// # Errors
    /// The store's error, with the delivery id in its context: transient when the
    /// store cannot be reached (the receiver answers 503 and the ledger retries).
    ///
    /// Cancel safety: the append is atomic; a cancelled call stored all or nothing and
    /// the ledger's retry settles it.
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        // An event that yields no message (a type we ignore, a transaction without
        // outbox metadata) has nothing to fan out; the delivery is not recorded.
        if messages.is_empty() {
            tracing::debug!(delivery_id, "webhook delivery without outbox messages");
            return Ok(());
        }
        let outcome = self
            .store
            .append(delivery_id, &messages)
            .await
            .map_err(|e| e.with("delivery", delivery_id))?;
        tracing::debug!(
            delivery_id,
            stored = outcome.stored,
            duplicates = outcome.duplicates,
            delivery_seen = outcome.delivery_seen,
            "webhook delivery appended to the fan-out log"
        );
        if outcome.stored > 0
            && let Some(wakeup) = &self.wakeup
        {
            wakeup.notify();
        }
        Ok(())
    }
}

/// Binds and serves the webhook intake: the receiver of [`start_receiver`], reading
/// deliveries with `decoder` (the ledger adapter's), feeding a [`FanoutIntake`] over
/// `store`.
///
/// # Errors
/// `Config` when the address cannot be bound.
pub async fn start_intake(
    config: ReceiverConfig,
    decoder: Arc<dyn WebhookDecoder>,
    store: Arc<dyn FanoutStore>,
    wakeup: Option<Wakeup>,
) -> Result<RunningReceiver> {
    start_receiver(config, decoder, Arc::new(FanoutIntake::new(store, wakeup))).await
}
