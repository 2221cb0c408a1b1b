//! The probe's own view of a ledger: raw HTTP, so the report shows what the ledger
//! answered (status, `Idempotency-Hit`, transaction id, error code) rather than what
//! the relay's client makes of it (it resolves a 409 through the reference, for one).

use std::time::Duration;

use outbox_core::{Error, ErrorKind, EventId, OUTBOX_EVENT_ID_KEY, Result};
use outbox_ledger_formance::{IDEMPOTENCY_HIT_HEADER, IDEMPOTENCY_KEY_HEADER};
use reqwest::{Client, Method, Url};
use serde::Serialize;
use serde_json::{Value, json};

/// Longest wait for one answer; a probe is interactive.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One answer of the ledger to a write, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answer {
    pub status: u16,
    /// `Idempotency-Hit: true` was on the answer.
    pub idempotency_hit: bool,
    /// `data.id` of a 2xx answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<u64>,
    /// `errorCode` of a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// A new transaction: 2xx without `Idempotency-Hit`.
    pub fn is_new(&self) -> bool {
        self.is_success() && !self.idempotency_hit
    }

    pub fn is_hit(&self) -> bool {
        self.is_success() && self.idempotency_hit
    }

    pub fn code(&self) -> Option<&str> {
        self.error_code.as_deref()
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.status)?;
        if self.idempotency_hit {
            write!(f, " Idempotency-Hit: true")?;
        }
        if let Some(id) = self.transaction_id {
            write!(f, " transaction {id}")?;
        }
        if let Some(code) = &self.error_code {
            write!(f, " {code}")?;
        }
        Ok(())
    }
}

/// A Formance v2 API root (or a dev ledger) the probe talks to.
#[derive(Debug, Clone)]
pub struct ProbeLedger {
    http: Client,
    /// The API root, without `/v2`.
    base: Url,
    token: Option<String>,
}

fn unreachable(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Transport, format!("{what}: {e}")).with("field", "ledger_url")
}

impl ProbeLedger {
    /// # Errors
    /// `InvalidInput` naming `ledger_url` when it is not an http(s) URL.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self> {
        let base = Url::parse(base_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| {
                Error::invalid(
                    "ledger_url",
                    format!("{base_url:?} is not an http(s) URL (the API root, without /v2)"),
                )
            })?;
        let http = Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::new(ErrorKind::Config, format!("HTTP client: {e}")))?;
        Ok(Self { http, base, token })
    }

    /// The API root as given (what the relay takes as `--ledger-url`).
    pub fn base_url(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http(s) URL has a path")
            .pop_if_empty()
            .extend(segments);
        url
    }

    async fn send(
        &self,
        method: Method,
        url: Url,
        key: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, bool, Value)> {
        let mut request = self
            .http
            .request(method, url.clone())
            .header("accept", "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(key) = key {
            request = request.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(&format!("cannot reach {}", url.path()), e))?;
        let status = response.status().as_u16();
        let hit = response
            .headers()
            .get(IDEMPOTENCY_HIT_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let bytes = response
            .bytes()
            .await
            .map_err(|e| unreachable(&format!("reading the answer of {}", url.path()), e))?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, hit, body))
    }

    /// POSTs `body` to `{ledger}/{segments…}` with `key` as `Idempotency-Key`.
    ///
    /// # Errors
    /// Only when the ledger cannot be reached; every answer is an [`Answer`].
    pub async fn write(
        &self,
        ledger: &str,
        segments: &[&str],
        key: Option<&str>,
        body: &[u8],
    ) -> Result<Answer> {
        let mut path = vec!["v2", ledger];
        path.extend_from_slice(segments);
        let (status, hit, body) = self
            .send(Method::POST, self.url(&path), key, Some(body.to_vec()))
            .await?;
        let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
        Ok(Answer {
            status,
            idempotency_hit: hit,
            transaction_id: body.pointer("/data/id").and_then(Value::as_u64),
            error_code: text("errorCode"),
            error_message: text("errorMessage"),
        })
    }

    /// Whether this is the dev ledger (`GET /_/info`), whose fault plan can hold an
    /// answer after commit.
    pub async fn is_dev_ledger(&self) -> bool {
        match self
            .send(Method::GET, self.url(&["_", "info"]), None, None)
            .await
        {
            Ok((200, _, body)) => body["server"] == "outbox-ledger-dev",
            _ => false,
        }
    }

    /// Creates `name`, or accepts it as it is when it exists and is empty (or when
    /// `allow_existing`). A probe moves money: it never posts into a ledger that
    /// holds transactions unless told so.
    ///
    /// # Errors
    /// `InvalidInput` naming `ledger_name` for a ledger with transactions; the
    /// ledger's refusal of the creation.
    pub async fn prepare(&self, name: &str, allow_existing: bool) -> Result<()> {
        let (status, _, body) = self
            .send(Method::GET, self.url(&["v2", name]), None, None)
            .await?;
        match status {
            200 => {
                let any = self.transaction_ids(name, &json!({}), 1).await?;
                if !any.is_empty() && !allow_existing {
                    return Err(Error::invalid(
                        "ledger_name",
                        format!(
                            "ledger {name:?} already holds transactions; a probe moves money, so it posts only into a fresh ledger of its own (pass --allow-existing-ledger to post there anyway)"
                        ),
                    ));
                }
                Ok(())
            }
            404 => {
                let answer = self.write(name, &[], None, b"{}").await?;
                if answer.is_success() {
                    return Ok(());
                }
                Err(refused(&format!("creating ledger {name:?}"), &answer))
            }
            other => Err(Error::new(
                ErrorKind::Ledger,
                format!("GET /v2/{name} answered {other}: {body}"),
            )
            .with("field", "ledger_url")),
        }
    }

    /// Ids of the transactions matching a Formance filter, newest first, at most `limit`
    /// (up to 100).
    async fn transaction_ids(&self, ledger: &str, filter: &Value, limit: u32) -> Result<Vec<u64>> {
        let mut url = self.url(&["v2", ledger, "transactions"]);
        let filter_text = filter.to_string();
        url.query_pairs_mut()
            .append_pair("pageSize", &limit.min(100).to_string())
            .append_pair("query", &filter_text);
        // The filter also goes in the body: upstream Formance reads it there.
        let (status, _, body) = self
            .send(Method::GET, url, None, Some(filter_text.into_bytes()))
            .await?;
        if status != 200 {
            return Err(Error::new(
                ErrorKind::Ledger,
                format!("listing the transactions of {ledger:?} answered {status}: {body}"),
            ));
        }
        Ok(body
            .pointer("/cursor/data")
            .and_then(Value::as_array)
            .map(|txs| txs.iter().filter_map(|tx| tx["id"].as_u64()).collect())
            .unwrap_or_default())
    }

    /// The transactions carrying `outbox_event_id = event`: the count that must stay 1.
    ///
    /// # Errors
    /// When the ledger cannot be reached or refuses the list.
    pub async fn carrying(&self, ledger: &str, event: EventId) -> Result<Vec<u64>> {
        let field = format!("metadata[{OUTBOX_EVENT_ID_KEY}]");
        let filter = json!({ "$match": { field: event.to_string() } });
        let mut ids = self.transaction_ids(ledger, &filter, 100).await?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// The dev ledger's fault plan (`GET /_dev/faults`).
    pub async fn fault_plan(&self) -> Result<Value> {
        let (status, _, body) = self
            .send(Method::GET, self.url(&["_dev", "faults"]), None, None)
            .await?;
        if status != 200 {
            return Err(Error::new(
                ErrorKind::Ledger,
                format!("GET /_dev/faults answered {status}"),
            ));
        }
        Ok(body)
    }

    /// Replaces the dev ledger's fault plan (`POST /_dev/faults`).
    pub async fn set_fault_plan(&self, plan: &Value) -> Result<()> {
        let (status, _, body) = self
            .send(
                Method::POST,
                self.url(&["_dev", "faults"]),
                None,
                Some(plan.to_string().into_bytes()),
            )
            .await?;
        if status != 200 {
            return Err(Error::new(
                ErrorKind::Ledger,
                format!("POST /_dev/faults answered {status}: {body}"),
            ));
        }
        Ok(())
    }
}

/// An error for a set-up write the ledger refused.
pub fn refused(what: &str, answer: &Answer) -> Error {
    let mut error = Error::new(
        ErrorKind::Ledger,
        format!(
            "{what}: the ledger answered {answer}{}",
            answer
                .error_message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    );
    if let Some(code) = answer.code() {
        error = error.with_code(code);
    }
    error
}
