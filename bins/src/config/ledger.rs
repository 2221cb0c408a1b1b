//! The Formance client's configuration from `[ledger]`.

use outbox_core::{Error, ErrorKind, Result};
use outbox_ledger_formance::{AuthConfig, FormanceConfig, OAuth2Config, Secret};

use super::{LedgerSettings, required, resolve_secret};

impl LedgerSettings {
    /// Whether a ledger was named at all (commands for which it is optional).
    pub fn is_set(&self) -> bool {
        self.url.is_some() || self.name.is_some()
    }

    /// The client configuration: URL, name, timeout and authentication (a static
    /// token, or OAuth2 client credentials; not both).
    pub fn formance_config(&self) -> Result<FormanceConfig> {
        let url = required("ledger.url", self.url.as_deref())?;
        let name = required("ledger.name", self.name.as_deref())?;
        let mut config = FormanceConfig::new(url, name);
        config.request_timeout_ms = self.request_timeout_ms;
        let token = resolve_secret(
            "ledger.token",
            self.token.as_deref(),
            self.token_file.as_deref(),
        )?;
        config.auth = match (token, &self.oauth2) {
            (Some(_), Some(_)) => {
                return Err(Error::new(
                    ErrorKind::Config,
                    "`ledger.token` and `ledger.oauth2` are both set: keep one",
                )
                .with("key", "ledger.oauth2"));
            }
            (Some(token), None) => AuthConfig::Bearer {
                token: Secret::new(token),
            },
            (None, Some(oauth)) => {
                let token_url = required("ledger.oauth2.token_url", Some(&oauth.token_url))?;
                let client_id = required("ledger.oauth2.client_id", Some(&oauth.client_id))?;
                let secret = resolve_secret(
                    "ledger.oauth2.client_secret",
                    oauth.client_secret.as_deref(),
                    oauth.client_secret_file.as_deref(),
                )?;
                let secret = required("ledger.oauth2.client_secret", secret.as_deref())?;
                let mut oauth2 = OAuth2Config::new(token_url, client_id, Secret::new(secret));
                oauth2.scopes = oauth.scopes.clone();
                AuthConfig::OAuth2(oauth2)
            }
            (None, None) => AuthConfig::None,
        };
        Ok(config)
    }
}
