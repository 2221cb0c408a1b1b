//! `FormanceLedger`: the [`Ledger`] implementation over Formance Ledger v2's HTTP API,
//! and the request plumbing (auth, idempotency header, context) every call shares.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::{
    Account, BalanceDate, Balances, BulkItem, Error, ErrorKind, EventId, Ledger,
    LedgerCapabilities, LedgerTransaction, Metadata, OUTBOX_EVENT_ID_KEY, PostOutcome, Result,
    RunOutcome,
};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap};
use reqwest::{Client, Method, StatusCode, Url};
use serde_json::json;

use crate::auth::Authenticator;
use crate::config::FormanceConfig;
use crate::error::{Refusal, classify_answer, classify_transport};
use crate::wire::{
    Cursor, Data, LedgerAccount, ReferenceOnly, RevertRequest, Transaction, TransactionId, decode,
};

/// Request header carrying the idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";
/// Response header set to `true` when the ledger replayed a stored answer.
pub const IDEMPOTENCY_HIT_HEADER: &str = "Idempotency-Hit";

/// A Formance Ledger v2, reached over HTTP.
///
/// Cheap to share behind an `Arc`; the underlying connection pool and token cache
/// are shared by all calls.
#[derive(Debug)]
pub struct FormanceLedger {
    http: Client,
    /// `{base_url}/v2/{ledger}`, the root of every ledger endpoint.
    ledger_url: Url,
    ledger: String,
    auth: Authenticator,
    /// At least 1 (checked by `FormanceConfig::validate`).
    pub(crate) max_bulk: usize,
}

/// One HTTP exchange with the ledger, described so it can be sent twice (after a 401).
pub(crate) struct Request<'a> {
    method: Method,
    url: Url,
    idempotency_key: Option<String>,
    /// Named in error context when the key is an outbox event id.
    event_id: Option<EventId>,
    body: Option<&'a [u8]>,
}

/// A complete answer: status, headers and the whole body.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl<'a> Request<'a> {
    fn new(method: Method, url: Url) -> Self {
        Self {
            method,
            url,
            idempotency_key: None,
            event_id: None,
            body: None,
        }
    }

    pub(crate) fn post(url: Url, body: &'a [u8]) -> Self {
        Self {
            body: Some(body),
            ..Self::new(Method::POST, url)
        }
    }

    /// A GET carrying a Formance filter both as `?query=` and as the JSON body:
    /// upstream reads the parameter first and falls back to the body, and stand-ins
    /// may implement only one of the two.
    pub(crate) fn get_filtered(mut url: Url, filter: Option<&'a str>) -> Self {
        if let Some(filter) = filter {
            url.query_pairs_mut().append_pair("query", filter);
        }
        Self {
            body: filter.map(str::as_bytes),
            ..Self::new(Method::GET, url)
        }
    }

    fn keyed(mut self, key: &str) -> Self {
        // Formance treats an empty key as "no idempotency"; so does this client.
        self.idempotency_key = (!key.is_empty()).then(|| key.to_owned());
        self
    }

    /// Keyed with the outbox event id, which is also named in error context.
    pub(crate) fn for_event(mut self, event_id: EventId) -> Self {
        self.event_id = Some(event_id);
        self.keyed(&event_id.to_string())
    }

    /// Adds where the error happened, and logs it at a level fitting its class.
    /// Called once per error, by the request that met it (an error of a nested
    /// lookup, such as the one that resolves a 409, was failed by its own request).
    pub(crate) fn fail(&self, error: Error) -> Error {
        let mut error = error.with("endpoint", self.url.path());
        match (self.event_id, &self.idempotency_key) {
            (Some(event_id), _) => error = error.with("event_id", event_id),
            (None, Some(key)) => error = error.with("idempotency_key", key),
            _ => {}
        }
        if error.kind() == &ErrorKind::IdempotencyMismatch {
            // Never retried and never expected: the stored payload changed, or two
            // events share an id. Someone must look.
            tracing::error!(%error, "idempotency key reused with a different body");
        } else if error.is_transient() {
            tracing::debug!(%error, "ledger call failed, may pass on retry");
        } else {
            tracing::warn!(%error, "ledger call failed permanently");
        }
        error
    }
}

impl Answer {
    fn is_hit(&self) -> bool {
        self.headers
            .get(IDEMPOTENCY_HIT_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    pub(crate) fn refusal(&self) -> Refusal {
        classify_answer(self.status, &self.headers, &self.body, Utc::now())
    }

    /// The outcome of a 2xx create or revert: the transaction's id, replayed or new.
    fn committed(&self) -> Result<PostOutcome> {
        let Data {
            data: TransactionId { id },
        } = decode(&self.body, "transaction (it may be committed)")?;
        Ok(if self.is_hit() {
            PostOutcome::Replayed { transaction_id: id }
        } else {
            PostOutcome::Accepted { transaction_id: id }
        })
    }
}

impl FormanceLedger {
    /// Builds the client without any network call; see [`FormanceLedger::connect`].
    ///
    /// # Errors
    /// A [`ErrorKind::Config`] error naming the bad field.
    pub fn new(config: &FormanceConfig) -> Result<Self> {
        let mut ledger_url = config.validate()?;
        ledger_url
            .path_segments_mut()
            .expect("validate accepts only http(s) URLs, which have a path")
            .pop_if_empty()
            .extend(["v2", &config.ledger]);
        let http = Client::builder()
            .connect_timeout(config.connect_timeout())
            .timeout(config.request_timeout())
            // A redirected POST turns into a GET in most clients; a ledger behind a
            // redirect is a misconfigured base URL, better reported than followed.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!(
                "outbox-ledger-formance/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::Config,
                    format!("cannot build the HTTP client: {e}"),
                )
            })?;
        Ok(Self {
            http,
            ledger_url,
            ledger: config.ledger.clone(),
            auth: Authenticator::new(&config.auth)?,
            max_bulk: config.bulk_max_size,
        })
    }

    /// Builds the client and, when `create_ledger_if_missing` is set, creates the ledger.
    ///
    /// # Errors
    /// A config error, or the ledger's answer to the creation.
    pub async fn connect(config: &FormanceConfig) -> Result<Self> {
        let ledger = Self::new(config)?;
        if config.create_ledger_if_missing {
            ledger.create_ledger().await?;
        }
        Ok(ledger)
    }

    /// The ledger name every call addresses.
    pub fn ledger_name(&self) -> &str {
        &self.ledger
    }

    /// `POST /v2/{ledger}`. Returns `true` if it was created, `false` if it existed.
    ///
    /// # Errors
    /// Any answer other than 2xx or 400 `LEDGER_ALREADY_EXISTS`, classified as usual.
    pub async fn create_ledger(&self) -> Result<bool> {
        let request = Request::post(self.ledger_url.clone(), b"{}");
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if answer.status.is_success() {
            tracing::info!(ledger = %self.ledger, "created the ledger");
            return Ok(true);
        }
        let error = answer.refusal().into_error();
        if error.code() == Some("LEDGER_ALREADY_EXISTS") {
            return Ok(false);
        }
        Err(request.fail(error))
    }

    /// `GET /v2/{ledger}/accounts/{address}?expand=volumes`; `None` for an account the
    /// ledger has never seen (Formance v2 answers 404 `NOT_FOUND`).
    ///
    /// # Errors
    /// Transport and ledger errors, classified as usual.
    pub async fn account(&self, address: &Account) -> Result<Option<LedgerAccount>> {
        let mut url = self.url(&["accounts", address.as_str()]);
        url.query_pairs_mut().append_pair("expand", "volumes");
        let request = Request::new(Method::GET, url);
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if answer.status.is_success() {
            let account: Data<LedgerAccount> =
                decode(&answer.body, "account").map_err(|e| request.fail(e))?;
            return Ok(Some(account.data));
        }
        let error = answer.refusal().into_error();
        // LEDGER_NOT_FOUND is also a 404, and is an error, not an empty account.
        if error.code() == Some("NOT_FOUND") {
            return Ok(None);
        }
        Err(request.fail(error))
    }

    /// The transaction carrying `reference` (unique per ledger), if any.
    ///
    /// # Errors
    /// Transport and ledger errors, classified as usual.
    pub async fn transaction_by_reference(
        &self,
        reference: &str,
    ) -> Result<Option<LedgerTransaction>> {
        let filter = json!({ "$match": { "reference": reference } });
        let found = self.transactions_matching(&filter).await?;
        Ok(found.into_iter().next())
    }

    /// `GET /v2/{ledger}/transactions` with a filter; at most two, which is enough to
    /// tell "unique" from "duplicated".
    async fn transactions_matching(
        &self,
        filter: &serde_json::Value,
    ) -> Result<Vec<LedgerTransaction>> {
        let filter = filter.to_string();
        let mut url = self.url(&["transactions"]);
        url.query_pairs_mut().append_pair("pageSize", "2");
        let request = Request::get_filtered(url, Some(&filter));
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if !answer.status.is_success() {
            return Err(request.fail(answer.refusal().into_error()));
        }
        let page: Cursor<Transaction> =
            decode(&answer.body, "transaction list").map_err(|e| request.fail(e))?;
        Ok(page
            .cursor
            .data
            .into_iter()
            .map(LedgerTransaction::from)
            .collect())
    }

    /// Resolves a 409 `CONFLICT` on a create (docs/LEDGER.md#references-and-the-409): when a duplicate
    /// of this very event raced the first post, the loser hits the reference index
    /// before the idempotency lookup. The transaction holding the reference tells
    /// which: if it carries this event id, the event is in the ledger.
    ///
    /// `fail` finishes the errors this decides itself (the post's request adds its
    /// place and logs them); an error of the reference lookup was finished by the
    /// lookup's own request and only gets the event id.
    pub(crate) async fn resolve_conflict(
        &self,
        key: EventId,
        body: &[u8],
        message: String,
        fail: impl Fn(Error) -> Error,
    ) -> Result<PostOutcome> {
        let reference = serde_json::from_slice::<ReferenceOnly>(body)
            .unwrap_or_default()
            .reference
            .filter(|r| !r.is_empty());
        let Some(reference) = reference else {
            // Without a reference the only 409 is a concurrent duplicate key: a retry
            // finds the stored key and replays (or reports a mismatch).
            return Err(fail(
                Error::new(ErrorKind::Ledger, message)
                    .with_code("CONFLICT")
                    .transient(None),
            ));
        };
        let key = key.to_string();
        let holder = self
            .transaction_by_reference(&reference)
            .await
            .map_err(|e| e.with("event_id", &key))?;
        match holder {
            Some(tx) if tx.metadata.get(OUTBOX_EVENT_ID_KEY) == Some(&key) => {
                tracing::info!(event_id = %key, transaction_id = tx.id, %reference, "reference conflict resolved as a replay");
                Ok(PostOutcome::Replayed {
                    transaction_id: tx.id,
                })
            }
            Some(tx) => {
                tracing::warn!(event_id = %key, transaction_id = tx.id, %reference, "reference held by another event");
                Ok(PostOutcome::Rejected {
                    code: "CONFLICT".into(),
                    message,
                })
            }
            // The holder was a concurrent insert that rolled back: the reference is
            // free again, so a retry may well succeed.
            None => Err(fail(
                Error::new(
                    ErrorKind::Ledger,
                    format!("{message} (no transaction holds the reference now)"),
                )
                .with_code("CONFLICT")
                .with("reference", reference)
                .transient(None),
            )),
        }
    }

    /// `{base}/v2/{ledger}/{segments…}`, each segment percent-encoded.
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.ledger_url.clone();
        url.path_segments_mut()
            .expect("the ledger URL is an http(s) URL")
            .extend(segments);
        url
    }

    /// Sends `request`, fetching a new OAuth2 token and sending once more on a 401.
    pub(crate) async fn execute(&self, request: &Request<'_>) -> Result<Answer> {
        let mut refreshed = false;
        loop {
            let authorization = self.auth.authorization(&self.http).await?;
            let mut builder = self
                .http
                .request(request.method.clone(), request.url.clone())
                .header(ACCEPT, "application/json");
            if let Some(header) = &authorization {
                builder = builder.header(AUTHORIZATION, header.clone());
            }
            if let Some(key) = &request.idempotency_key {
                builder = builder.header(IDEMPOTENCY_KEY_HEADER, key);
            }
            if let Some(body) = request.body {
                // The stored bytes, unchanged: Formance hashes what it parses, and the
                // audit trail says what was sent.
                builder = builder
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.to_vec());
            }
            let mut response = builder.send().await.map_err(classify_transport)?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED
                && !refreshed
                && self.auth.can_refresh()
                && let Some(rejected) = &authorization
            {
                // A token revoked or expired early; a 401 is answered before any
                // processing, so sending again is safe.
                tracing::debug!(
                    endpoint = request.url.path(),
                    "401 with a cached token; fetching a new one"
                );
                refreshed = true;
                self.auth.reject(rejected).await;
                continue;
            }
            let headers = std::mem::take(response.headers_mut());
            let body = response.bytes().await.map_err(classify_transport)?;
            return Ok(Answer {
                status,
                headers,
                body: body.into(),
            });
        }
    }
}

#[async_trait]
impl Ledger for FormanceLedger {
    fn capabilities(&self) -> LedgerCapabilities {
        LedgerCapabilities::new(self.max_bulk).with_ordered_runs()
    }

    async fn post(&self, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        let request = Request::post(self.url(&["transactions"]), body).for_event(key);
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if answer.status.is_success() {
            let outcome = answer.committed().map_err(|e| request.fail(e))?;
            tracing::debug!(event_id = %key, ?outcome, "posted");
            return Ok(outcome);
        }
        match answer.refusal() {
            Refusal::Rejected { code, message } => {
                tracing::info!(event_id = %key, %code, %message, "ledger rejected the post");
                Ok(PostOutcome::Rejected { code, message })
            }
            Refusal::Conflict { message } => {
                self.resolve_conflict(key, body, message, |e| request.fail(e))
                    .await
            }
            Refusal::Failed(error) => Err(request.fail(error)),
        }
    }

    async fn post_bulk(&self, items: &[BulkItem<'_>]) -> Result<Vec<Result<PostOutcome>>> {
        self.post_in_chunks(items).await
    }

    async fn post_run(&self, items: &[BulkItem<'_>]) -> Result<RunOutcome> {
        self.post_atomic_run(items).await
    }

    async fn revert(
        &self,
        key: EventId,
        transaction_id: u64,
        metadata: &Metadata,
    ) -> Result<PostOutcome> {
        let body = serde_json::to_vec(&RevertRequest { metadata }).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot encode the revert body: {e}"),
            )
        })?;
        let id = transaction_id.to_string();
        let request =
            Request::post(self.url(&["transactions", &id, "revert"]), &body).for_event(key);
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if answer.status.is_success() {
            let outcome = answer.committed().map_err(|e| request.fail(e))?;
            tracing::debug!(event_id = %key, transaction_id, ?outcome, "reverted");
            return Ok(outcome);
        }
        match answer.refusal() {
            Refusal::Rejected { code, message } => {
                tracing::info!(event_id = %key, transaction_id, %code, %message, "ledger rejected the revert");
                Ok(PostOutcome::Rejected { code, message })
            }
            // A revert has no reference: the only 409 is a concurrent duplicate key.
            Refusal::Conflict { message } => Err(request.fail(
                Error::new(ErrorKind::Ledger, message)
                    .with_code("CONFLICT")
                    .transient(None),
            )),
            Refusal::Failed(error) => {
                Err(request.fail(error.with("transaction_id", transaction_id)))
            }
        }
    }

    async fn transaction_by_event_id(
        &self,
        event_id: EventId,
    ) -> Result<Option<LedgerTransaction>> {
        let field = format!("metadata[{OUTBOX_EVENT_ID_KEY}]");
        let filter = json!({ "$match": { field: event_id.to_string() } });
        let mut found = self.transactions_matching(&filter).await?;
        if found.len() > 1 {
            // Exactly-once is broken for this event; returning either one would hide it.
            let ids: Vec<u64> = found.iter().map(|tx| tx.id).collect();
            let error = Error::new(
                ErrorKind::Internal,
                format!(
                    "several ledger transactions carry {OUTBOX_EVENT_ID_KEY}={event_id}: {ids:?}"
                ),
            )
            .with("event_id", event_id);
            tracing::error!(%error, "duplicate ledger transactions for one outbox event");
            return Err(error);
        }
        Ok(found.pop())
    }

    async fn save_account_metadata(
        &self,
        key: &str,
        account: &Account,
        metadata: &Metadata,
    ) -> Result<()> {
        let body = serde_json::to_vec(metadata).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot encode account metadata: {e}"),
            )
        })?;
        let request =
            Request::post(self.url(&["accounts", account.as_str(), "metadata"]), &body).keyed(key);
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if answer.status.is_success() {
            return Ok(());
        }
        let error = match answer.refusal() {
            // Metadata has no reference: a 409 is a concurrent duplicate key.
            Refusal::Conflict { message } => Error::new(ErrorKind::Ledger, message)
                .with_code("CONFLICT")
                .transient(None),
            refusal => refusal.into_error(),
        };
        Err(request.fail(error.with("account", account)))
    }

    /// Reads the account's metadata (`GET /accounts/{address}`) for the notice's
    /// per-event marker; an account the ledger never saw has no notice.
    async fn rejection_notice(
        &self,
        account: &Account,
        event_id: EventId,
    ) -> Result<Option<String>> {
        let key = outbox_core::dispatch::notice::rejection_marker_key(event_id);
        Ok(self
            .account(account)
            .await?
            .and_then(|found| found.metadata.get(&key).cloned()))
    }

    async fn aggregate_balances(&self, address: &str) -> Result<Balances> {
        self.balances(address, None).await
    }

    /// `GET /aggregate/balances?pit=…[&useInsertionDate=true]`; a ledger without
    /// the moves history answers 400, a permanent error naming the option.
    async fn aggregate_balances_at(
        &self,
        address: &str,
        at: DateTime<Utc>,
        date: BalanceDate,
    ) -> Result<Balances> {
        self.balances(address, Some((at, date))).await
    }

    /// `GET /transactions?sort=id:asc` above `after`, one request per page of at
    /// most [`crate::MAX_TRANSACTION_PAGE`].
    async fn transactions_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<LedgerTransaction>> {
        self.list_after(after, limit).await
    }
}
