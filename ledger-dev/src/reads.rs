//! Read models: accounts, aggregate balances and transaction pages, rendered in
//! the shapes of the Formance v2 API (`V2Account`, `V2AssetsBalances`, cursors).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use outbox_core::Metadata;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock;
use crate::errors::ApiError;
use crate::model::{Transaction, Volumes};
use crate::query::Query;
use crate::state::LedgerState;

/// Default and maximum page sizes (go-libs `paginate`).
pub(crate) const DEFAULT_PAGE_SIZE: u64 = 15;
pub(crate) const MAX_PAGE_SIZE: u64 = 100;

/// `V2Account`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountView {
    address: String,
    metadata: Metadata,
    #[serde(with = "clock::serde_time")]
    first_usage: DateTime<Utc>,
    #[serde(with = "clock::serde_time")]
    insertion_date: DateTime<Utc>,
    #[serde(with = "clock::serde_time")]
    updated_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    volumes: Option<BTreeMap<String, Volumes>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    effective_volumes: Option<BTreeMap<String, Volumes>>,
}

/// `GET /accounts/{address}`: 404 NOT_FOUND for an account never used.
pub(crate) fn account(
    state: &LedgerState,
    address: &str,
    volumes: bool,
    effective_volumes: bool,
) -> Result<AccountView, ApiError> {
    let account = state
        .accounts
        .get(address)
        .ok_or_else(|| ApiError::not_found(format!("account {address:?} not found")))?;
    // Without a point in time, effective volumes cover every move, like the volumes.
    Ok(AccountView {
        address: account.address.clone(),
        metadata: account.metadata.clone(),
        first_usage: account.first_usage,
        insertion_date: account.insertion_date,
        updated_at: account.updated_at,
        volumes: volumes.then(|| account.volumes.clone()),
        effective_volumes: effective_volumes.then(|| account.volumes.clone()),
    })
}

/// `GET /aggregate/balances`: per asset, the sum of balances of matching accounts.
pub(crate) fn aggregate_balances(state: &LedgerState, query: &Query) -> BTreeMap<String, i128> {
    let mut sums: BTreeMap<String, i128> = BTreeMap::new();
    for account in state.accounts.values().filter(|a| query.matches_account(a)) {
        for (asset, volumes) in &account.volumes {
            *sums.entry(asset.clone()).or_default() += volumes.balance;
        }
    }
    sums
}

/// `GET /transactions/{id}`.
pub(crate) fn transaction(state: &LedgerState, id: u64) -> Result<Transaction, ApiError> {
    state
        .transactions
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("transaction {id} not found")))
}

/// What a `next` cursor carries: the filter and the position to continue from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Cursor {
    pub(crate) page_size: u64,
    /// Only ids strictly below this one (the list is by id, descending).
    pub(crate) before: u64,
    pub(crate) query: Value,
}

impl Cursor {
    pub(crate) fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).expect("cursors serialise"))
    }

    pub(crate) fn decode(text: &str) -> Result<Self, ApiError> {
        URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| ApiError::validation("invalid 'cursor' query param"))
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

/// A page of transactions matching `query`, newest first.
pub(crate) fn transactions(
    state: &LedgerState,
    query: &Query,
    raw_query: &Value,
    page_size: u64,
    before: Option<u64>,
) -> TransactionPage {
    let mut matching = state
        .transactions
        .range(..before.unwrap_or(u64::MAX))
        .rev()
        .map(|(_, tx)| tx)
        .filter(|tx| query.matches_transaction(tx));
    let limit = usize::try_from(page_size).unwrap_or(usize::MAX);
    let data: Vec<Transaction> = matching.by_ref().take(limit).cloned().collect();
    let has_more = matching.next().is_some();
    let next = match (has_more, data.last()) {
        (true, Some(last)) => Some(
            Cursor {
                page_size,
                before: last.id,
                query: raw_query.clone(),
            }
            .encode(),
        ),
        _ => None,
    };
    TransactionPage {
        page_size,
        has_more,
        next,
        data,
    }
}
