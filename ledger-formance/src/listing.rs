//! Every transaction of the ledger, oldest first, in pages that continue after an
//! id: what reconciliation walks to match the ledger against the outbox.
//!
//! Formance lists newest first; `sort=id:asc` (v2.3 and later) turns it ascending,
//! and the filter `{"$gt": {"id": N}}` starts after `N`. Each page is one request
//! built from the last id seen, so no cursor has to outlive a call. The answer is
//! checked: a server that ignored the order or the filter would otherwise make the
//! walk skip or repeat transactions without a word.

use outbox_core::{Error, ErrorKind, LedgerTransaction, Result};
use serde_json::json;

use crate::client::{FormanceLedger, Request};
use crate::wire::{Cursor, Transaction, decode};

/// The largest `pageSize` the Formance v2 spec allows on lists. Servers cap it
/// lower (100 unless `--max-page-size` says otherwise); `hasMore` says to go on.
pub const MAX_TRANSACTION_PAGE: usize = 1000;

impl FormanceLedger {
    /// Up to `limit` transactions with an id above `after`, ascending.
    pub(crate) async fn list_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<LedgerTransaction>> {
        let mut found: Vec<LedgerTransaction> = Vec::with_capacity(limit.min(MAX_TRANSACTION_PAGE));
        let mut last = after;
        // Each round adds at least one transaction or stops: at most `limit` rounds.
        while found.len() < limit {
            let wanted = (limit - found.len()).min(MAX_TRANSACTION_PAGE);
            let (page, has_more) = self.page_after(last, wanted).await?;
            let Some(tail) = page.last() else { break };
            last = Some(tail.id);
            found.extend(page);
            if !has_more {
                break;
            }
        }
        Ok(found)
    }

    /// One request: at most `wanted` transactions above `after`, ascending, and
    /// whether the ledger has more.
    async fn page_after(
        &self,
        after: Option<u64>,
        wanted: usize,
    ) -> Result<(Vec<LedgerTransaction>, bool)> {
        let filter = after.map(|id| json!({ "$gt": { "id": id } }).to_string());
        let mut url = self.url(&["transactions"]);
        url.query_pairs_mut()
            .append_pair("pageSize", &wanted.to_string())
            .append_pair("sort", "id:asc");
        let request = Request::get_filtered(url, filter.as_deref());
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if !answer.status.is_success() {
            return Err(request.fail(answer.refusal().into_error()));
        }
        let page: Cursor<Transaction> =
            decode(&answer.body, "transaction list").map_err(|e| request.fail(e))?;
        let mut previous = after;
        for tx in &page.cursor.data {
            if previous.is_some_and(|p| tx.id <= p) {
                return Err(request.fail(Error::new(
                    ErrorKind::Ledger,
                    format!(
                        "the ledger listed transaction {} after {} for sort=id:asc above id {}: it ignores the order or the id filter (sort needs Formance v2.3 or later)",
                        tx.id,
                        previous.unwrap_or_default(),
                        after.map_or_else(|| "none".to_owned(), |a| a.to_string()),
                    ),
                )));
            }
            previous = Some(tx.id);
        }
        if page.cursor.data.len() > wanted {
            return Err(request.fail(Error::new(
                ErrorKind::Ledger,
                format!(
                    "the ledger answered {} transactions for pageSize={wanted}",
                    page.cursor.data.len()
                ),
            )));
        }
        let has_more = page.cursor.has_more;
        Ok((
            page.cursor
                .data
                .into_iter()
                .map(LedgerTransaction::from)
                .collect(),
            has_more,
        ))
    }
}
