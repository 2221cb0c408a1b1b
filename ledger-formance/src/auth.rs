//! Authentication of ledger requests: none, a static bearer token, or an OAuth2
//! client-credentials token that is cached, refreshed before it expires, and fetched
//! anew once when the ledger answers 401.

use std::fmt;
use std::time::Duration;

use chrono::Utc;
use outbox_core::{Error, ErrorKind, Result};
use reqwest::header::{ACCEPT, HeaderValue};
use reqwest::{Client, Url};
use serde::Deserialize;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::{AuthConfig, OAuth2Config, Secret};
use crate::error::{classify_token_answer, classify_transport};

/// Produces the `Authorization` header of each ledger request.
pub(crate) struct Authenticator(Mode);

enum Mode {
    None,
    /// Marked sensitive, so even `HeaderValue`'s own `Debug` hides it.
    Bearer(HeaderValue),
    OAuth2(Box<OAuth2>),
}

struct OAuth2 {
    token_url: Url,
    client_id: String,
    client_secret: Secret,
    scope: Option<String>,
    margin: Duration,
    /// Held across a fetch, so concurrent requests wait for one token instead of
    /// each fetching their own.
    cached: Mutex<Option<CachedToken>>,
}

struct CachedToken {
    header: HeaderValue,
    /// `None` when the server gave no `expires_in`: kept until the ledger answers 401.
    refresh_at: Option<Instant>,
}

/// RFC 6749 §5.1.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Authenticator {
    /// `config` must have passed [`crate::FormanceConfig::validate`].
    pub(crate) fn new(config: &AuthConfig) -> Result<Self> {
        let mode = match config {
            AuthConfig::None => Mode::None,
            AuthConfig::Bearer { token } => Mode::Bearer(bearer(token.expose(), "auth.token")?),
            AuthConfig::OAuth2(oauth) => Mode::OAuth2(Box::new(OAuth2::new(oauth)?)),
        };
        Ok(Self(mode))
    }

    /// The header for the next request, fetching a token first when none is fresh.
    pub(crate) async fn authorization(&self, http: &Client) -> Result<Option<HeaderValue>> {
        match &self.0 {
            Mode::None => Ok(None),
            Mode::Bearer(header) => Ok(Some(header.clone())),
            Mode::OAuth2(oauth) => oauth.header(http).await.map(Some),
        }
    }

    /// Whether a 401 may be cured by fetching a new token.
    pub(crate) fn can_refresh(&self) -> bool {
        matches!(self.0, Mode::OAuth2(_))
    }

    /// Forgets `rejected` if it is still the cached token. A token another request
    /// has already replaced is left alone.
    pub(crate) async fn reject(&self, rejected: &HeaderValue) {
        if let Mode::OAuth2(oauth) = &self.0 {
            let mut cached = oauth.cached.lock().await;
            if cached
                .as_ref()
                .is_some_and(|token| token.header == rejected)
            {
                *cached = None;
            }
        }
    }
}

impl OAuth2 {
    fn new(config: &OAuth2Config) -> Result<Self> {
        let token_url = Url::parse(&config.token_url).map_err(|e| {
            Error::new(ErrorKind::Config, format!("not a URL: {e}")).with("field", "auth.token_url")
        })?;
        let scope = (!config.scopes.is_empty()).then(|| config.scopes.join(" "));
        Ok(Self {
            token_url,
            client_id: config.client_id.clone(),
            client_secret: config.client_secret.clone(),
            scope,
            margin: config.refresh_margin(),
            cached: Mutex::new(None),
        })
    }

    async fn header(&self, http: &Client) -> Result<HeaderValue> {
        let mut cached = self.cached.lock().await;
        if let Some(token) = cached.as_ref()
            && token.refresh_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(token.header.clone());
        }
        let token = self.fetch(http).await?;
        let header = token.header.clone();
        *cached = Some(token);
        Ok(header)
    }

    async fn fetch(&self, http: &Client) -> Result<CachedToken> {
        let context = |e: Error| e.with("token_endpoint", self.token_url.path());
        // Measured before sending, so the refresh time errs on the early side.
        let started = Instant::now();
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", self.client_id.as_str()),
            ("client_secret", self.client_secret.expose()),
        ];
        if let Some(scope) = &self.scope {
            form.push(("scope", scope));
        }
        let answer = http
            .post(self.token_url.clone())
            .header(ACCEPT, "application/json")
            .form(&form)
            .send()
            .await
            .map_err(|e| context(classify_transport(e)))?;
        let status = answer.status();
        let headers = answer.headers().clone();
        let body = answer
            .bytes()
            .await
            .map_err(|e| context(classify_transport(e)))?;
        if !status.is_success() {
            return Err(context(classify_token_answer(
                status,
                &headers,
                &body,
                Utc::now(),
            )));
        }
        let token: TokenAnswer = serde_json::from_slice(&body).map_err(|e| {
            context(Error::new(
                ErrorKind::Config,
                format!("the token endpoint's answer is not an OAuth2 token: {e}"),
            ))
        })?;
        if let Some(kind) = &token.token_type
            && !kind.eq_ignore_ascii_case("bearer")
        {
            return Err(context(Error::new(
                ErrorKind::Config,
                format!(
                    "the token endpoint issued a {kind:?} token; only bearer tokens are supported"
                ),
            )));
        }
        let refresh_at = token.expires_in.map(|secs| {
            let lifetime = Duration::from_secs(secs);
            // A short-lived token still gets used for half its life instead of being
            // refetched on every request.
            started + lifetime - self.margin.min(lifetime / 2)
        });
        tracing::debug!(
            endpoint = self.token_url.path(),
            expires_in = token.expires_in,
            "fetched an OAuth2 token"
        );
        Ok(CachedToken {
            header: bearer(&token.access_token, "access_token").map_err(context)?,
            refresh_at,
        })
    }
}

fn bearer(token: &str, field: &'static str) -> Result<HeaderValue> {
    let mut header = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
        Error::new(
            ErrorKind::Config,
            "the token holds characters not allowed in an HTTP header",
        )
        .with("field", field)
    })?;
    header.set_sensitive(true);
    Ok(header)
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Mode::None => f.write_str("None"),
            Mode::Bearer(_) => f.write_str("Bearer(***)"),
            Mode::OAuth2(oauth) => f
                .debug_struct("OAuth2")
                .field("token_url", &oauth.token_url.as_str())
                .field("client_id", &oauth.client_id)
                .field("client_secret", &"***")
                .finish_non_exhaustive(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_header_is_sensitive_and_debug_redacts() {
        let auth = Authenticator::new(&AuthConfig::Bearer {
            token: Secret::new("hunter2"),
        })
        .unwrap();
        let Mode::Bearer(header) = &auth.0 else {
            panic!("not bearer")
        };
        assert!(header.is_sensitive());
        assert_eq!(header.to_str().unwrap(), "Bearer hunter2");
        assert!(!format!("{auth:?} {header:?}").contains("hunter2"));
        let oauth = Authenticator::new(&AuthConfig::OAuth2(OAuth2Config::new(
            "http://auth/token",
            "client",
            "hunter2",
        )))
        .unwrap();
        assert!(!format!("{oauth:?}").contains("hunter2"));
        assert!(oauth.can_refresh() && !auth.can_refresh());
    }

    #[test]
    fn a_token_with_a_newline_is_a_config_error_that_does_not_echo_it() {
        let err = bearer("abc\ndef", "auth.token").unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Config);
        assert!(!err.to_string().contains("abc"), "{err}");
    }
}
