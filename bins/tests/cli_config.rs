//! The configuration model through the real binary: the four layers in their order
//! (defaults, `--config` file, `OUTBOX_` variables, flags), errors naming the key and
//! its source, `outbox config show` with secrets redacted, secrets read from files,
//! the relay's OAuth2 client credentials, and `outbox.example.toml` kept valid.

#![cfg(all(feature = "sqlite", feature = "dev-ledger"))]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Form, Router};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use serde_json::Value;

const LEDGER: &str = "payouts";

/// A temporary directory with a migrated outbox holding one payout.
struct Setup {
    dir: tempfile::TempDir,
    database: String,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let database = format!("sqlite://{}", dir.path().join("outbox.db").display());
        let file = dir.path().join("payout.jsonl");
        std::fs::write(
            &file,
            r#"{"account":"merchants:1","postings":[{"source":"world","destination":"merchants:1","amount":48500000,"asset":"USD/2"}]}"#,
        )
        .unwrap();
        let out = outbox(
            &["enqueue", "--database", &database, "--file", path(&file)],
            &[],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        Self { dir, database }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs the binary with `env` on top of an environment without configuration.
fn outbox(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("OUTBOX_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    command.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `outbox config show --json` as key → (value, source).
fn shown(out: &Output) -> BTreeMap<String, (Value, String)> {
    assert!(out.status.success(), "{}", stderr(out));
    stdout(out)
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            (
                v["key"].as_str().unwrap().to_owned(),
                (v["value"].clone(), v["source"].as_str().unwrap().to_owned()),
            )
        })
        .collect()
}

async fn dev_ledger() -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap()
}

/// The name the relay printed its summary under (`relay NAME: accepted …`).
fn relay_name(out: &Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    let text = stdout(out);
    let line = text
        .lines()
        .find(|l| l.starts_with("relay "))
        .unwrap_or_else(|| panic!("no summary in {text:?}"));
    line["relay ".len()..line.find(':').unwrap()].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_apply_in_order_defaults_file_environment_flags() {
    let ledger = dev_ledger().await;
    let url = ledger.url();
    // Each run gets an outbox of its own: a relay of a new name refuses an outbox
    // another name has been delivering.
    let fresh = || {
        let s = Setup::new();
        let config = s.file(
            "outbox.toml",
            &format!(
                "database = \"{}\"\n[ledger]\nurl = \"{url}\"\nname = \"{LEDGER}\"\n[relay]\nname = \"from-file\"\n",
                s.database
            ),
        );
        (s, path(&config).to_owned())
    };

    // Defaults only (everything else as flags): the default name.
    let (s, _) = fresh();
    let flags_only = outbox(
        &[
            "relay",
            "--once",
            "--database",
            &s.database,
            "--ledger-url",
            &url,
            "--ledger-name",
            LEDGER,
        ],
        &[],
    );
    assert_eq!(relay_name(&flags_only), "relay");
    // The file over the defaults; by --config and by OUTBOX_CONFIG.
    let (_s, config) = fresh();
    assert_eq!(
        relay_name(&outbox(&["--config", &config, "relay", "--once"], &[])),
        "from-file"
    );
    let (_s, config) = fresh();
    assert_eq!(
        relay_name(&outbox(&["relay", "--once"], &[("OUTBOX_CONFIG", &config)])),
        "from-file"
    );
    // A variable over the file, a flag over the variable.
    let env = [("OUTBOX_RELAY__NAME", "from-env")];
    let (_s, config) = fresh();
    assert_eq!(
        relay_name(&outbox(&["--config", &config, "relay", "--once"], &env)),
        "from-env"
    );
    let (_s, config) = fresh();
    assert_eq!(
        relay_name(&outbox(
            &[
                "--config",
                &config,
                "relay",
                "--once",
                "--name",
                "from-flag"
            ],
            &env
        )),
        "from-flag"
    );

    // `config show` names each value's source.
    let show = shown(&outbox(
        &["--config", &config, "config", "show", "--json"],
        &env,
    ));
    assert_eq!(
        show["relay.name"],
        ("from-env".into(), "OUTBOX_RELAY__NAME".to_owned())
    );
    assert_eq!(show["ledger.name"], (LEDGER.into(), config.clone()));
    assert_eq!(show["relay.batch_size"], (500.into(), "default".to_owned()));
    assert_eq!(show["ledger.token"], (Value::Null, "unset".to_owned()));
    // OUTBOX_LOG is the log filter, `log.level`.
    let show = shown(&outbox(
        &["config", "show", "--json"],
        &[("OUTBOX_LOG", "info")],
    ));
    assert_eq!(
        show["log.level"],
        ("info".into(), "OUTBOX_LOG__LEVEL".to_owned())
    );
    ledger.shutdown().await;
}

#[test]
fn unknown_keys_and_bad_values_name_the_key_and_where_it_came_from() {
    let s = Setup::new();
    let refused = |out: &Output, needles: &[&str]| {
        assert_eq!(out.status.code(), Some(2), "exit code: {}", stderr(out));
        let text = stderr(out);
        for needle in needles {
            assert!(text.contains(needle), "{needle:?} not in {text:?}");
        }
    };
    let typo = s.file("typo.toml", "[relay]\nbatchsize = 5\n");
    refused(
        &outbox(&["--config", path(&typo), "config", "show"], &[]),
        &["`relay.batchsize`", path(&typo), "unknown key"],
    );
    let section = s.file("section.toml", "[relays]\nname = \"x\"\n");
    refused(
        &outbox(&["--config", path(&section), "config", "show"], &[]),
        &["`relays`", path(&section)],
    );
    let wrong_type = s.file("type.toml", "[relay]\nparallel = \"eight\"\n");
    refused(
        &outbox(&["--config", path(&wrong_type), "config", "show"], &[]),
        &["`relay.parallel`", path(&wrong_type), "invalid type"],
    );
    refused(
        &outbox(&["config", "show"], &[("OUTBOX_RELAY__BATCH_SIZE", "lots")]),
        &["`relay.batch_size`", "OUTBOX_RELAY__BATCH_SIZE"],
    );
    refused(
        &outbox(&["config", "show"], &[("OUTBOX_RELAY__BATCHSIZE", "5")]),
        &["`relay.batchsize`", "OUTBOX_RELAY__BATCHSIZE"],
    );
    // A variable of the flat naming is refused with its new name, never ignored.
    refused(
        &outbox(&["config", "show"], &[("OUTBOX_LEDGER_TOKEN", "t")]),
        &["OUTBOX_LEDGER_TOKEN", "OUTBOX_LEDGER__TOKEN"],
    );
    let missing = s.dir.path().join("absent.toml");
    refused(
        &outbox(&["--config", path(&missing), "config", "show"], &[]),
        &[path(&missing)],
    );
    // A command that needs a value nobody gave names the key and its variable.
    refused(
        &outbox(&["relay", "--once"], &[]),
        &["`database`", "OUTBOX_DATABASE"],
    );
    // The variables of the test suite itself are not configuration.
    let show = outbox(&["config", "show"], &[("OUTBOX_TEST_REQUIRE", "1")]);
    assert!(show.status.success(), "{}", stderr(&show));
}

#[test]
fn config_show_redacts_every_secret_and_shows_secret_files_by_path() {
    let s = Setup::new();
    let secret_file = s.file("webhook-secret", "whsec-file-secret\n");
    let config = s.file(
        "outbox.toml",
        &format!(
            r#"database = "postgres://app:hunter2@127.0.0.1:5432/payouts"
[ledger]
token = "tok-inline-secret"
[fanout]
secret_file = "{}"
to = ["amqp://guest:amqp-pass@127.0.0.1:5672/%2f?exchange=x"]
"#,
            path(&secret_file)
        ),
    );
    let env = [("OUTBOX_FANOUT__PUBLISH_SECRET", "pub-env-secret")];
    let text = stdout(&outbox(
        &["--config", path(&config), "config", "show"],
        &env,
    ));
    for secret in [
        "hunter2",
        "tok-inline-secret",
        "whsec-file-secret",
        "amqp-pass",
        "pub-env-secret",
    ] {
        assert!(!text.contains(secret), "{secret} shown in:\n{text}");
    }
    assert!(text.contains("ledger.token = \"REDACTED\""), "{text}");
    assert!(
        text.contains("fanout.publish_secret = \"REDACTED\"  # OUTBOX_FANOUT__PUBLISH_SECRET"),
        "{text}"
    );
    assert!(
        text.contains("postgres://app:REDACTED@127.0.0.1:5432/payouts"),
        "{text}"
    );
    assert!(text.contains(path(&secret_file)), "{text}");
    assert!(
        text.contains(&format!("# configuration file: {}", path(&config))),
        "{text}"
    );
}

/// What the recording front of the ledger saw.
#[derive(Default)]
struct Seen {
    authorizations: Vec<String>,
    token_forms: Vec<BTreeMap<String, String>>,
}

#[derive(Clone)]
struct Front {
    seen: Arc<Mutex<Seen>>,
    ledger: String,
}

/// An OAuth2 token endpoint and, in front of the dev ledger, a proxy that records the
/// `Authorization` header and refuses requests without the issued token.
async fn token(State(front): State<Front>, Form(form): Form<BTreeMap<String, String>>) -> Response {
    front.seen.lock().unwrap().token_forms.push(form);
    axum::Json(serde_json::json!({"access_token": "issued-token", "token_type": "Bearer", "expires_in": 3600}))
        .into_response()
}

async fn proxy(State(front): State<Front>, request: Request) -> Response {
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    front
        .seen
        .lock()
        .unwrap()
        .authorizations
        .push(authorization.clone());
    let uri = request.uri().clone();
    let method = request.method().clone();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 1 << 24)
        .await
        .unwrap();
    let mut forwarded = reqwest::Client::new().request(method, format!("{}{}", front.ledger, uri));
    for (name, value) in &headers {
        if name != "host" && name != "authorization" && name != "content-length" {
            forwarded = forwarded.header(name, value);
        }
    }
    let answer = forwarded.body(body).send().await.unwrap();
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
    let mut response = Response::builder().status(status);
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    response
        .body(axum::body::Body::from(answer.bytes().await.unwrap()))
        .unwrap()
}

async fn front(ledger: &RunningDevLedger) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let front = Front {
        seen: Arc::default(),
        ledger: ledger.url(),
    };
    let seen = front.seen.clone();
    let app = Router::new()
        .route("/oauth/token", post(token))
        .fallback(proxy)
        .with_state(front);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_reads_its_token_from_a_file_or_uses_oauth2_client_credentials() {
    let s = Setup::new();
    let ledger = dev_ledger().await;
    let (addr, seen) = front(&ledger).await;
    let token_file = s.file("ledger-token", "tok-from-file\n");
    let with_token = s.file(
        "token.toml",
        &format!(
            "database = \"{}\"\n[ledger]\nurl = \"http://{addr}\"\nname = \"{LEDGER}\"\ntoken_file = \"{}\"\n",
            s.database,
            path(&token_file)
        ),
    );
    let out = outbox(&["--config", path(&with_token), "relay", "--once"], &[]);
    assert!(
        stdout(&out).contains("accepted 1,"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    {
        let seen = seen.lock().unwrap();
        assert!(!seen.authorizations.is_empty());
        assert!(
            seen.authorizations
                .iter()
                .all(|a| a == "Bearer tok-from-file"),
            "{:?}",
            seen.authorizations
        );
    }

    // OAuth2: the client secret from a file, the token fetched from the endpoint and
    // presented to the ledger (another outbox: a relay of a new name refuses this one).
    let s = Setup::new();
    let client_secret = s.file("client-secret", "cs-from-file\n");
    let with_oauth = s.file(
        "oauth.toml",
        &format!(
            "database = \"{}\"\n[ledger]\nurl = \"http://{addr}\"\nname = \"{LEDGER}\"\n[ledger.oauth2]\ntoken_url = \"http://{addr}/oauth/token\"\nclient_id = \"relay-client\"\nclient_secret_file = \"{}\"\nscopes = [\"ledger:write\"]\n",
            s.database,
            path(&client_secret)
        ),
    );
    seen.lock().unwrap().authorizations.clear();
    let out = outbox(
        &[
            "--config",
            path(&with_oauth),
            "relay",
            "--once",
            "--name",
            "oauth",
        ],
        &[],
    );
    assert!(
        stdout(&out).contains("accepted 1,"),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    {
        let seen = seen.lock().unwrap();
        let form = seen.token_forms.last().expect("a token request");
        assert_eq!(
            form.get("grant_type").map(String::as_str),
            Some("client_credentials")
        );
        assert_eq!(
            form.get("client_id").map(String::as_str),
            Some("relay-client")
        );
        assert_eq!(
            form.get("client_secret").map(String::as_str),
            Some("cs-from-file")
        );
        assert_eq!(form.get("scope").map(String::as_str), Some("ledger:write"));
        assert!(
            seen.authorizations
                .iter()
                .all(|a| a == "Bearer issued-token"),
            "{:?}",
            seen.authorizations
        );
        assert!(!seen.authorizations.is_empty());
    }

    // A token and OAuth2 at once is refused, naming both.
    let both = s.file(
        "both.toml",
        &format!(
            "database = \"{}\"\n[ledger]\nurl = \"http://{addr}\"\nname = \"{LEDGER}\"\ntoken = \"t\"\n[ledger.oauth2]\ntoken_url = \"http://{addr}/oauth/token\"\nclient_id = \"c\"\nclient_secret = \"s\"\n",
            s.database
        ),
    );
    let out = outbox(&["--config", path(&both), "relay", "--once"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`ledger.token` and `ledger.oauth2`"),
        "{}",
        stderr(&out)
    );
    ledger.shutdown().await;
}

/// `outbox.example.toml` at the repository root loads, and documents every key.
#[test]
fn the_example_configuration_is_valid_and_names_every_key() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../outbox.example.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let loaded = shown(&outbox(
        &["--config", path(&example), "config", "show", "--json"],
        &[],
    ));
    let defaults = shown(&outbox(&["config", "show", "--json"], &[]));
    assert_eq!(
        loaded.keys().collect::<Vec<_>>(),
        defaults.keys().collect::<Vec<_>>()
    );
    // Every key appears in its section, set or commented out (`# key = …`).
    let mut section = String::new();
    let mut documented = std::collections::BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
        } else if let Some((key, _)) = line.split_once(" = ") {
            let key = key.trim();
            if !key.contains(' ') {
                documented.insert(if section.is_empty() {
                    key.to_owned()
                } else {
                    format!("{section}.{key}")
                });
            }
        }
    }
    let oauth_keys = [
        "token_url",
        "client_id",
        "client_secret",
        "client_secret_file",
        "scopes",
    ]
    .map(|k| format!("ledger.oauth2.{k}"));
    for key in defaults
        .keys()
        .map(String::as_str)
        .chain(oauth_keys.iter().map(String::as_str))
    {
        if key == "ledger.oauth2" {
            continue;
        }
        assert!(
            documented.contains(key),
            "{key} is not in outbox.example.toml"
        );
    }
}
