//! Reading the ledger's log (`GET /v2/{ledger}/logs`) after a log id, oldest first.
//!
//! The API lists newest first, and a cursor walks towards older entries; a reader
//! catching up wants the opposite. So [`FormanceLedger::logs_after`] asks for a
//! window of ids instead (`$gt` after, `$lte` after + page size): the window holds at
//! most one page of entries, which are reversed into log order. Memory is one page,
//! whatever the size of the gap, and a window left empty by a gap in the ids is
//! stepped over up to the newest log id, read first.

use chrono::{DateTime, Utc};
use outbox_core::{Error, ErrorKind, Result};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use crate::client::{FormanceLedger, Request};
use crate::wire::decode;

/// Most entries per page: Formance's maximum page size.
pub const MAX_LOG_PAGE: usize = 100;
/// Pages followed inside one window when a server caps page sizes below ours; a
/// window holds at most [`MAX_LOG_PAGE`] ids, so more pages mean a broken cursor.
const MAX_PAGES_PER_WINDOW: usize = MAX_LOG_PAGE;

/// One entry of the ledger's log (`V2Log`).
#[derive(Debug, Clone)]
pub struct LedgerLog {
    /// Per-ledger sequence, from 1, in commit order.
    pub id: u64,
    /// `NEW_TRANSACTION`, `REVERTED_TRANSACTION`, `SET_METADATA`, `DELETE_METADATA`, …
    pub kind: String,
    /// The entry's payload, exactly as the ledger sent it (amounts of any size).
    pub data: Box<RawValue>,
    pub date: DateTime<Utc>,
    /// The write's `Idempotency-Key`; `None` when it had none.
    pub idempotency_key: Option<String>,
    /// The entry's place in the ledger's hash chain (base64), when the ledger hashes logs.
    pub hash: Option<String>,
}

#[derive(Deserialize)]
struct LogsCursor {
    cursor: LogsPage,
}

#[derive(Deserialize)]
struct LogsPage {
    data: Vec<WireLog>,
    #[serde(rename = "hasMore", default)]
    has_more: bool,
    #[serde(default)]
    next: Option<String>,
}

#[derive(Deserialize)]
struct WireLog {
    id: u64,
    #[serde(rename = "type")]
    kind: String,
    data: Box<RawValue>,
    date: DateTime<Utc>,
    #[serde(rename = "idempotencyKey", default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    hash: Option<String>,
}

impl From<WireLog> for LedgerLog {
    fn from(log: WireLog) -> Self {
        Self {
            id: log.id,
            kind: log.kind,
            data: log.data,
            date: log.date,
            // Go renders a missing key as "".
            idempotency_key: log.idempotency_key.filter(|k| !k.is_empty()),
            hash: log.hash.filter(|h| !h.is_empty()),
        }
    }
}

impl FormanceLedger {
    /// Up to `limit` entries of the ledger's log with an id above `after`, oldest
    /// first; empty only when the log holds nothing after `after`. `limit` is clamped
    /// to `1..=100`. Call again after the last id returned to read on.
    ///
    /// # Errors
    /// Transport and ledger errors, classified as for every call (a missing ledger is
    /// `NotFound` with `LEDGER_NOT_FOUND`); an answer with an entry outside the window
    /// asked for (a server ignoring id filters) is a permanent `Ledger` error.
    pub async fn logs_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerLog>> {
        let size = limit.clamp(1, MAX_LOG_PAGE);
        let Some(newest) = self.newest_log_id().await? else {
            return Ok(Vec::new());
        };
        let mut low = after;
        while low < newest {
            let high = low.saturating_add(size as u64).min(newest);
            let window = self.log_window(low, high, size).await?;
            if !window.is_empty() {
                return Ok(window);
            }
            low = high;
        }
        Ok(Vec::new())
    }

    /// The id of the newest entry, `None` for an empty log.
    async fn newest_log_id(&self) -> Result<Option<u64>> {
        let mut url = self.url(&["logs"]);
        url.query_pairs_mut().append_pair("pageSize", "1");
        let page = self.logs_page(&Request::get_filtered(url, None)).await?;
        Ok(page.data.first().map(|log| log.id))
    }

    /// Every entry with `low < id <= high`, oldest first.
    async fn log_window(&self, low: u64, high: u64, size: usize) -> Result<Vec<LedgerLog>> {
        let filter = json!({"$and": [{"$gt": {"id": low}}, {"$lte": {"id": high}}]}).to_string();
        let mut url = self.url(&["logs"]);
        url.query_pairs_mut()
            .append_pair("pageSize", &size.to_string());
        let mut request = Request::get_filtered(url, Some(&filter));
        let mut logs: Vec<LedgerLog> = Vec::new();
        for _ in 0..MAX_PAGES_PER_WINDOW {
            let page = self.logs_page(&request).await?;
            for log in page.data {
                if log.id <= low || log.id > high || logs.iter().any(|l| l.id == log.id) {
                    return Err(request.fail(Error::new(
                        ErrorKind::Ledger,
                        format!(
                            "the ledger answered log {} for the id window ({low}, {high}]: outside the window, or twice (does it apply id filters?)",
                            log.id
                        ),
                    )));
                }
                logs.push(log.into());
            }
            match page.next.filter(|_| page.has_more) {
                None => {
                    logs.sort_by_key(|log| log.id);
                    return Ok(logs);
                }
                Some(cursor) => {
                    // The cursor carries the filter; upstream takes no other parameter beside it.
                    let mut url = self.url(&["logs"]);
                    url.query_pairs_mut().append_pair("cursor", &cursor);
                    request = Request::get_filtered(url, None);
                }
            }
        }
        Err(request.fail(Error::new(
            ErrorKind::Ledger,
            format!("the ledger's cursor for the id window ({low}, {high}] never ended"),
        )))
    }

    async fn logs_page(&self, request: &Request<'_>) -> Result<LogsPage> {
        let answer = self.execute(request).await.map_err(|e| request.fail(e))?;
        if !answer.status.is_success() {
            return Err(request.fail(answer.refusal().into_error()));
        }
        let page: LogsCursor = decode(&answer.body, "log page").map_err(|e| request.fail(e))?;
        Ok(page.cursor)
    }
}
