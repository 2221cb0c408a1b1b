//! Read models: accounts (one, or a page), aggregate balances and single
//! transactions, now or at a point in time, rendered in the shapes of the Formance
//! v2 API (`V2Account`, `V2AssetsBalances`, cursors). Transaction lists are in
//! `listing`.

use std::collections::BTreeMap;
use std::ops::Bound;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use outbox_core::Metadata;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock;
use crate::errors::ApiError;
use crate::features;
use crate::history::{self, MoveDate};
use crate::model::{Transaction, Volumes};
use crate::params::Expand;
use crate::query::Query;
use crate::state::{AccountState, LedgerState};

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

/// `GET /accounts/{address}`: 404 NOT_FOUND for an account never used (or, at a
/// `pit`, first used after it).
pub(crate) fn account(
    state: &LedgerState,
    address: &str,
    expand: Expand,
    pit: Option<DateTime<Utc>>,
) -> Result<AccountView, ApiError> {
    check_expand(state, expand)?;
    let account = state
        .accounts
        .get(address)
        .filter(|a| pit.is_none_or(|pit| a.first_usage <= pit))
        .ok_or_else(|| ApiError::not_found(format!("account {address:?} not found")))?;
    Ok(account_view(account, expand, pit))
}

/// Formance refuses volumes without the moves history, and effective volumes
/// without their post-commit maintenance.
fn check_expand(state: &LedgerState, expand: Expand) -> Result<(), ApiError> {
    if expand.volumes {
        features::require(&state.info.features, features::MOVES_HISTORY, "ON")?;
    }
    if expand.effective_volumes {
        features::require(&state.info.features, features::EFFECTIVE_VOLUMES, "SYNC")?;
    }
    Ok(())
}

/// An account as it reads now or at `pit`: at a `pit` its `volumes` count the moves
/// inserted by then and its `effectiveVolumes` the moves dated by then (as Formance
/// reads them from its moves), and its metadata is the metadata it had then.
fn account_view(account: &AccountState, expand: Expand, pit: Option<DateTime<Utc>>) -> AccountView {
    let (metadata, volumes, effective_volumes) = match pit {
        // Without a point in time, effective volumes cover every move, like the volumes.
        None => (
            account.metadata.clone(),
            expand.volumes.then(|| account.volumes.clone()),
            expand.effective_volumes.then(|| account.volumes.clone()),
        ),
        Some(pit) => (
            history::account_metadata_at(account, pit),
            expand
                .volumes
                .then(|| history::volumes_at(account, pit, MoveDate::Insertion)),
            expand
                .effective_volumes
                .then(|| history::volumes_at(account, pit, MoveDate::Effective)),
        ),
    };
    AccountView {
        address: account.address.clone(),
        metadata,
        first_usage: account.first_usage,
        insertion_date: account.insertion_date,
        updated_at: account.updated_at,
        volumes,
        effective_volumes,
    }
}

/// What an accounts `next` cursor carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountCursor {
    pub(crate) page_size: u64,
    pub(crate) query: Value,
    #[serde(default, with = "clock::serde_opt_time")]
    pub(crate) pit: Option<DateTime<Utc>>,
    pub(crate) expand: Expand,
    pub(crate) descending: bool,
    /// Only addresses after this one, in the list's order.
    pub(crate) after: String,
}

/// What a `GET /accounts` page asks for.
#[derive(Debug, Clone)]
pub(crate) struct AccountRequest {
    pub(crate) page_size: u64,
    pub(crate) query: Value,
    pub(crate) pit: Option<DateTime<Utc>>,
    pub(crate) expand: Expand,
    pub(crate) descending: bool,
    pub(crate) after: Option<String>,
}

/// `V2AccountsCursorResponse.cursor`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountPage {
    page_size: u64,
    has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    data: Vec<AccountView>,
}

/// Whether `account` is listed at `pit` under `filter` (with its metadata then).
fn account_listed(account: &AccountState, filter: &Query, pit: Option<DateTime<Utc>>) -> bool {
    match pit {
        None => filter.matches_account(&account.address, &account.metadata),
        Some(pit) => {
            account.first_usage <= pit
                && filter.matches_account(
                    &account.address,
                    &history::account_metadata_at(account, pit),
                )
        }
    }
}

/// `GET /accounts`: a page of the accounts matching `filter`, by address.
pub(crate) fn accounts(
    state: &LedgerState,
    filter: &Query,
    request: &AccountRequest,
) -> Result<AccountPage, ApiError> {
    check_expand(state, request.expand)?;
    let range = match (&request.after, request.descending) {
        (None, _) => (Bound::Unbounded, Bound::Unbounded),
        (Some(after), false) => (Bound::Excluded(after.as_str()), Bound::Unbounded),
        (Some(after), true) => (Bound::Unbounded, Bound::Excluded(after.as_str())),
    };
    let in_range = state.accounts.range::<str, _>(range).map(|(_, a)| a);
    let ordered: Box<dyn Iterator<Item = &AccountState>> = if request.descending {
        Box::new(in_range.rev())
    } else {
        Box::new(in_range)
    };
    let mut matching = ordered.filter(|a| account_listed(a, filter, request.pit));
    let limit = usize::try_from(request.page_size).unwrap_or(usize::MAX);
    let page: Vec<&AccountState> = matching.by_ref().take(limit).collect();
    let has_more = matching.next().is_some();
    let next = match (has_more, page.last()) {
        (true, Some(last)) => Some(encode_cursor(&AccountCursor {
            page_size: request.page_size,
            query: request.query.clone(),
            pit: request.pit,
            expand: request.expand,
            descending: request.descending,
            after: last.address.clone(),
        })),
        _ => None,
    };
    Ok(AccountPage {
        page_size: request.page_size,
        has_more,
        next,
        data: page
            .into_iter()
            .map(|a| account_view(a, request.expand, request.pit))
            .collect(),
    })
}

/// `HEAD /accounts`: how many accounts `GET /accounts` would list.
pub(crate) fn count_accounts(
    state: &LedgerState,
    filter: &Query,
    pit: Option<DateTime<Utc>>,
) -> usize {
    state
        .accounts
        .values()
        .filter(|a| account_listed(a, filter, pit))
        .count()
}

/// `GET /aggregate/balances`: per asset, the sum of balances of matching accounts;
/// at a `pit`, over their moves dated by then by `date`. An asset no matching
/// account ever moved is absent: an empty answer means "nothing matched", not zero.
pub(crate) fn aggregate_balances(
    state: &LedgerState,
    filter: &Query,
    at: Option<(DateTime<Utc>, MoveDate)>,
) -> Result<BTreeMap<String, i128>, ApiError> {
    let mut sums: BTreeMap<String, i128> = BTreeMap::new();
    match at {
        None => {
            for account in state.accounts.values() {
                if filter.matches_account(&account.address, &account.metadata) {
                    for (asset, volumes) in &account.volumes {
                        *sums.entry(asset.clone()).or_default() += volumes.balance;
                    }
                }
            }
        }
        Some((pit, date)) => {
            let (feature, value) = match date {
                MoveDate::Effective => (features::EFFECTIVE_VOLUMES, "SYNC"),
                MoveDate::Insertion => (features::MOVES_HISTORY, "ON"),
            };
            features::require(&state.info.features, feature, value)?;
            for account in state.accounts.values() {
                let metadata = history::account_metadata_at(account, pit);
                if filter.matches_account(&account.address, &metadata) {
                    for (asset, volumes) in history::volumes_at(account, pit, date) {
                        *sums.entry(asset).or_default() += volumes.balance;
                    }
                }
            }
        }
    }
    Ok(sums)
}

/// `GET /transactions/{id}`.
pub(crate) fn transaction(state: &LedgerState, id: u64) -> Result<Transaction, ApiError> {
    state
        .transactions
        .get(&id)
        .map(|tx| tx.to_model())
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
        encode_cursor(self)
    }

    pub(crate) fn decode(text: &str) -> Result<Self, ApiError> {
        decode_cursor(text)
    }
}

/// A cursor as the `next` string: base64url of its JSON, opaque to clients.
pub(crate) fn encode_cursor<T: Serialize>(cursor: &T) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(cursor).expect("cursors serialise"))
}

/// Reads back what [`encode_cursor`] wrote; anything else is 400 VALIDATION.
pub(crate) fn decode_cursor<T: DeserializeOwned>(text: &str) -> Result<T, ApiError> {
    URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| ApiError::validation("invalid 'cursor' query param"))
}
