//! HTTP routes: the Formance v2 subset, plus `/_dev/*` admin routes.
//!
//! Handlers parse the request, run the engine on the blocking pool (it talks to
//! SQLite) and render the Formance envelopes. The fault middleware wraps only the
//! write routes.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::Serialize;
use serde_json::Value;

use crate::bulk::{self, BulkOptions};
use crate::commands::{self, MetadataCommand};
use crate::controller::Plan;
use crate::engine::Engine;
use crate::errors::ApiError;
use crate::faults::{self, FaultInjector, FaultLayer, FaultPlan};
use crate::history::MoveDate;
use crate::log::LogData;
use crate::logs;
use crate::model::Target;
use crate::params;
use crate::query::{Query as Filter, Resource};
use crate::reads::{self, Cursor, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

mod lists;

use lists::{Accounts, Transactions};

/// Shared by every handler.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) engine: Arc<Engine>,
    pub(crate) faults: FaultInjector,
}

type Params = Query<Vec<(String, String)>>;

pub(crate) fn router(state: AppState, fault_layer: FaultLayer) -> Router {
    let faulty = |route: MethodRouter<AppState>| {
        route.layer(from_fn_with_state(fault_layer.clone(), faults::middleware))
    };
    Router::new()
        .route("/_/info", get(info))
        .route(
            "/_dev/faults",
            get(get_faults).post(set_faults).delete(clear_faults),
        )
        .route("/_dev/stats", get(stats))
        .route("/v2/{ledger}", get(get_ledger).post(create_ledger))
        .route(
            "/v2/{ledger}/transactions",
            get(lists::list::<Transactions>)
                .head(lists::count::<Transactions>)
                .merge(faulty(post(create_transaction))),
        )
        .route("/v2/{ledger}/transactions/{id}", get(get_transaction))
        .route(
            "/v2/{ledger}/transactions/{id}/revert",
            faulty(post(revert_transaction)),
        )
        .route(
            "/v2/{ledger}/transactions/{id}/metadata",
            faulty(save_metadata(transaction_target)),
        )
        .route(
            "/v2/{ledger}/transactions/{id}/metadata/{key}",
            faulty(delete_metadata(transaction_target)),
        )
        .route(
            "/v2/{ledger}/accounts",
            get(lists::list::<Accounts>).head(lists::count::<Accounts>),
        )
        .route("/v2/{ledger}/accounts/{address}", get(get_account))
        .route(
            "/v2/{ledger}/accounts/{address}/metadata",
            faulty(save_metadata(account_target)),
        )
        .route(
            "/v2/{ledger}/accounts/{address}/metadata/{key}",
            faulty(delete_metadata(account_target)),
        )
        .route("/v2/{ledger}/aggregate/balances", get(aggregate_balances))
        .route("/v2/{ledger}/logs", get(list_logs))
        .route("/v2/{ledger}/_bulk", faulty(post(bulk_handler)))
        .fallback(|| async { ApiError::not_found("no such route on the dev ledger") })
        .with_state(state)
}

// -- helpers ----------------------------------------------------------------

/// Runs `f` on the blocking pool: the engine does SQLite I/O under its lock.
async fn run<T, F>(state: &AppState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
{
    let engine = Arc::clone(&state.engine);
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| ApiError::internal(format!("request handler failed: {e}")))?
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => ApiError::internal(format!("cannot render the response: {e}")).into_response(),
    }
}

#[derive(Serialize)]
struct Data<T> {
    data: T,
}

/// The envelope of a list page: `{"cursor": …}`.
#[derive(Serialize)]
struct CursorBody<T> {
    cursor: T,
}

/// Adds `Idempotency-Hit: true` to a replayed answer (absent otherwise).
fn with_hit(mut response: Response, plan: &Plan) -> Response {
    if plan.is_replay() {
        response
            .headers_mut()
            .insert("Idempotency-Hit", HeaderValue::from_static("true"));
    }
    response
}

/// go-libs `QueryParamBool`: only `1` or `true` (any case) are true.
fn flag(params: &[(String, String)], name: &str) -> bool {
    params::value(params, name).is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

fn idempotency_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get("Idempotency-Key")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// The filter of a list endpoint: `?query=<json>`, else the (GET) body, else none.
fn filter_document(params: &[(String, String)], body: &[u8]) -> Result<Value, ApiError> {
    if let Some(text) = params::value(params, "query") {
        return serde_json::from_str(text)
            .map_err(|e| ApiError::validation(format!("invalid 'query' param: {e}")));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::validation(format!("invalid query body: {e}")))
}

fn respond(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

// -- admin --------------------------------------------------------------------

async fn info() -> Response {
    json(
        StatusCode::OK,
        &serde_json::json!({"server": "outbox-ledger-dev", "version": env!("CARGO_PKG_VERSION")}),
    )
}

async fn get_faults(State(state): State<AppState>) -> Response {
    json(StatusCode::OK, &state.faults.plan())
}

async fn set_faults(State(state): State<AppState>, body: Bytes) -> Response {
    let plan: FaultPlan = if body.iter().all(u8::is_ascii_whitespace) {
        FaultPlan::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(plan) => plan,
            Err(e) => {
                return ApiError::validation(format!("invalid fault plan: {e}")).into_response();
            }
        }
    };
    match state.faults.set_plan(plan) {
        Ok(()) => json(StatusCode::OK, &state.faults.plan()),
        Err(e) => ApiError::validation(format!("invalid fault plan: {e}")).into_response(),
    }
}

async fn clear_faults(State(state): State<AppState>) -> StatusCode {
    state.faults.clear();
    StatusCode::NO_CONTENT
}

async fn stats(State(state): State<AppState>) -> Response {
    let mut stats = state.engine.stats();
    stats.faults_injected = state.faults.injected();
    json(StatusCode::OK, &stats)
}

// -- ledgers ------------------------------------------------------------------

async fn create_ledger(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    body: Bytes,
) -> Response {
    respond(
        run(&state, move |engine| {
            #[derive(Default, serde::Deserialize)]
            struct CreateLedgerRequest {
                #[serde(default)]
                metadata: Option<outbox_core::Metadata>,
                #[serde(default)]
                features: Option<BTreeMap<String, String>>,
            }
            let req = if body.iter().all(u8::is_ascii_whitespace) {
                CreateLedgerRequest::default()
            } else {
                serde_json::from_slice(&body)
                    .map_err(|e| ApiError::validation(format!("invalid ledger request: {e}")))?
            };
            engine.create_ledger(
                &ledger,
                req.metadata.unwrap_or_default(),
                &req.features.unwrap_or_default(),
            )
        })
        .await
        .map(|()| StatusCode::NO_CONTENT.into_response()),
    )
}

async fn get_ledger(State(state): State<AppState>, Path(ledger): Path<String>) -> Response {
    respond(
        run(&state, move |engine| engine.ledger_info(&ledger))
            .await
            .map(|info| json(StatusCode::OK, &Data { data: info })),
    )
}

// -- transactions ---------------------------------------------------------------

async fn create_transaction(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    Query(params): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = idempotency_key(&headers);
    let dry_run = flag(&params, "dryRun");
    let force = flag(&params, "force");
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            let cmd = commands::create_transaction(
                commands::parse_json(&body, "transaction request")?,
                force,
            )?;
            engine.create_transaction(&ledger, &cmd, key.as_deref(), dry_run)
        })
        .await
        .map(|plan| {
            let response = match plan.data() {
                LogData::NewTransaction { transaction, .. } => {
                    json(StatusCode::OK, &Data { data: transaction })
                }
                other => mismatched_replay(other),
            };
            with_hit(response, &plan)
        }),
    )
}

/// A replayed key whose stored log is of another kind cannot pass the hash check
/// (the operation is part of the hash); answer 500 rather than a wrong shape.
fn mismatched_replay(data: &LogData) -> Response {
    ApiError::internal(format!(
        "the idempotency key replays a {} log",
        data.type_name()
    ))
    .into_response()
}

async fn revert_transaction(
    State(state): State<AppState>,
    Path((ledger, id)): Path<(String, String)>,
    Query(params): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = idempotency_key(&headers);
    let dry_run = flag(&params, "dryRun");
    let force = flag(&params, "force");
    let at_effective_date = flag(&params, "atEffectiveDate");
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            let cmd = commands::revert_transaction(&id, &body, force, at_effective_date)?;
            engine.revert_transaction(&ledger, &cmd, key.as_deref(), dry_run)
        })
        .await
        .map(|plan| {
            let response = match plan.data() {
                LogData::RevertedTransaction { revert, .. } => {
                    json(StatusCode::CREATED, &Data { data: revert })
                }
                other => mismatched_replay(other),
            };
            with_hit(response, &plan)
        }),
    )
}

async fn get_transaction(
    State(state): State<AppState>,
    Path((ledger, id)): Path<(String, String)>,
) -> Response {
    respond(
        run(&state, move |engine| {
            let id = commands::transaction_id(&id)?;
            engine.read(&ledger, |s| reads::transaction(s, id))?
        })
        .await
        .map(|tx| json(StatusCode::OK, &Data { data: tx })),
    )
}

// -- lists --------------------------------------------------------------------
// (`GET`/`HEAD` of transactions and accounts are in `lists`; the logs' differ.)

/// `pageSize`: default when absent or 0, capped at [`MAX_PAGE_SIZE`] (go-libs).
fn page_size(params: &[(String, String)]) -> Result<Option<u64>, ApiError> {
    let Some(text) = params::value(params, "pageSize") else {
        return Ok(None);
    };
    let size = text
        .parse::<u64>()
        .map_err(|_| ApiError::validation("invalid 'pageSize' query param"))?;
    Ok(Some(match size {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    }))
}

/// What a log list request asks for: the page size, where to continue (ids below
/// `before`) and the filter document. A `cursor` carries all three; otherwise they
/// come from `pageSize` (default 15, capped at 100) and the filter (`?query=` or body).
fn page_request(
    params: &[(String, String)],
    body: &[u8],
) -> Result<(u64, Option<u64>, Value), ApiError> {
    if let Some(text) = params::value(params, "cursor") {
        let cursor = Cursor::decode(text)?;
        return Ok((cursor.page_size, Some(cursor.before), cursor.query));
    }
    let page_size = page_size(params)?.unwrap_or(DEFAULT_PAGE_SIZE);
    Ok((page_size, None, filter_document(params, body)?))
}

/// `GET /v2/{ledger}/logs`: newest first (`sort=id:desc` is the only order), no `pit`.
async fn list_logs(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    let corruption = state.faults.log_corruption();
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            if let Some(sort) = params::value(&params, "sort")
                && sort != "id:desc"
                && sort != "id"
            {
                return Err(ApiError::validation(format!(
                    "invalid 'sort' query param {sort:?}: the dev ledger lists logs by id, newest first (id:desc)"
                )));
            }
            if params::value(&params, "pit").is_some() {
                return Err(ApiError::validation(
                    "the 'pit' query param is not supported on logs by the dev ledger",
                ));
            }
            let (page_size, before, document) = page_request(&params, &body)?;
            let query = Filter::parse(Resource::Logs, &document)?;
            engine.read(&ledger, |s| {
                logs::page(s, &query, &document, page_size, before, corruption)
            })
        })
        .await
        .map(|page| json(StatusCode::OK, &CursorBody { cursor: page })),
    )
}

// -- metadata ------------------------------------------------------------------

/// A metadata route's `{id}` or `{address}`, read as what it names.
type TargetParser = fn(&str) -> Result<Target, ApiError>;

fn transaction_target(id: &str) -> Result<Target, ApiError> {
    Ok(Target::Transaction(commands::transaction_id(id)?))
}

fn account_target(address: &str) -> Result<Target, ApiError> {
    Ok(Target::Account(commands::address(address)?))
}

/// `POST …/{target}/metadata`, the same for transactions and accounts but for
/// how the target is read.
fn save_metadata(target: TargetParser) -> MethodRouter<AppState> {
    post(
        move |State(state): State<AppState>,
              Path((ledger, name)): Path<(String, String)>,
              Query(params): Params,
              headers: HeaderMap,
              body: Bytes| async move {
            metadata_write(state, ledger, &params, &headers, move || {
                Ok(MetadataCommand::Save {
                    target: target(&name)?,
                    metadata: commands::metadata_body(&body)?,
                })
            })
            .await
        },
    )
}

/// `DELETE …/{target}/metadata/{key}`, likewise.
fn delete_metadata(target: TargetParser) -> MethodRouter<AppState> {
    axum::routing::delete(
        move |State(state): State<AppState>,
              Path((ledger, name, key)): Path<(String, String, String)>,
              Query(params): Params,
              headers: HeaderMap| async move {
            metadata_write(state, ledger, &params, &headers, move || {
                Ok(MetadataCommand::Delete {
                    target: target(&name)?,
                    key,
                })
            })
            .await
        },
    )
}

/// Metadata writes answer 204 (with `Idempotency-Hit` on a replay).
async fn metadata_write(
    state: AppState,
    ledger: String,
    params: &[(String, String)],
    headers: &HeaderMap,
    command: impl FnOnce() -> Result<MetadataCommand, ApiError> + Send + 'static,
) -> Response {
    let key = idempotency_key(headers);
    let dry_run = flag(params, "dryRun");
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            let cmd = command()?;
            engine.metadata(&ledger, &cmd, key.as_deref(), dry_run)
        })
        .await
        .map(|plan| with_hit(StatusCode::NO_CONTENT.into_response(), &plan)),
    )
}

// -- accounts -------------------------------------------------------------------

async fn get_account(
    State(state): State<AppState>,
    Path((ledger, address)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            params::only(
                &params,
                "GET /v2/{ledger}/accounts/{address}",
                &["expand", "pit"],
            )?;
            let expand = params::expand(&params)?;
            let pit = params::pit(&params)?;
            let address = commands::address(&address)?;
            engine.read(&ledger, |s| reads::account(s, &address, expand, pit))?
        })
        .await
        .map(|account| json(StatusCode::OK, &Data { data: account })),
    )
}

/// `GET /v2/{ledger}/aggregate/balances[?pit=…[&useInsertionDate=true]]`.
async fn aggregate_balances(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            params::only(
                &params,
                "GET /v2/{ledger}/aggregate/balances",
                &["pit", "useInsertionDate", "use_insertion_date", "query"],
            )?;
            // Upstream takes either spelling.
            let by_insertion = params::boolean(&params, "useInsertionDate")?
                || params::boolean(&params, "use_insertion_date")?;
            let date = if by_insertion {
                MoveDate::Insertion
            } else {
                MoveDate::Effective
            };
            let at = params::pit(&params)?.map(|pit| (pit, date));
            let filter = Filter::parse(Resource::Accounts, &filter_document(&params, &body)?)?;
            engine.read(&ledger, |s| reads::aggregate_balances(s, &filter, at))?
        })
        .await
        .map(|sums| json(StatusCode::OK, &Data { data: sums })),
    )
}

// -- bulk -----------------------------------------------------------------------

async fn bulk_handler(
    State(state): State<AppState>,
    Path(ledger): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> Response {
    let options = BulkOptions {
        continue_on_failure: flag(&params, "continueOnFailure"),
        atomic: flag(&params, "atomic"),
    };
    if options.atomic && flag(&params, "parallel") {
        return ApiError::validation("atomic and parallel options are mutually exclusive")
            .with_status(StatusCode::PRECONDITION_FAILED)
            .into_response();
    }
    respond(
        run(&state, move |engine| {
            engine.require_ledger(&ledger)?;
            let elements = bulk::parse(&body, engine.bulk_max_size())?;
            let results = engine.bulk(&ledger, &elements, options)?;
            Ok(bulk::render(&elements, &results))
        })
        .await
        .map(|(status, body)| {
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }),
    )
}
