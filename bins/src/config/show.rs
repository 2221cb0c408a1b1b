//! `outbox config show`: every key of the effective configuration, its value (secrets
//! redacted) and where the value came from.

use super::load::{Loaded, origin};

/// What is printed for a secret that is set.
const REDACTED: &str = "REDACTED";

/// One line per key (`key = value  # source`), or with `json` one object per key.
pub fn show(loaded: &Loaded, json: bool) -> Vec<String> {
    let tree = serde_json::to_value(&loaded.settings).unwrap_or_default();
    let mut leaves = Vec::new();
    flatten("", &tree, &mut leaves);
    let mut lines = Vec::new();
    if !json {
        lines.push(match loaded.file() {
            Some(file) => format!("# configuration file: {}", file.display()),
            None => "# configuration file: none (--config PATH or OUTBOX_CONFIG)".to_owned(),
        });
    }
    for (key, value) in leaves {
        let value = redact(&key, value);
        let source = if value.is_null() {
            "unset".to_owned()
        } else {
            origin(&loaded.figment, &key)
        };
        lines.push(if json {
            serde_json::json!({"key": key, "value": value, "source": source}).to_string()
        } else {
            let shown = if value.is_null() {
                "(unset)".to_owned()
            } else {
                value.to_string()
            };
            format!("{key} = {shown}  # {source}")
        });
    }
    lines
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, value, out);
            }
        }
        leaf => out.push((prefix.to_owned(), leaf.clone())),
    }
}

/// Secrets by name (`…secret`, `…token`, `…password`), and the password inside a
/// database URL. File paths of secrets are shown: they are not the secret.
fn redact(key: &str, value: serde_json::Value) -> serde_json::Value {
    let last = key.rsplit('.').next().unwrap_or(key);
    let secret = ["secret", "token", "password"]
        .iter()
        .any(|s| last == *s || last.ends_with(&format!("_{s}")));
    match value {
        serde_json::Value::Null => value,
        _ if secret => REDACTED.into(),
        serde_json::Value::String(text) if last == "database" || last == "from" || last == "to" => {
            redact_url(&text).into()
        }
        serde_json::Value::Array(items) if last == "to" => items
            .into_iter()
            .map(|item| match item {
                serde_json::Value::String(text) => redact_url(&text).into(),
                other => other,
            })
            .collect(),
        other => other,
    }
}

/// `postgres://user:pw@host/db` → `postgres://user:REDACTED@host/db`.
pub fn redact_url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some(REDACTED));
            url.to_string()
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_url_passwords_are_redacted_paths_are_not() {
        assert_eq!(redact("ledger.token", "abc".into()), REDACTED);
        assert_eq!(redact("fanout.publish_secret", "abc".into()), REDACTED);
        assert_eq!(
            redact("ledger.oauth2.client_secret", "abc".into()),
            REDACTED
        );
        assert_eq!(
            redact("ledger.token_file", "/run/secrets/t".into()),
            "/run/secrets/t"
        );
        assert_eq!(
            redact("database", "postgres://app:hunter2@db:5432/pay".into()),
            "postgres://app:REDACTED@db:5432/pay"
        );
        assert_eq!(
            redact(
                "fanout.to",
                serde_json::json!(["amqp://guest:guest@h:5672/%2f?exchange=x"])
            ),
            serde_json::json!(["amqp://guest:REDACTED@h:5672/%2f?exchange=x"])
        );
        assert_eq!(redact("relay.name", "relay".into()), "relay");
    }
}
