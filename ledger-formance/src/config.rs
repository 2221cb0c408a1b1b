//! Configuration of the Formance adapter: where the ledger is, how to authenticate,
//! timeouts and bulk size; and the webhook verification settings.
//!
//! Every struct refuses unknown fields, so a typo in a TOML file is an error instead
//! of a silently ignored setting. The `Debug` impls are written by hand so that no
//! secret ever reaches a log line.

use std::fmt;
use std::time::Duration;

use outbox_core::{Error, ErrorKind, Result};
use reqwest::Url;
use serde::Deserialize;

/// A secret string (token, client secret, webhook secret): never printed.
///
/// Deliberately has no `Display`; `Debug` prints `Secret(***)`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that must send or use it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// Default for [`FormanceConfig::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default for [`FormanceConfig::request_timeout_ms`].
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Default for [`FormanceConfig::bulk_max_size`]: Formance's own `--bulk-max-size` default.
pub const DEFAULT_BULK_MAX_SIZE: usize = 100;
/// Default for [`OAuth2Config::refresh_margin_ms`].
pub const DEFAULT_REFRESH_MARGIN_MS: u64 = 30_000;
/// Default for [`WebhookConfig::tolerance_secs`]: five minutes either way.
pub const DEFAULT_WEBHOOK_TOLERANCE_SECS: u64 = 300;

/// How to reach one Formance ledger.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormanceConfig {
    /// Root of the ledger API without `/v2`, e.g. `http://127.0.0.1:3068` or a
    /// gateway prefix such as `https://stack.example.com/api/ledger`.
    pub base_url: String,
    /// Ledger name (`^[0-9a-zA-Z_-]{1,63}$`).
    pub ledger: String,
    #[serde(default)]
    pub auth: AuthConfig,
    /// TCP + TLS connect timeout.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Whole-request timeout, body included. A timeout is transient: every write
    /// carries an idempotency key, so the retry replays instead of posting twice.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Most elements per `_bulk` call; larger batches are split. Must not exceed
    /// the server's `--bulk-max-size` (413 `BULK_SIZE_EXCEEDED` otherwise).
    #[serde(default = "default_bulk_max_size")]
    pub bulk_max_size: usize,
    /// `POST /v2/{ledger}` at connect; an existing ledger is fine.
    #[serde(default)]
    pub create_ledger_if_missing: bool,
}

fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

fn default_request_timeout_ms() -> u64 {
    DEFAULT_REQUEST_TIMEOUT_MS
}

fn default_bulk_max_size() -> usize {
    DEFAULT_BULK_MAX_SIZE
}

impl FormanceConfig {
    /// A configuration with every default: no auth, 5 s connect, 30 s request, bulk of 100.
    pub fn new(base_url: impl Into<String>, ledger: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            ledger: ledger.into(),
            auth: AuthConfig::None,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            bulk_max_size: DEFAULT_BULK_MAX_SIZE,
            create_ledger_if_missing: false,
        }
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Checks every field and returns the parsed base URL; errors name the field.
    pub fn validate(&self) -> Result<Url> {
        let base = parse_http_url("base_url", &self.base_url)?;
        if !is_ledger_name(&self.ledger) {
            return Err(config_error(
                "ledger",
                format!(
                    "{:?} is not a Formance ledger name (^[0-9a-zA-Z_-]{{1,63}}$)",
                    self.ledger
                ),
            ));
        }
        if self.connect_timeout_ms == 0 {
            return Err(config_error("connect_timeout_ms", "must be greater than 0"));
        }
        if self.request_timeout_ms == 0 {
            return Err(config_error("request_timeout_ms", "must be greater than 0"));
        }
        if self.bulk_max_size == 0 {
            return Err(config_error("bulk_max_size", "must be at least 1"));
        }
        self.auth.validate()?;
        Ok(base)
    }
}

impl fmt::Debug for FormanceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured so that a new field cannot be added without deciding here
        // whether it may be printed.
        let Self {
            base_url,
            ledger,
            auth,
            connect_timeout_ms,
            request_timeout_ms,
            bulk_max_size,
            create_ledger_if_missing,
        } = self;
        f.debug_struct("FormanceConfig")
            .field("base_url", base_url)
            .field("ledger", ledger)
            .field("auth", auth)
            .field("connect_timeout_ms", connect_timeout_ms)
            .field("request_timeout_ms", request_timeout_ms)
            .field("bulk_max_size", bulk_max_size)
            .field("create_ledger_if_missing", create_ledger_if_missing)
            .finish()
    }
}

/// How requests to the ledger authenticate.
#[derive(Clone, Default, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthConfig {
    /// No `Authorization` header (a local or in-cluster ledger).
    #[default]
    None,
    /// A static `Authorization: Bearer <token>`.
    Bearer { token: Secret },
    /// OAuth2 client credentials (the Formance stack's auth service).
    #[serde(rename = "oauth2")]
    OAuth2(OAuth2Config),
}

impl AuthConfig {
    fn validate(&self) -> Result<()> {
        match self {
            Self::None => Ok(()),
            Self::Bearer { token } if token.is_empty() => {
                Err(config_error("auth.token", "must not be empty"))
            }
            Self::Bearer { .. } => Ok(()),
            Self::OAuth2(oauth) => oauth.validate(),
        }
    }
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Bearer { token: _ } => f.debug_struct("Bearer").field("token", &"***").finish(),
            Self::OAuth2(oauth) => oauth.fmt(f),
        }
    }
}

/// OAuth2 client-credentials grant (RFC 6749 §4.4).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Config {
    /// Token endpoint, e.g. `https://stack.example.com/api/auth/oauth/token`.
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Secret,
    /// Sent space-separated as `scope`; omitted when empty.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Fetch a new token this long before the cached one expires, so a request never
    /// leaves with a token that dies in flight. Capped at half the token's lifetime.
    #[serde(default = "default_refresh_margin_ms")]
    pub refresh_margin_ms: u64,
}

fn default_refresh_margin_ms() -> u64 {
    DEFAULT_REFRESH_MARGIN_MS
}

impl OAuth2Config {
    pub fn new(
        token_url: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<Secret>,
    ) -> Self {
        Self {
            token_url: token_url.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            scopes: Vec::new(),
            refresh_margin_ms: DEFAULT_REFRESH_MARGIN_MS,
        }
    }

    pub fn refresh_margin(&self) -> Duration {
        Duration::from_millis(self.refresh_margin_ms)
    }

    fn validate(&self) -> Result<()> {
        parse_http_url("auth.token_url", &self.token_url)?;
        if self.client_id.is_empty() {
            return Err(config_error("auth.client_id", "must not be empty"));
        }
        if self.client_secret.is_empty() {
            return Err(config_error("auth.client_secret", "must not be empty"));
        }
        Ok(())
    }
}

impl fmt::Debug for OAuth2Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            token_url,
            client_id,
            client_secret: _,
            scopes,
            refresh_margin_ms,
        } = self;
        f.debug_struct("OAuth2")
            .field("token_url", token_url)
            .field("client_id", client_id)
            .field("client_secret", &"***")
            .field("scopes", scopes)
            .field("refresh_margin_ms", refresh_margin_ms)
            .finish()
    }
}

/// Verification of the webhooks the Formance webhooks service sends.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The webhook config's secret, used as-is (its text bytes are the HMAC key).
    pub secret: Secret,
    /// The secret being rotated out, also accepted until it is removed.
    #[serde(default)]
    pub previous_secret: Option<Secret>,
    /// Largest accepted distance between `formance-webhook-timestamp` and now, either way.
    #[serde(default = "default_webhook_tolerance_secs")]
    pub tolerance_secs: u64,
}

fn default_webhook_tolerance_secs() -> u64 {
    DEFAULT_WEBHOOK_TOLERANCE_SECS
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            secret: _,
            previous_secret,
            tolerance_secs,
        } = self;
        f.debug_struct("WebhookConfig")
            .field("secret", &"***")
            .field("previous_secret", &previous_secret.as_ref().map(|_| "***"))
            .field("tolerance_secs", tolerance_secs)
            .finish()
    }
}

/// Formance's `^[0-9a-zA-Z_-]{1,63}$`, without pulling in a regex engine for it.
fn is_ledger_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An http(s) URL without credentials or query: credentials belong in `auth`, where
/// they are redacted, not in a URL that ends up in error messages.
fn parse_http_url(field: &'static str, text: &str) -> Result<Url> {
    // The text is not echoed: it may hold credentials typed by mistake.
    let url = Url::parse(text).map_err(|e| config_error(field, format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(config_error(field, "the scheme must be http or https"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(config_error(
            field,
            "must not carry credentials; configure `auth` instead",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(config_error(field, "must not have a query or fragment"));
    }
    Ok(url)
}

fn config_error(field: &'static str, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message).with("field", field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_in_and_validate() {
        let config: FormanceConfig =
            serde_json::from_str(r#"{"base_url":"http://127.0.0.1:3068","ledger":"main"}"#)
                .unwrap();
        assert_eq!(config.bulk_max_size, 100);
        assert_eq!(config.request_timeout(), Duration::from_secs(30));
        assert_eq!(config.connect_timeout(), Duration::from_secs(5));
        assert!(!config.create_ledger_if_missing);
        assert!(matches!(config.auth, AuthConfig::None));
        assert_eq!(
            config.validate().unwrap().as_str(),
            "http://127.0.0.1:3068/"
        );
    }

    #[test]
    fn unknown_fields_are_refused_at_every_level() {
        let top = r#"{"base_url":"http://x","ledger":"main","bulk_size":5}"#;
        assert!(
            serde_json::from_str::<FormanceConfig>(top)
                .unwrap_err()
                .to_string()
                .contains("bulk_size")
        );
        let auth = r#"{"base_url":"http://x","ledger":"main","auth":{"kind":"bearer","token":"t","tokn":"u"}}"#;
        assert!(
            serde_json::from_str::<FormanceConfig>(auth)
                .unwrap_err()
                .to_string()
                .contains("tokn")
        );
        let oauth = r#"{"kind":"oauth2","token_url":"http://a","client_id":"c","client_secret":"s","scope":"x"}"#;
        assert!(
            serde_json::from_str::<AuthConfig>(oauth)
                .unwrap_err()
                .to_string()
                .contains("scope")
        );
        let webhook = r#"{"secret":"s","tolerance":5}"#;
        assert!(serde_json::from_str::<WebhookConfig>(webhook).is_err());
    }

    #[test]
    fn auth_kinds_parse() {
        let bearer: AuthConfig =
            serde_json::from_str(r#"{"kind":"bearer","token":"tok"}"#).unwrap();
        assert!(matches!(&bearer, AuthConfig::Bearer { token } if token.expose() == "tok"));
        let oauth: AuthConfig = serde_json::from_str(
            r#"{"kind":"oauth2","token_url":"http://auth/oauth/token","client_id":"c","client_secret":"s","scopes":["ledger:read","ledger:write"]}"#,
        )
        .unwrap();
        let AuthConfig::OAuth2(oauth) = oauth else {
            panic!("not oauth2")
        };
        assert_eq!(oauth.scopes, ["ledger:read", "ledger:write"]);
        assert_eq!(oauth.refresh_margin(), Duration::from_secs(30));
        let none: AuthConfig = serde_json::from_str(r#"{"kind":"none"}"#).unwrap();
        assert!(matches!(none, AuthConfig::None));
    }

    #[test]
    fn debug_never_shows_secrets() {
        let mut config = FormanceConfig::new("http://ledger:3068", "main");
        config.auth = AuthConfig::OAuth2(OAuth2Config::new(
            "http://auth/token",
            "client-1",
            "hunter2-client",
        ));
        let printed = format!("{config:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("client-1"), "{printed}");
        config.auth = AuthConfig::Bearer {
            token: Secret::new("hunter2-token"),
        };
        let printed = format!("{config:?} {:?}", Secret::new("hunter2"));
        assert!(!printed.contains("hunter2"), "{printed}");
        let webhook = WebhookConfig {
            secret: Secret::new("hunter2-webhook"),
            previous_secret: Some(Secret::new("hunter2-previous")),
            tolerance_secs: 300,
        };
        assert!(!format!("{webhook:?}").contains("hunter2"));
    }

    #[test]
    fn validation_names_the_field() {
        type Mutation = fn(&mut FormanceConfig);
        let cases: [(Mutation, &str); 7] = [
            (|c| c.base_url = "ledger:3068".into(), "base_url"),
            (|c| c.base_url = "http://user:pw@ledger".into(), "base_url"),
            (|c| c.base_url = "http://ledger/?x=1".into(), "base_url"),
            (|c| c.ledger = "main ledger".into(), "ledger"),
            (|c| c.ledger = "x".repeat(64), "ledger"),
            (|c| c.bulk_max_size = 0, "bulk_max_size"),
            (
                |c| {
                    c.auth = AuthConfig::Bearer {
                        token: Secret::new(""),
                    }
                },
                "auth.token",
            ),
        ];
        for (mutate, field) in cases {
            let mut config = FormanceConfig::new("http://ledger:3068", "main");
            mutate(&mut config);
            let err = config.validate().unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::Config);
            assert_eq!(err.context("field"), Some(field), "{err}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
    }
}
