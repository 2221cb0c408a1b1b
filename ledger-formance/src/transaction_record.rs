//! Reading transactions back with their dates, for an audit: every transaction that
//! carries an outbox event id, and the transaction that reverted another.
//!
//! `Ledger::transaction_by_event_id` answers the relay's question ("is this event in
//! the ledger?") and refuses to pick one of two; an audit wants to see all of them,
//! with the ledger's own timestamps.

use chrono::{DateTime, Utc};
use outbox_core::{EventId, Metadata, OUTBOX_EVENT_ID_KEY, Posting, Result};
use serde::Deserialize;
use serde_json::json;

use crate::client::{FormanceLedger, Request};
use crate::wire::decode;

/// The metadata key Formance sets on a reversing transaction: the reverted id.
pub const REVERTS_METADATA_KEY: &str = "com.formance.spec/state/reverts";

/// Most transactions one lookup returns (Formance's maximum page size).
const MAX_MATCHES: usize = 100;

/// A ledger transaction as read back, with its dates (`V2Transaction`, volumes ignored).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransactionRecord {
    /// The ledger's transaction id.
    pub id: u64,
    /// Its movements, amounts in minor units.
    pub postings: Vec<Posting>,
    /// Its reference; `None` when it has none (Formance omits an empty one).
    #[serde(default, deserialize_with = "non_empty")]
    pub reference: Option<String>,
    /// Its metadata, the outbox identity included.
    #[serde(default)]
    pub metadata: Metadata,
    /// The effective date the ledger books it at.
    pub timestamp: DateTime<Utc>,
    /// When the ledger inserted it; `None` from a ledger that does not say.
    #[serde(default)]
    pub inserted_at: Option<DateTime<Utc>>,
    /// Whether a later transaction reverted it.
    #[serde(default)]
    pub reverted: bool,
    /// When it was reverted, if the ledger says.
    #[serde(default)]
    pub reverted_at: Option<DateTime<Utc>>,
}

fn non_empty<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<String>, D::Error> {
    let text: Option<String> = Option::deserialize(deserializer)?;
    Ok(text.filter(|t| !t.is_empty()))
}

#[derive(Deserialize)]
struct Page {
    cursor: PageData,
}

#[derive(Deserialize)]
struct PageData {
    data: Vec<TransactionRecord>,
}

impl FormanceLedger {
    /// Every transaction whose metadata carries `outbox_event_id = event_id`, oldest
    /// first (up to 100): exactly one when the event was posted once, none when it was
    /// not (or was refused), several when exactly-once broke.
    ///
    /// # Errors
    /// Transport and ledger errors, classified as for every call.
    pub async fn transactions_carrying_event(
        &self,
        event_id: EventId,
    ) -> Result<Vec<TransactionRecord>> {
        let field = format!("metadata[{OUTBOX_EVENT_ID_KEY}]");
        self.records_matching(&json!({ "$match": { field: event_id.to_string() } }))
            .await
    }

    /// The transaction that reverted `transaction_id` (its metadata names it under
    /// [`REVERTS_METADATA_KEY`]), if any.
    ///
    /// # Errors
    /// Transport and ledger errors, classified as for every call.
    pub async fn revert_of(&self, transaction_id: u64) -> Result<Option<TransactionRecord>> {
        let field = format!("metadata[{REVERTS_METADATA_KEY}]");
        let found = self
            .records_matching(&json!({ "$match": { field: transaction_id.to_string() } }))
            .await?;
        Ok(found.into_iter().next())
    }

    async fn records_matching(&self, filter: &serde_json::Value) -> Result<Vec<TransactionRecord>> {
        let filter = filter.to_string();
        let mut url = self.url(&["transactions"]);
        url.query_pairs_mut()
            .append_pair("pageSize", &MAX_MATCHES.to_string());
        let request = Request::get_filtered(url, Some(&filter));
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if !answer.status.is_success() {
            return Err(request.fail(answer.refusal().into_error()));
        }
        let page: Page = decode(&answer.body, "transaction list").map_err(|e| request.fail(e))?;
        // Listed newest first; an audit reads oldest first.
        let mut found = page.cursor.data;
        found.sort_by_key(|tx| tx.id);
        Ok(found)
    }
}
