//! The configuration identity of `outbox_info{config=…}`: a short hash of the
//! effective settings, so a dashboard shows when two processes run different
//! configurations — or one process changed its own across a restart.

use std::sync::LazyLock;

use regex::Regex;
use sha2::{Digest, Sha256};

/// `name: "value"` / `name: Some("value")` of a secret-looking field in `Debug` text.
static SECRET_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(\w*(?:secret|token|password)\w*): (?:Some\()?"(?:[^"\\]|\\.)*"\)?"#)
        .expect("valid regex")
});
/// The user info of a URL (`postgres://user:password@host`).
static URL_USER_INFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"://[^@/"\s]*@"#).expect("valid regex"));

/// 12 hex digits of the SHA-256 of `settings`' `Debug` text, with secrets and URL
/// credentials taken out first: rotating a secret keeps the identity, and the hash
/// never carries anything derived from one.
pub fn config_identity(settings: &impl std::fmt::Debug) -> String {
    let text = format!("{settings:?}");
    let text = SECRET_FIELD.replace_all(&text, "$1: <secret>");
    let text = URL_USER_INFO.replace_all(&text, "://<credentials>@");
    let digest = Sha256::digest(text.as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    #[allow(dead_code)] // read through Debug only
    struct Settings {
        database: String,
        secret: String,
        ledger_token: Option<String>,
        batch_size: usize,
    }

    fn settings(secret: &str, password: &str, batch_size: usize) -> Settings {
        Settings {
            database: format!("postgres://app:{password}@db.internal/outbox"),
            secret: secret.to_owned(),
            ledger_token: Some(format!("{secret}-token")),
            batch_size,
        }
    }

    #[test]
    fn secrets_do_not_change_the_identity_and_settings_do() {
        let one = config_identity(&settings("s1", "p1", 500));
        assert_eq!(one.len(), 12);
        assert!(one.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(one, config_identity(&settings("s2 \"quoted\"", "p2", 500)));
        assert_ne!(one, config_identity(&settings("s1", "p1", 1000)));
    }
}
