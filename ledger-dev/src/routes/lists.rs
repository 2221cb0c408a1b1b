//! `GET` and `HEAD` of the paged lists, transactions and accounts.
//!
//! Both run the same steps, so they are written once: the ledger must exist;
//! an option the dev ledger does not implement is refused, named; a `cursor`
//! comes alone (but for `pageSize`) and carries the request of its first page,
//! else the request is read from the options and the filter; the page answers
//! `{"cursor": …}`. `HEAD` counts what `GET` would list with the same filter and
//! `pit`, answering 204 with `Count`. A [`ListEndpoint`] says only what differs.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{AppState, CursorBody, Params, filter_document, json, page_size, respond, run};
use crate::errors::ApiError;
use crate::listing::{self, TransactionCursor, TransactionPage, TransactionRequest};
use crate::params::{self, Pairs};
use crate::query::{Query as Filter, Resource};
use crate::reads::{
    self, AccountCursor, AccountPage, AccountRequest, DEFAULT_PAGE_SIZE, decode_cursor,
};
use crate::state::LedgerState;

/// What one paged list endpoint has of its own.
pub(super) trait ListEndpoint: 'static {
    /// The route, as refusals name it: `/v2/{ledger}/…`.
    const PATH: &'static str;
    /// The options `GET` implements; anything else is refused, named.
    const OPTIONS: &'static [&'static str];
    /// What the filter is applied to.
    const RESOURCE: Resource;
    type Cursor: DeserializeOwned;
    type Request;
    type Page: Serialize + Send + 'static;

    /// The request a cursor continues; a `pageSize` given with it wins.
    fn continued(cursor: Self::Cursor, page_size: Option<u64>) -> Self::Request;

    /// The first page's request, from the options and the filter document. Each
    /// endpoint reads its options in its own order, which decides which error a
    /// request with several bad options gets.
    fn first(params: &Pairs, body: &[u8], page_size: u64) -> Result<Self::Request, ApiError>;

    /// The filter document the request carries.
    fn filter(request: &Self::Request) -> &Value;

    fn page(
        state: &LedgerState,
        filter: &Filter,
        request: &Self::Request,
    ) -> Result<Self::Page, ApiError>;

    fn count(state: &LedgerState, filter: &Filter, pit: Option<DateTime<Utc>>) -> usize;
}

/// `GET` of a list endpoint: a page, in `{"cursor": …}`.
pub(super) async fn list<E: ListEndpoint>(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            params::only(&params, &format!("GET {}", E::PATH), E::OPTIONS)?;
            params::cursor_alone(&params)?;
            let page_size = page_size(&params)?;
            let request = match params::value(&params, "cursor") {
                Some(text) => E::continued(decode_cursor::<E::Cursor>(text)?, page_size),
                None => E::first(&params, &body, page_size.unwrap_or(DEFAULT_PAGE_SIZE))?,
            };
            let filter = Filter::parse(E::RESOURCE, E::filter(&request))?;
            engine.read(&ledger, |s| E::page(s, &filter, &request))?
        })
        .await
        .map(|page| json(StatusCode::OK, &CursorBody { cursor: page })),
    )
}

/// `HEAD` of a list endpoint: 204, no body, the number `GET` would list in `Count`.
pub(super) async fn count<E: ListEndpoint>(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            params::only(&params, &format!("HEAD {}", E::PATH), &["pit", "query"])?;
            let pit = params::pit(&params)?;
            let filter = Filter::parse(E::RESOURCE, &filter_document(&params, &body)?)?;
            engine.read(&ledger, |s| E::count(s, &filter, pit))
        })
        .await
        .map(|count| {
            let mut response = StatusCode::NO_CONTENT.into_response();
            response
                .headers_mut()
                .insert("Count", HeaderValue::from(count));
            response
        }),
    )
}

/// `/v2/{ledger}/transactions`: by id, newest first, unless `order`, `reverse`
/// or `sort` say otherwise.
pub(super) struct Transactions;

impl ListEndpoint for Transactions {
    const PATH: &'static str = "/v2/{ledger}/transactions";
    const OPTIONS: &'static [&'static str] = &[
        "pageSize", "cursor", "query", "expand", "pit", "order", "reverse", "sort",
    ];
    const RESOURCE: Resource = Resource::Transactions;
    type Cursor = TransactionCursor;
    type Request = TransactionRequest;
    type Page = TransactionPage;

    fn continued(cursor: TransactionCursor, page_size: Option<u64>) -> TransactionRequest {
        let request = TransactionRequest::from(cursor);
        TransactionRequest {
            page_size: page_size.unwrap_or(request.page_size),
            ..request
        }
    }

    fn first(params: &Pairs, body: &[u8], page_size: u64) -> Result<TransactionRequest, ApiError> {
        // Every transaction already carries its volumes and effective
        // volumes; `expand` is checked for values the dev ledger knows.
        params::expand(params)?;
        Ok(TransactionRequest {
            page_size,
            query: filter_document(params, body)?,
            pit: params::pit(params)?,
            order: params::transaction_order(params)?,
            after: None,
        })
    }

    fn filter(request: &TransactionRequest) -> &Value {
        &request.query
    }

    fn page(
        state: &LedgerState,
        filter: &Filter,
        request: &TransactionRequest,
    ) -> Result<TransactionPage, ApiError> {
        Ok(listing::transactions(state, filter, request))
    }

    fn count(state: &LedgerState, filter: &Filter, pit: Option<DateTime<Utc>>) -> usize {
        listing::count(state, filter, pit)
    }
}

/// `/v2/{ledger}/accounts`: by address, ascending (as upstream lists them).
pub(super) struct Accounts;

impl ListEndpoint for Accounts {
    const PATH: &'static str = "/v2/{ledger}/accounts";
    const OPTIONS: &'static [&'static str] =
        &["pageSize", "cursor", "query", "expand", "pit", "sort"];
    const RESOURCE: Resource = Resource::Accounts;
    type Cursor = AccountCursor;
    type Request = AccountRequest;
    type Page = AccountPage;

    fn continued(cursor: AccountCursor, page_size: Option<u64>) -> AccountRequest {
        AccountRequest {
            page_size: page_size.unwrap_or(cursor.page_size),
            query: cursor.query,
            pit: cursor.pit,
            expand: cursor.expand,
            descending: cursor.descending,
            after: Some(cursor.after),
        }
    }

    fn first(params: &Pairs, body: &[u8], page_size: u64) -> Result<AccountRequest, ApiError> {
        Ok(AccountRequest {
            page_size,
            query: filter_document(params, body)?,
            pit: params::pit(params)?,
            expand: params::expand(params)?,
            descending: params::account_order(params)?,
            after: None,
        })
    }

    fn filter(request: &AccountRequest) -> &Value {
        &request.query
    }

    fn page(
        state: &LedgerState,
        filter: &Filter,
        request: &AccountRequest,
    ) -> Result<AccountPage, ApiError> {
        reads::accounts(state, filter, request)
    }

    fn count(state: &LedgerState, filter: &Filter, pit: Option<DateTime<Utc>>) -> usize {
        reads::count_accounts(state, filter, pit)
    }
}
