//! `GET /transactions` in any order the dev ledger implements, now or at a `pit`,
//! in cursor pages; and `HEAD /transactions`, the count of the same selection.
//!
//! A page's `next` cursor carries the filter, the order, the `pit` and the last
//! position (the ordering key and the id, which breaks ties), so the following page
//! continues in the same order whatever was committed in between.

use std::borrow::Cow;
use std::ops::RangeInclusive;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock;
use crate::history;
use crate::model::Transaction;
use crate::params::{Column, Order};
use crate::query::Query;
use crate::reads::encode_cursor;
use crate::state::LedgerState;
use crate::stored_transaction::StoredTransaction;

/// Where a page stopped: the last transaction's ordering key and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct Position {
    /// Microseconds of the ordering date; 0 when ordering by id.
    key: i64,
    id: u64,
}

impl Position {
    fn of(column: Column, tx: &StoredTransaction) -> Self {
        let key = match column {
            Column::Id => 0,
            Column::Timestamp => tx.timestamp.timestamp_micros(),
            Column::InsertedAt => tx.inserted_at.timestamp_micros(),
        };
        Self { key, id: tx.id }
    }
}

/// What a transactions `next` cursor carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TransactionCursor {
    pub(crate) page_size: u64,
    pub(crate) query: Value,
    #[serde(default, with = "clock::serde_opt_time")]
    pub(crate) pit: Option<DateTime<Utc>>,
    pub(crate) order: Order,
    pub(crate) after: Position,
}

/// What a `GET /transactions` page asks for.
#[derive(Debug, Clone)]
pub(crate) struct TransactionRequest {
    pub(crate) page_size: u64,
    /// The filter document, carried on in the cursor.
    pub(crate) query: Value,
    pub(crate) pit: Option<DateTime<Utc>>,
    pub(crate) order: Order,
    /// Continue after this position (from a cursor).
    pub(crate) after: Option<Position>,
}

impl From<TransactionCursor> for TransactionRequest {
    fn from(cursor: TransactionCursor) -> Self {
        Self {
            page_size: cursor.page_size,
            query: cursor.query,
            pit: cursor.pit,
            order: cursor.order,
            after: Some(cursor.after),
        }
    }
}

/// `V2TransactionsCursorResponse.cursor`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TransactionPage {
    page_size: u64,
    has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    data: Vec<Transaction>,
}

/// Every transaction with an id in `ids` selected by `filter` at `pit`, as it reads
/// then, in id order (ascending, or descending when `descending`).
fn selected<'a>(
    state: &'a LedgerState,
    filter: &'a Query,
    pit: Option<DateTime<Utc>>,
    descending: bool,
    ids: Option<RangeInclusive<u64>>,
) -> Box<dyn Iterator<Item = Cow<'a, StoredTransaction>> + 'a> {
    let Some(ids) = ids else {
        return Box::new(std::iter::empty());
    };
    let in_range = state.transactions.range(ids).map(|(_, tx)| &**tx);
    let ordered: Box<dyn Iterator<Item = &StoredTransaction>> = if descending {
        Box::new(in_range.rev())
    } else {
        Box::new(in_range)
    };
    Box::new(
        ordered
            .filter_map(move |tx| history::transaction_at(state, tx, pit))
            .filter(move |tx| filter.matches_transaction(tx)),
    )
}

/// A page of the transactions matching `filter`, in the requested order.
pub(crate) fn transactions(
    state: &LedgerState,
    filter: &Query,
    request: &TransactionRequest,
) -> TransactionPage {
    let order = request.order;
    let limit = usize::try_from(request.page_size).unwrap_or(usize::MAX);
    let beyond = |tx: &StoredTransaction| match request.after {
        None => true,
        Some(after) if order.descending => Position::of(order.column, tx) < after,
        Some(after) => Position::of(order.column, tx) > after,
    };
    // One more than a page tells whether there is a next one.
    let mut page: Vec<Cow<'_, StoredTransaction>> = if order.column == Column::Id {
        // Id order is the map's order: walk it from the cursor, stopping after a page.
        let ids = filter.id_range().and_then(|ids| match request.after {
            None => Some(ids),
            Some(after) if order.descending => {
                let high = (*ids.end()).min(after.id.checked_sub(1)?);
                (*ids.start() <= high).then(|| *ids.start()..=high)
            }
            Some(after) => {
                let low = (*ids.start()).max(after.id.checked_add(1)?);
                (low <= *ids.end()).then(|| low..=*ids.end())
            }
        });
        selected(state, filter, request.pit, order.descending, ids)
            .take(limit.saturating_add(1))
            .collect()
    } else {
        let mut all: Vec<Cow<'_, StoredTransaction>> =
            selected(state, filter, request.pit, false, filter.id_range())
                .filter(|tx| beyond(tx))
                .collect();
        all.sort_by_key(|tx| Position::of(order.column, tx));
        if order.descending {
            all.reverse();
        }
        all.truncate(limit.saturating_add(1));
        all
    };
    let has_more = page.len() > limit;
    page.truncate(limit);
    let next = match (has_more, page.last()) {
        (true, Some(last)) => Some(encode_cursor(&TransactionCursor {
            page_size: request.page_size,
            query: request.query.clone(),
            pit: request.pit,
            order,
            after: Position::of(order.column, last),
        })),
        _ => None,
    };
    TransactionPage {
        page_size: request.page_size,
        has_more,
        next,
        data: page.iter().map(|tx| tx.to_model()).collect(),
    }
}

/// `HEAD /transactions`: how many transactions match `filter` at `pit`.
pub(crate) fn count(state: &LedgerState, filter: &Query, pit: Option<DateTime<Utc>>) -> usize {
    selected(state, filter, pit, false, filter.id_range()).count()
}
