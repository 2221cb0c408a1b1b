//! The demo's one staged fault on Hop 2: the webhook intake refuses payout A's
//! webhook (503) until its reversal has arrived, as a lost delivery would. The
//! reversal is stored and fanned out first, reaches the consumer's inbox first and is
//! held there; the ledger's retry then delivers A, and the reversal is released.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use outbox_core::{Error, ErrorKind, EventId, FanoutMessage, MessageSink, Result};

pub struct HoldPostingUntilReversal {
    pub inner: Arc<dyn MessageSink>,
    pub posting: EventId,
    pub reversal: EventId,
    pub reversal_seen: AtomicBool,
}

#[async_trait]
impl MessageSink for HoldPostingUntilReversal {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        let (posting, reversal) = (self.posting.to_string(), self.reversal.to_string());
        if messages.iter().any(|m| m.instruction_id == reversal) {
            self.reversal_seen.store(true, Ordering::SeqCst);
        }
        if !self.reversal_seen.load(Ordering::SeqCst)
            && messages.iter().any(|m| m.instruction_id == posting)
        {
            return Err(Error::new(
                ErrorKind::Transport,
                "demo: payout A is held back until its reversal arrives",
            )
            .transient(None));
        }
        self.inner.accept(delivery_id, messages).await
    }
}
