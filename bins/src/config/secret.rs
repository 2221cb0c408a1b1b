//! Secrets given inline or as a file path (`…_file`).

use std::path::Path;

use outbox_core::{Error, ErrorKind, Result};

/// The secret `key`, from its inline value or from the file `key_file` names; `None`
/// when neither is set. Both set is an error: which one wins would be a guess.
pub fn resolve_secret(
    key: &str,
    inline: Option<&str>,
    file: Option<&Path>,
) -> Result<Option<String>> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(Error::new(
            ErrorKind::Config,
            format!("`{key}` and `{key}_file` are both set: keep one"),
        )
        .with("key", key)),
        (Some(""), None) => {
            Err(Error::new(ErrorKind::Config, format!("`{key}` is empty")).with("key", key))
        }
        (Some(value), None) => Ok(Some(value.to_owned())),
        (None, Some(path)) => read_secret_file(&format!("{key}_file"), path).map(Some),
        (None, None) => Ok(None),
    }
}

/// The contents of a secret file without its trailing line break (editors and
/// `echo` add one; Kubernetes secret mounts do not).
pub fn read_secret_file(key: &str, path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("`{key}`: cannot read {}: {e}", path.display()),
        )
        .with("key", key)
    })?;
    let secret = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if secret.is_empty() {
        return Err(Error::new(
            ErrorKind::Config,
            format!("`{key}`: {} is empty", path.display()),
        )
        .with("key", key));
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_secret_loses_only_its_trailing_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cr3t \n").unwrap();
        assert_eq!(
            resolve_secret("ledger.token", None, Some(&path)).unwrap(),
            Some("s3cr3t ".to_owned())
        );
        std::fs::write(&path, "s3cr3t\r\n").unwrap();
        assert_eq!(read_secret_file("k", &path).unwrap(), "s3cr3t");
    }

    #[test]
    fn both_forms_missing_files_and_empty_secrets_are_errors_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent");
        let both = resolve_secret("fanout.secret", Some("x"), Some(&path)).unwrap_err();
        assert!(
            both.to_string()
                .contains("`fanout.secret` and `fanout.secret_file`"),
            "{both}"
        );
        let missing = resolve_secret("fanout.secret", None, Some(&path)).unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("`fanout.secret_file`: cannot read"),
            "{missing}"
        );
        std::fs::write(&path, "\n").unwrap();
        let empty = resolve_secret("fanout.secret", None, Some(&path)).unwrap_err();
        assert!(empty.to_string().contains("is empty"), "{empty}");
        assert_eq!(resolve_secret("fanout.secret", None, None).unwrap(), None);
    }
}
