//! `CdcConfig`: which database, slot, publication and cursor the CDC relay uses.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use outbox_core::{Error, ErrorKind, Result};
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// Default for [`CdcConfig::slot`].
pub const DEFAULT_SLOT: &str = "outbox_cdc";
/// Default for [`CdcConfig::publication`].
pub const DEFAULT_PUBLICATION: &str = "outbox_cdc";
/// Default for [`CdcConfig::relay`].
pub const DEFAULT_RELAY: &str = "cdc";
/// Default for [`CdcConfig::schema`].
pub const DEFAULT_SCHEMA: &str = "public";
/// Default for [`CdcConfig::table`].
pub const DEFAULT_TABLE: &str = "outbox_events";
/// Default for [`CdcConfig::cursor_table`].
pub const DEFAULT_CURSOR_TABLE: &str = "relay_cursors";
/// Default for [`CdcConfig::max_batch`].
pub const DEFAULT_MAX_BATCH: usize = 1_000;
/// Default for [`CdcConfig::max_buffered`].
pub const DEFAULT_MAX_BUFFERED: usize = 10_000;
/// Default for [`CdcConfig::status_interval_ms`].
pub const DEFAULT_STATUS_INTERVAL_MS: u64 = 1_000;
/// Default for [`CdcConfig::idle_confirm_interval_ms`].
pub const DEFAULT_IDLE_CONFIRM_INTERVAL_MS: u64 = 10_000;
/// Default for [`CdcConfig::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Default for [`CdcConfig::slot_busy_timeout_ms`].
pub const DEFAULT_SLOT_BUSY_TIMEOUT_MS: u64 = 15_000;

/// How the CDC relay reaches PostgreSQL and where it keeps its state.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `url` | — | `postgres://user:password@host:port/db`; the role needs `REPLICATION` (or superuser) |
/// | `slot` | `outbox_cdc` | logical replication slot (`[a-z0-9_]{1,63}`), plugin `pgoutput` |
/// | `publication` | `outbox_cdc` | publication of the outbox table (`[a-z0-9_]{1,63}`) |
/// | `relay` | `cdc` | relay name: the key of its row in the cursor table |
/// | `schema` | `public` | schema of the outbox and cursor tables |
/// | `table` | `outbox_events` | the outbox table (partitioned: published via its root) |
/// | `cursor_table` | `relay_cursors` | where positions are made durable |
/// | `create_missing` | `true` | create the publication and slot at start when absent |
/// | `max_batch` | 1000 | most events one `next_batch` returns, whatever the caller asks |
/// | `max_buffered` | 10000 | decoded events held ahead of the caller before reading pauses |
/// | `status_interval_ms` | 1000 | most time before an acknowledged position reaches the slot |
/// | `idle_confirm_interval_ms` | 10000 | while caught up, how often the slot is moved past unrelated WAL |
/// | `connect_timeout_ms` | 10000 | connecting and starting the replication stream |
/// | `slot_busy_timeout_ms` | 15000 | how long to wait for a slot still held by a previous session |
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdcConfig {
    pub url: String,
    #[serde(default = "default_slot")]
    pub slot: String,
    #[serde(default = "default_publication")]
    pub publication: String,
    #[serde(default = "default_relay")]
    pub relay: String,
    #[serde(default = "default_schema")]
    pub schema: String,
    #[serde(default = "default_table")]
    pub table: String,
    #[serde(default = "default_cursor_table")]
    pub cursor_table: String,
    /// Off where the relay's role may not create objects: a DBA creates them once.
    #[serde(default = "default_true")]
    pub create_missing: bool,
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    #[serde(default = "default_max_buffered")]
    pub max_buffered: usize,
    #[serde(default = "default_status_interval_ms")]
    pub status_interval_ms: u64,
    #[serde(default = "default_idle_confirm_interval_ms")]
    pub idle_confirm_interval_ms: u64,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_slot_busy_timeout_ms")]
    pub slot_busy_timeout_ms: u64,
}

fn default_slot() -> String {
    DEFAULT_SLOT.to_owned()
}
fn default_publication() -> String {
    DEFAULT_PUBLICATION.to_owned()
}
fn default_relay() -> String {
    DEFAULT_RELAY.to_owned()
}
fn default_schema() -> String {
    DEFAULT_SCHEMA.to_owned()
}
fn default_table() -> String {
    DEFAULT_TABLE.to_owned()
}
fn default_cursor_table() -> String {
    DEFAULT_CURSOR_TABLE.to_owned()
}
fn default_true() -> bool {
    true
}
fn default_max_batch() -> usize {
    DEFAULT_MAX_BATCH
}
fn default_max_buffered() -> usize {
    DEFAULT_MAX_BUFFERED
}
fn default_status_interval_ms() -> u64 {
    DEFAULT_STATUS_INTERVAL_MS
}
fn default_idle_confirm_interval_ms() -> u64 {
    DEFAULT_IDLE_CONFIRM_INTERVAL_MS
}
fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}
fn default_slot_busy_timeout_ms() -> u64 {
    DEFAULT_SLOT_BUSY_TIMEOUT_MS
}

/// Where the replication connection goes: the parts of `url` the replication client needs.
#[derive(Clone)]
pub(crate) struct ReplicationTarget {
    /// A host name, or a Unix socket directory (starting with `/`).
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
}

impl CdcConfig {
    /// A configuration with every default except the URL.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            slot: default_slot(),
            publication: default_publication(),
            relay: default_relay(),
            schema: default_schema(),
            table: default_table(),
            cursor_table: default_cursor_table(),
            create_missing: true,
            max_batch: DEFAULT_MAX_BATCH,
            max_buffered: DEFAULT_MAX_BUFFERED,
            status_interval_ms: DEFAULT_STATUS_INTERVAL_MS,
            idle_confirm_interval_ms: DEFAULT_IDLE_CONFIRM_INTERVAL_MS,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            slot_busy_timeout_ms: DEFAULT_SLOT_BUSY_TIMEOUT_MS,
        }
    }

    pub fn status_interval(&self) -> Duration {
        Duration::from_millis(self.status_interval_ms)
    }

    pub fn idle_confirm_interval(&self) -> Duration {
        Duration::from_millis(self.idle_confirm_interval_ms)
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn slot_busy_timeout(&self) -> Duration {
        Duration::from_millis(self.slot_busy_timeout_ms)
    }

    /// Checks every field; errors name it.
    pub fn validate(&self) -> Result<()> {
        // Both names go unquoted into START_REPLICATION, and pgoutput lower-cases the
        // publication names it is given: only plain lower-case identifiers are safe.
        for (field, value) in [("slot", &self.slot), ("publication", &self.publication)] {
            if !is_plain_identifier(value) {
                return Err(config_error(
                    field,
                    format!("{value:?} must match [a-z0-9_]{{1,63}}"),
                ));
            }
        }
        for (field, value) in [
            ("relay", &self.relay),
            ("schema", &self.schema),
            ("table", &self.table),
            ("cursor_table", &self.cursor_table),
        ] {
            if value.is_empty() || value.len() > 63 {
                return Err(config_error(field, "must be 1 to 63 bytes long"));
            }
        }
        for (field, value) in [
            ("max_batch", self.max_batch as u64),
            ("max_buffered", self.max_buffered as u64),
            ("status_interval_ms", self.status_interval_ms),
            ("idle_confirm_interval_ms", self.idle_confirm_interval_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
        ] {
            if value == 0 {
                return Err(config_error(field, "must be greater than 0"));
            }
        }
        self.connect_options()?;
        self.replication_target()?;
        Ok(())
    }

    /// Options for the control connection (cursor, slot and publication queries).
    pub(crate) fn connect_options(&self) -> Result<PgConnectOptions> {
        let options = PgConnectOptions::from_str(&self.url).map_err(|e| {
            config_error(
                "url",
                format!("not a PostgreSQL URL ({}): {e}", redact(&self.url)),
            )
        })?;
        // The replication client is built without TLS, like sqlx in this workspace:
        // refuse a URL that demands it rather than silently connect in clear text.
        match options.get_ssl_mode() {
            PgSslMode::Disable | PgSslMode::Allow | PgSslMode::Prefer => Ok(options),
            mode => Err(config_error(
                "url",
                format!(
                    "sslmode {mode:?} is not supported: ledger-outbox is built without TLS for PostgreSQL"
                ),
            )),
        }
    }

    /// Host, port, user, password and database for the replication connection, read
    /// the same way as for the control connection so both reach the same server.
    pub(crate) fn replication_target(&self) -> Result<ReplicationTarget> {
        let options = self.connect_options()?;
        let parsed = url::Url::parse(&self.url).map_err(|e| {
            config_error(
                "url",
                format!("not a PostgreSQL URL ({}): {e}", redact(&self.url)),
            )
        })?;
        let password = match parsed.password() {
            Some(p) => percent_decode(p)?,
            None => String::new(),
        };
        let host = match options.get_socket() {
            Some(dir) => dir.to_string_lossy().into_owned(),
            None => options.get_host().to_owned(),
        };
        let user = options.get_username().to_owned();
        let database = options
            .get_database()
            .map_or_else(|| user.clone(), str::to_owned);
        Ok(ReplicationTarget {
            host,
            port: options.get_port(),
            user,
            password,
            database,
        })
    }
}

impl fmt::Debug for CdcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CdcConfig")
            .field("url", &redact(&self.url))
            .field("slot", &self.slot)
            .field("publication", &self.publication)
            .field("relay", &self.relay)
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("cursor_table", &self.cursor_table)
            .field("create_missing", &self.create_missing)
            .field("max_batch", &self.max_batch)
            .field("max_buffered", &self.max_buffered)
            .field("status_interval_ms", &self.status_interval_ms)
            .field("idle_confirm_interval_ms", &self.idle_confirm_interval_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("slot_busy_timeout_ms", &self.slot_busy_timeout_ms)
            .finish()
    }
}

impl fmt::Debug for ReplicationTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &"***")
            .field("database", &self.database)
            .finish()
    }
}

/// The URL with its password replaced, for messages and `Debug`.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

fn is_plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| config_error("url", "the password is not UTF-8"))
}

fn config_error(field: &str, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message).with("field", field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_target() {
        let config = CdcConfig::new("postgres://relay:s%40cret@db.local:6543/payments");
        config.validate().unwrap();
        let target = config.replication_target().unwrap();
        assert_eq!(target.host, "db.local");
        assert_eq!(target.port, 6543);
        assert_eq!(target.user, "relay");
        assert_eq!(target.password, "s@cret");
        assert_eq!(target.database, "payments");
        let debug = format!("{config:?}");
        assert!(!debug.contains("cret"), "{debug}");
    }

    #[test]
    fn unknown_fields_and_bad_names_are_refused() {
        let err = serde_json::from_str::<CdcConfig>(r#"{"url":"postgres://x/y","slots":"a"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let mut config = CdcConfig::new("postgres://x/y");
        config.slot = "Outbox-Slot".into();
        let err = config.validate().unwrap_err();
        assert_eq!(err.context("field"), Some("slot"));
        let mut config = CdcConfig::new("postgres://x/y?sslmode=require");
        config.slot = "ok".into();
        assert_eq!(config.validate().unwrap_err().kind(), &ErrorKind::Config);
    }
}
