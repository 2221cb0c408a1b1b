//! `PgConfig`: which database and schema, and how the pool and partitions behave.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use outbox_core::{Error, Result};
use sqlx::postgres::PgConnectOptions;

/// How to reach the outbox database.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `url` | — | `postgres://user:password@host:port/database`; the password never appears in `Debug` |
/// | `schema` | none (server default search_path) | schema of the outbox tables: every pooled connection gets `search_path=<schema>`, and `migrate` creates it |
/// | `application_name` | `outbox-store-postgres` | shown in `pg_stat_activity`, so a stalled horizon can be traced to a process |
/// | `max_connections` | 10 | pool size; the LISTEN task of a running relay keeps one of them |
/// | `acquire_timeout` | 5 s | pool wait before a transient error |
/// | `partition_days_ahead` | 7 | daily partitions kept ready beyond today (and yesterday's) |
/// | `partition_maintenance_interval` | 6 h | how often a running relay re-checks them |
/// | `partition_lock_timeout` | 5 s | how long creating a partition may wait for its table locks |
#[derive(Clone, PartialEq, Eq)]
pub struct PgConfig {
    pub url: String,
    pub schema: Option<String>,
    pub application_name: String,
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    pub partition_days_ahead: u32,
    pub partition_maintenance_interval: Duration,
    pub partition_lock_timeout: Duration,
}

impl PgConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: None,
            application_name: "outbox-store-postgres".to_owned(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5),
            partition_days_ahead: 7,
            partition_maintenance_interval: Duration::from_secs(6 * 3600),
            partition_lock_timeout: Duration::from_secs(5),
        }
    }

    /// Parses and checks a `postgres://` (or `postgresql://`) URL.
    pub fn from_url(url: &str) -> Result<Self> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(Error::invalid(
                "database",
                format!("{} is not a postgres:// URL", redact(url)),
            ));
        }
        let config = Self::new(url);
        config.connect_options()?;
        Ok(config)
    }

    /// Puts the outbox tables in `schema` (created by `migrate` if missing).
    #[must_use]
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The connection options every pooled connection uses, `search_path` included.
    ///
    /// # Errors
    /// `InvalidInput` naming `database` (unparsable URL) or `schema` (not a plain
    /// lower-case identifier).
    pub fn connect_options(&self) -> Result<PgConnectOptions> {
        let mut options = PgConnectOptions::from_str(&self.url)
            .map_err(|e| Error::invalid("database", format!("{}: {e}", redact(&self.url))))?
            .application_name(&self.application_name);
        if let Some(schema) = self.schema.as_deref() {
            check_schema(schema)?;
            // A startup parameter rather than a SET after connecting: it costs no round
            // trip and also holds for the LISTEN connection and for reconnects.
            options = options.options([("search_path", schema)]);
        }
        Ok(options)
    }
}

/// Accepts only plain lower-case identifiers, so the name needs no quoting anywhere
/// (startup options, `CREATE SCHEMA`, the migrations table name).
pub(crate) fn check_schema(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let plain = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && schema.len() <= 63;
    if plain && !schema.starts_with("pg_") {
        Ok(())
    } else {
        Err(Error::invalid(
            "schema",
            format!(
                "{schema:?} must be 1 to 63 characters of a-z, 0-9 and _, not starting with a digit or pg_"
            ),
        ))
    }
}

/// The URL with its password replaced, for messages and `Debug`.
pub(crate) fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| authority_start + i);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let userinfo = &out[authority_start..authority_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(
                    authority_start + colon + 1..authority_start + at,
                    "********",
                );
            }
        }
    }
    if let Some(query_start) = out.find('?') {
        let (head, query) = out.split_at(query_start + 1);
        let query = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                    format!("{key}=********")
                }
                _ => pair.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&");
        out = format!("{head}{query}");
    }
    out
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &redact(&self.url))
            .field("schema", &self.schema)
            .field("application_name", &self.application_name)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("partition_days_ahead", &self.partition_days_ahead)
            .field(
                "partition_maintenance_interval",
                &self.partition_maintenance_interval,
            )
            .field("partition_lock_timeout", &self.partition_lock_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_passwords() {
        let config = PgConfig::new("postgres://app:s3cret@db:5432/pay?sslmode=disable&password=x");
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("password=x"), "{shown}");
        assert!(
            shown.contains("postgres://app:********@db:5432/pay"),
            "{shown}"
        );
    }

    #[test]
    fn bad_inputs_name_their_field() {
        let err = PgConfig::from_url("mysql://x").unwrap_err();
        assert_eq!(err.field(), Some("database"));
        let err = PgConfig::new("postgres://localhost/db")
            .with_schema("Robert'); DROP TABLE x;--")
            .connect_options()
            .unwrap_err();
        assert_eq!(err.field(), Some("schema"));
        assert!(check_schema("outbox_t_01").is_ok());
        assert!(check_schema("pg_catalog").is_err());
        assert!(check_schema("1abc").is_err());
    }
}
