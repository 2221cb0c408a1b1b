//! The Formance ledger's log as a [`LedgerLogSource`]: what catch-up reads when the
//! webhooks left a gap.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{LedgerLogEntry, LedgerLogSource, Result};

use crate::client::FormanceLedger;
use crate::ledger_events::messages_from_log;

/// `GET /v2/{ledger}/logs` through [`FormanceLedger::logs_after`] (oldest first, one
/// page of memory), each entry turned into the messages its webhook would have carried
/// by the same conversion as the webhook intake's.
pub struct FormanceLedgerLog {
    client: Arc<FormanceLedger>,
}

impl FormanceLedgerLog {
    pub fn new(client: Arc<FormanceLedger>) -> Self {
        Self { client }
    }
}

impl fmt::Debug for FormanceLedgerLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormanceLedgerLog")
            .field("ledger", &self.client.ledger_name())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl LedgerLogSource for FormanceLedgerLog {
    fn ledger(&self) -> &str {
        self.client.ledger_name()
    }

    /// # Errors
    /// The client's (transient when the ledger cannot be reached); `InvalidInput`
    /// naming the JSON path and the `log_id` for an entry whose outbox metadata is
    /// malformed.
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerLogEntry>> {
        let logs = self.client.logs_after(after, limit).await?;
        logs.into_iter()
            .map(|log| {
                let messages =
                    messages_from_log(self.ledger(), &log.kind, log.data.get().as_bytes())
                        .map_err(|e| e.with("log_id", log.id).with("ledger", self.ledger()))?;
                Ok(LedgerLogEntry {
                    id: log.id,
                    date: log.date,
                    messages,
                })
            })
            .collect()
    }
}
