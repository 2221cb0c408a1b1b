//! Test support: the Formance contracts as validators, a dev ledger harness with
//! a reqwest client, and a tiny axum webhook receiver.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The ledger every harness creates.
pub const LEDGER: &str = "default";

/// How long a test waits for something that should happen quickly.
pub const WAIT: Duration = Duration::from_secs(10);

// -- contracts ----------------------------------------------------------------

/// The Formance v2 OpenAPI component schemas and the committed-transactions event
/// schema, compiled on demand.
pub struct Contracts {
    components: Value,
    compiled: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
    committed_transactions: jsonschema::Validator,
}

fn contracts_dir() -> PathBuf {
    match std::env::var_os("OUTBOX_CONTRACTS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/contracts"),
    }
}

/// The contracts, or `None` (after saying so) when the folder is absent outside CI.
///
/// # Panics
/// When the folder is absent and `CI` is set: CI must not skip silently.
pub fn contracts() -> Option<&'static Contracts> {
    static CONTRACTS: OnceLock<Option<Contracts>> = OnceLock::new();
    let loaded = CONTRACTS.get_or_init(|| {
        let dir = contracts_dir();
        let spec = dir.join("formance-ledger-v2.openapi.yaml");
        if !spec.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "the Formance contracts are missing at {} and CI is set; set OUTBOX_CONTRACTS_DIR",
                dir.display()
            );
            return None;
        }
        Some(Contracts::load(&dir))
    });
    if loaded.is_none() {
        println!(
            "SKIPPED: Formance contracts not found at {} (set OUTBOX_CONTRACTS_DIR to run this test)",
            contracts_dir().display()
        );
    }
    loaded.as_ref()
}

impl Contracts {
    fn load(dir: &std::path::Path) -> Self {
        let text = std::fs::read_to_string(dir.join("formance-ledger-v2.openapi.yaml"))
            .expect("read the OpenAPI spec");
        let spec: Value = serde_norway::from_str(&text).expect("the OpenAPI spec is YAML");
        let mut components = spec["components"]["schemas"].clone();
        openapi_to_json_schema(&mut components);

        let text = std::fs::read_to_string(
            dir.join("formance-ledger-v2.committed-transactions.schema.json"),
        )
        .expect("read the committed-transactions schema");
        let mut event: Value = serde_json::from_str(&text).expect("the event schema is JSON");
        // The generated schema renders Go's *big.Int as `{"type":"object"}`; on the
        // wire it is a JSON number (docs/LEDGER.md#conventions), so check it as one.
        event["$defs"]["Int"] = json!({"type": "integer"});
        let committed_transactions = jsonschema::options()
            .should_validate_formats(true)
            .build(&event)
            .expect("the event schema compiles");
        Self {
            components,
            compiled: Mutex::new(HashMap::new()),
            committed_transactions,
        }
    }

    fn validator(&self, name: &str) -> Arc<jsonschema::Validator> {
        let mut compiled = self.compiled.lock().unwrap();
        if let Some(v) = compiled.get(name) {
            return Arc::clone(v);
        }
        assert!(
            self.components.get(name).is_some(),
            "no component schema {name} in the spec"
        );
        let root = json!({
            "allOf": [{"$ref": format!("#/components/schemas/{name}")}],
            "components": {"schemas": self.components},
        });
        let validator = Arc::new(
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .should_validate_formats(true)
                .build(&root)
                .unwrap_or_else(|e| panic!("schema {name} does not compile: {e}")),
        );
        compiled.insert(name.to_owned(), Arc::clone(&validator));
        validator
    }

    /// Where `instance` departs from `#/components/schemas/{name}` (empty: it matches).
    pub fn check(&self, name: &str, instance: &Value) -> Vec<String> {
        let validator = self.validator(name);
        validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    /// Asserts `instance` matches `#/components/schemas/{name}`.
    #[track_caller]
    pub fn validate(&self, name: &str, instance: &Value) {
        let errors = self.check(name, instance);
        assert!(
            errors.is_empty(),
            "response does not match {name}: {errors:#?}\n{instance:#}"
        );
    }

    /// Where a COMMITTED_TRANSACTIONS payload departs from the event schema.
    pub fn check_committed_transactions(&self, payload: &Value) -> Vec<String> {
        self.committed_transactions
            .iter_errors(payload)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    /// Asserts a COMMITTED_TRANSACTIONS payload matches the event schema.
    #[track_caller]
    pub fn validate_committed_transactions(&self, payload: &Value) {
        let errors = self.check_committed_transactions(payload);
        assert!(
            errors.is_empty(),
            "webhook payload does not match the event schema: {errors:#?}\n{payload:#}"
        );
    }
}

/// Rewrites OpenAPI 3.0 schema dialect into JSON Schema draft 7:
/// `discriminator` + `oneOf` becomes a conditional on the discriminator property
/// (a plain `oneOf` rejects documents that match several look-alike branches), and
/// `nullable: true` adds `null` to the type.
fn openapi_to_json_schema(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(disc)) = map.remove("discriminator") {
                let property = disc["propertyName"]
                    .as_str()
                    .expect("discriminator property")
                    .to_owned();
                let mapping = disc["mapping"].as_object().cloned().unwrap_or_default();
                map.remove("oneOf");
                let mut all_of: Vec<Value> = vec![json!({
                    "required": [property],
                    "properties": {property.clone(): {"enum": mapping.keys().collect::<Vec<_>>()}},
                })];
                for (key, target) in mapping {
                    all_of.push(json!({
                        "if": {"properties": {property.clone(): {"const": key}}, "required": [property]},
                        "then": {"$ref": target},
                    }));
                }
                map.insert("allOf".into(), Value::Array(all_of));
            }
            if map.get("nullable") == Some(&Value::Bool(true)) {
                map.remove("nullable");
                if let Some(Value::String(t)) = map.get("type").cloned() {
                    map.insert("type".into(), json!([t, "null"]));
                }
            }
            for child in map.values_mut() {
                openapi_to_json_schema(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(openapi_to_json_schema),
        _ => {}
    }
}

// -- ledger harness -------------------------------------------------------------

/// An HTTP answer with its body parsed (`Null` when empty).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// Whether the answer carries `Idempotency-Hit: true`.
    pub fn hit(&self) -> bool {
        match self.headers.get("Idempotency-Hit") {
            Some(v) => {
                assert_eq!(v, "true", "Idempotency-Hit is only ever \"true\"");
                true
            }
            None => false,
        }
    }
}

/// A dev ledger on an ephemeral loopback port, with ledger [`LEDGER`] created.
pub struct Harness {
    pub ledger: RunningDevLedger,
    pub http: reqwest::Client,
    pub contracts: &'static Contracts,
}

impl Harness {
    pub async fn start(contracts: &'static Contracts) -> Self {
        Self::start_with(contracts, DevLedgerConfig::default()).await
    }

    pub async fn start_with(contracts: &'static Contracts, mut config: DevLedgerConfig) -> Self {
        if !config.create_ledgers.iter().any(|l| l == LEDGER) {
            config.create_ledgers.push(LEDGER.to_owned());
        }
        let ledger = DevLedger::start(config)
            .await
            .expect("the dev ledger starts");
        let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
        Self {
            ledger,
            http,
            contracts,
        }
    }

    /// `path` under `/v2/default` unless it starts with `/`.
    pub fn url(&self, path: &str) -> String {
        if path.starts_with('/') {
            format!("{}{path}", self.ledger.url())
        } else {
            format!("{}/v2/{LEDGER}/{path}", self.ledger.url())
        }
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("the request gets an answer");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("the body is readable");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("answer {status} is not JSON ({e}): {bytes:?}"))
        };
        if status >= 400 && body.get("errorCode").is_some() {
            // Every error answer must be a V2ErrorResponse.
            self.contracts.validate("V2ErrorResponse", &body);
        }
        Answer {
            status,
            headers,
            body,
        }
    }

    /// POSTs JSON with an optional `Idempotency-Key`.
    pub async fn post(&self, path: &str, body: &Value, key: Option<&str>) -> Answer {
        self.post_raw(path, &body.to_string(), key).await
    }

    pub async fn post_raw(&self, path: &str, body: &str, key: Option<&str>) -> Answer {
        let mut request = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        self.send(request).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(self.url(path))).await
    }

    /// A GET with a JSON filter in its body, as Formance list endpoints take it.
    pub async fn get_with_body(&self, path: &str, body: &Value) -> Answer {
        self.send(
            self.http
                .get(self.url(path))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await
    }

    /// A HEAD (the count endpoints), with an optional JSON filter in its body.
    pub async fn head(&self, path: &str, filter: Option<&Value>) -> Answer {
        let mut request = self.http.head(self.url(path));
        if let Some(filter) = filter {
            request = request
                .header("content-type", "application/json")
                .body(filter.to_string());
        }
        self.send(request).await
    }

    /// The `Count` header of a 204 count answer.
    #[track_caller]
    pub fn count(&self, answer: &Answer) -> u64 {
        assert_eq!(answer.status, 204, "a count answers 204: {:#}", answer.body);
        assert_eq!(answer.body, Value::Null, "a count has no body");
        answer
            .headers
            .get("Count")
            .expect("a count answer carries Count")
            .to_str()
            .unwrap()
            .parse()
            .expect("Count is an integer")
    }

    /// Asserts `status` and that the body matches component schema `schema`.
    #[track_caller]
    pub fn ok(&self, answer: &Answer, status: u16, schema: &str) -> Value {
        assert_eq!(
            answer.status, status,
            "unexpected answer: {:#}",
            answer.body
        );
        self.contracts.validate(schema, &answer.body);
        answer.body.clone()
    }

    /// Asserts an error answer with `status` and `code` (already schema-checked).
    #[track_caller]
    pub fn err(&self, answer: &Answer, status: u16, code: &str) -> String {
        assert_eq!(
            answer.status, status,
            "unexpected answer: {:#}",
            answer.body
        );
        self.contracts.validate("V2ErrorResponse", &answer.body);
        assert_eq!(answer.body["errorCode"], code, "{:#}", answer.body);
        answer.body["errorMessage"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Creates a transaction (expecting 200) and returns its `data`.
    pub async fn create(&self, body: &Value, key: Option<&str>) -> Value {
        let answer = self.post("transactions", body, key).await;
        self.ok(&answer, 200, "V2CreateTransactionResponse")["data"].clone()
    }

    /// Sum of balances per asset over accounts matching `address`.
    pub async fn balances(&self, address: &str) -> Value {
        let answer = self
            .get_with_body(
                "aggregate/balances",
                &json!({"$match": {"address": address}}),
            )
            .await;
        self.ok(&answer, 200, "V2AggregateBalancesResponse")["data"].clone()
    }

    /// The transactions list filtered by `filter`.
    pub async fn list(&self, filter: &Value) -> Vec<Value> {
        let answer = self.get_with_body("transactions", filter).await;
        let body = self.ok(&answer, 200, "V2TransactionsCursorResponse");
        body["cursor"]["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits (bounded) until `check` holds on the ledger's stats.
    pub async fn wait_stats(
        &self,
        what: &str,
        check: impl Fn(&outbox_ledger_dev::DevLedgerStats) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let stats = self.ledger.stats();
            if check(&stats) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A posting body from `source` to `destination`.
pub fn postings(source: &str, destination: &str, amount: u64, asset: &str) -> Value {
    json!({"postings": [{"source": source, "destination": destination, "amount": amount, "asset": asset}]})
}

/// Adds `metadata` to a request body.
pub fn with(mut body: Value, key: &str, value: Value) -> Value {
    body.as_object_mut()
        .expect("an object")
        .insert(key.to_owned(), value);
    body
}

// -- webhook receiver -----------------------------------------------------------

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub json: Value,
}

impl Delivery {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("delivery without {name}"))
            .to_str()
            .unwrap()
    }
}

#[derive(Clone)]
struct ReceiverState {
    answers: Arc<Mutex<VecDeque<u16>>>,
    fallback: Arc<Mutex<u16>>,
    sender: mpsc::UnboundedSender<Delivery>,
}

/// A webhook endpoint on loopback that records every attempt and answers from a
/// script (then `fallback`, 200 unless changed).
pub struct Receiver {
    pub url: String,
    answers: Arc<Mutex<VecDeque<u16>>>,
    fallback: Arc<Mutex<u16>>,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    server: tokio::task::JoinHandle<()>,
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = state.sender.send(Delivery {
        headers,
        body,
        json,
    });
    let status = state
        .answers
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| *state.fallback.lock().unwrap());
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    pub async fn start(answers: &[u16]) -> Self {
        let (sender, deliveries) = mpsc::unbounded_channel();
        let state = ReceiverState {
            answers: Arc::new(Mutex::new(answers.iter().copied().collect())),
            fallback: Arc::new(Mutex::new(200)),
            sender,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/ledger", listener.local_addr().unwrap());
        let (answers, fallback) = (Arc::clone(&state.answers), Arc::clone(&state.fallback));
        let app = axum::Router::new()
            .route("/hooks/ledger", axum::routing::post(receive))
            .with_state(state);
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            answers,
            fallback,
            deliveries,
            server,
        }
    }

    /// Answers `status` once the scripted answers are used up.
    pub fn set_fallback(&self, status: u16) {
        *self.fallback.lock().unwrap() = status;
    }

    pub fn scripted_left(&self) -> usize {
        self.answers.lock().unwrap().len()
    }

    /// The next attempt received, within [`WAIT`].
    pub async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.deliveries.recv())
            .await
            .expect("a webhook delivery arrives in time")
            .expect("the receiver is running")
    }

    /// Attempts already received and not yet read.
    pub fn drain(&mut self) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Ok(d) = self.deliveries.try_recv() {
            out.push(d);
        }
        out
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Recomputes the Formance signature independently of the crate under test.
pub fn expected_signature(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> String {
    use base64::Engine as _;
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// Keys of a JSON object in the order they appear in `text` (top level only).
pub fn key_order(text: &str) -> Vec<String> {
    // serde_json's map may sort keys; walk the text with a streaming deserializer.
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(k) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(k);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Keys>(text).unwrap().0
}

/// An object's keys as a sorted copy, for comparing with `key_order`.
pub fn sorted(keys: &[String]) -> Vec<String> {
    let mut s = keys.to_vec();
    s.sort();
    s
}
