//! One configuration model for every command.
//!
//! Each value comes from, in rising precedence: the defaults below, the TOML file
//! named by `--config` or `OUTBOX_CONFIG`, `OUTBOX_`-prefixed environment variables
//! (nested keys joined by `__`: `OUTBOX_RELAY__BATCH_SIZE`), and the command's flags.
//! `outbox config show` prints the result with the source of each value and secrets
//! redacted; an unknown key or a bad value is an error naming the key and where it
//! came from. `outbox.example.toml` at the repository root documents every key.
//!
//! Secrets (ledger token, OAuth2 client secret, webhook secrets, database passwords)
//! can also be read from a file (`…_file`), so they need appear neither in a flag
//! (visible to every user through `ps`) nor in the file itself.

mod ledger;
mod load;
mod secret;
mod show;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use load::{ConfigSource, Loaded, load};
pub use secret::resolve_secret;
pub use show::{redact_url, show};

/// The whole configuration. Every section has a default, so an empty file is valid.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The outbox database: `sqlite://PATH` or `postgres://…[?schema=NAME]`.
    pub database: Option<String>,
    /// The outbox database's password, read from this file (postgres:// only).
    pub database_password_file: Option<PathBuf>,
    pub ledger: LedgerSettings,
    pub relay: RelaySettings,
    pub fanout: FanoutSettings,
    pub consume: ConsumeSettings,
    pub admin: AdminSettings,
    pub log: LogSettings,
}

/// Where the Formance ledger is and how to authenticate (relay, catch-up, audit,
/// reconciliation, checks).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerSettings {
    /// Formance API root without `/v2`, e.g. `http://127.0.0.1:3068`.
    pub url: Option<String>,
    /// The ledger's name.
    pub name: Option<String>,
    /// A static bearer token.
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    /// OAuth2 client credentials instead of a static token.
    pub oauth2: Option<OAuth2Settings>,
    /// One request's time limit, in milliseconds.
    pub request_timeout_ms: u64,
}

impl Default for LedgerSettings {
    fn default() -> Self {
        Self {
            url: None,
            name: None,
            token: None,
            token_file: None,
            oauth2: None,
            request_timeout_ms: 30_000,
        }
    }
}

/// The Formance stack's client-credentials flow.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuth2Settings {
    /// Token endpoint, e.g. `https://stack.example.com/api/auth/oauth/token`.
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub client_secret_file: Option<PathBuf>,
    /// Sent space-separated as `scope`; omitted when empty.
    pub scopes: Vec<String>,
}

/// `outbox relay`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelaySettings {
    /// Name of this relay; its cursor is kept under this name.
    pub name: String,
    /// Events read per batch.
    pub batch_size: usize,
    /// Post in bulk (`false`: one event per request).
    pub bulk: bool,
    /// Ledger requests in flight at once.
    pub parallel: usize,
    /// Longest idle wait between polls, in milliseconds.
    pub poll_interval_ms: u64,
    /// Give up on an event after this many transient failures (default: 30 with
    /// `--once`, never otherwise).
    pub max_attempts: Option<u32>,
    /// Read the outbox through PostgreSQL logical replication instead of polling.
    pub cdc: bool,
    /// Run as one of several members sharing this many partitions (PostgreSQL).
    pub partitions: Option<u32>,
    /// With `partitions`: how often ownership is checked, in milliseconds.
    pub partition_check_ms: u64,
    /// Create the ledger if it does not exist.
    pub create_ledger: bool,
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            name: "relay".to_owned(),
            batch_size: 500,
            bulk: true,
            parallel: 8,
            poll_interval_ms: 1000,
            max_attempts: None,
            cdc: false,
            partitions: None,
            partition_check_ms: 500,
            create_ledger: false,
        }
    }
}

/// `outbox fanout`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FanoutSettings {
    /// The fan-out store: `sqlite://PATH` or `postgres://…[?schema=NAME]`.
    pub database: Option<String>,
    pub database_password_file: Option<PathBuf>,
    /// Where the ledger POSTs its webhooks (path `/webhooks/ledger`).
    pub listen: SocketAddr,
    /// The ledger's webhook secret.
    pub secret: Option<String>,
    pub secret_file: Option<PathBuf>,
    /// During a rotation, the secret being replaced.
    pub previous_secret: Option<String>,
    pub previous_secret_file: Option<PathBuf>,
    /// Oldest signature timestamp accepted, in seconds.
    pub tolerance_secs: u64,
    /// The destinations, each with its own cursor.
    pub to: Vec<String>,
    /// Our own signing secret for HTTP destinations.
    pub publish_secret: Option<String>,
    pub publish_secret_file: Option<PathBuf>,
    /// Messages read and sent per round (RabbitMQ and HTTP destinations).
    pub batch_size: usize,
    /// The same for Kafka destinations.
    pub pipelined_batch_size: usize,
    /// Longest idle wait between polls of the store, in milliseconds.
    pub poll_interval_ms: u64,
    /// Catch up from the ledger's log (needs `ledger.url` and `ledger.name`).
    pub catch_up: bool,
    /// Seconds between two catch-ups.
    pub catch_up_interval_secs: u64,
    /// Log entries younger than this are left to their webhooks until a later run.
    pub catch_up_settle_secs: u64,
}

impl Default for FanoutSettings {
    fn default() -> Self {
        Self {
            database: None,
            database_password_file: None,
            listen: ([127, 0, 0, 1], 8091).into(),
            secret: None,
            secret_file: None,
            previous_secret: None,
            previous_secret_file: None,
            tolerance_secs: 300,
            to: Vec::new(),
            publish_secret: None,
            publish_secret_file: None,
            batch_size: 1000,
            pipelined_batch_size: 5000,
            poll_interval_ms: 500,
            catch_up: false,
            catch_up_interval_secs: 60,
            catch_up_settle_secs: 10,
        }
    }
}

/// `outbox consume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumeSettings {
    /// The source: `kafka://…`, `amqp://…` or `http://LISTEN_ADDR`.
    pub from: Option<String>,
    /// The consumer database (inbox + treasury table).
    pub database: Option<String>,
    pub database_password_file: Option<PathBuf>,
    /// The consumer's name: its inbox and, on Kafka, its consumer group.
    pub name: String,
    /// Secret of an `http://` source (the fan-out's publish secret).
    pub secret: Option<String>,
    pub secret_file: Option<PathBuf>,
    /// Raise a gap alarm when a held message waits longer than this, in seconds.
    pub gap_alarm_secs: u64,
}

impl Default for ConsumeSettings {
    fn default() -> Self {
        Self {
            from: None,
            database: None,
            database_password_file: None,
            name: "treasury".to_owned(),
            secret: None,
            secret_file: None,
            gap_alarm_secs: 300,
        }
    }
}

/// The admin endpoints (`/metrics`, `/healthz`, `/readyz`) of long-running commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// Off unless set.
    pub listen: Option<SocketAddr>,
    /// How often the gauges read from the database are sampled, in milliseconds.
    pub sample_interval_ms: u64,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            listen: None,
            sample_interval_ms: 5000,
        }
    }
}

impl AdminSettings {
    pub fn sample_interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.sample_interval_ms.max(10))
    }
}

/// Logging on standard error.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// `text` (colours only on a terminal) or `json` (one object per line).
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `outbox_core=debug,warn`
    /// (`OUTBOX_LOG`); default `warn`.
    pub level: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Settings {
    /// The outbox database URL, with its password file applied.
    pub fn outbox_database(&self) -> outbox_core::Result<String> {
        database_url(
            "database",
            self.database.as_deref(),
            self.database_password_file.as_deref(),
        )
    }

    /// The fan-out store's URL.
    pub fn fanout_database(&self) -> outbox_core::Result<String> {
        database_url(
            "fanout.database",
            self.fanout.database.as_deref(),
            self.fanout.database_password_file.as_deref(),
        )
    }

    /// The consumer database's URL.
    pub fn consume_database(&self) -> outbox_core::Result<String> {
        database_url(
            "consume.database",
            self.consume.database.as_deref(),
            self.consume.database_password_file.as_deref(),
        )
    }
}

/// `url` with the password read from `password_file` (PostgreSQL URLs only).
fn database_url(
    key: &str,
    url: Option<&str>,
    password_file: Option<&std::path::Path>,
) -> outbox_core::Result<String> {
    let url = required(key, url)?;
    let Some(file) = password_file else {
        return Ok(url.to_owned());
    };
    let password_key = format!("{key}_password_file");
    let mut parsed = url::Url::parse(url)
        .map_err(|e| outbox_core::Error::invalid(key, format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(outbox_core::Error::invalid(
            &password_key,
            "a password file applies to postgres:// databases only",
        ));
    }
    let password = secret::read_secret_file(&password_key, file)?;
    parsed
        .set_password(Some(&password))
        .map_err(|()| outbox_core::Error::invalid(key, "this URL cannot carry a password"))?;
    Ok(parsed.into())
}

/// A value a command cannot run without.
pub fn required<'a>(key: &str, value: Option<&'a str>) -> outbox_core::Result<&'a str> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| {
        outbox_core::Error::new(
            outbox_core::ErrorKind::Config,
            format!(
                "`{key}` is not set: give it as a flag, as {} or in the configuration file",
                load::env_name(key)
            ),
        )
        .with("key", key)
    })
}

static CURRENT: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();

/// Makes `settings` the process's configuration (once, at start), for the commands
/// whose flags fall back to it.
pub fn install(settings: Settings) {
    let _ = CURRENT.set(settings);
}

/// The process's configuration (the defaults before [`install`]).
pub fn current() -> Settings {
    CURRENT.get().cloned().unwrap_or_default()
}

/// `flag`, else the configured outbox database.
pub fn outbox_database(flag: Option<&str>) -> outbox_core::Result<String> {
    match flag {
        Some(url) => Ok(url.to_owned()),
        None => current().outbox_database(),
    }
}

/// `flag`, else the configured fan-out store.
pub fn fanout_database(flag: Option<&str>) -> outbox_core::Result<String> {
    match flag {
        Some(url) => Ok(url.to_owned()),
        None => current().fanout_database(),
    }
}

/// `flag`, else the configured consumer database.
pub fn consume_database(flag: Option<&str>) -> outbox_core::Result<String> {
    match flag {
        Some(url) => Ok(url.to_owned()),
        None => current().consume_database(),
    }
}

/// The configured `[ledger]` with `flags` over it (a flag wins over its key; a token
/// flag replaces a configured token file, and the other way round).
pub fn ledger_with(flags: &crate::cli::LedgerArgs) -> LedgerSettings {
    let mut ledger = current().ledger;
    if let Some(url) = &flags.url {
        ledger.url = Some(url.clone());
    }
    if let Some(name) = &flags.name {
        ledger.name = Some(name.clone());
    }
    if let Some(token) = &flags.token {
        ledger.token = Some(token.clone());
        ledger.token_file = None;
    }
    if let Some(file) = &flags.token_file {
        ledger.token_file = Some(file.clone());
        ledger.token = None;
    }
    if let Some(timeout) = flags.request_timeout_ms {
        ledger.request_timeout_ms = timeout;
    }
    ledger
}
