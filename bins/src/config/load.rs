//! Building the configuration from its four layers, and errors that name the key and
//! the layer it came from.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};
use outbox_core::{Error, ErrorKind, Result};

use super::Settings;

/// The name of the defaults layer, as `outbox config show` prints it.
pub const DEFAULTS: &str = "default";
/// The name of the flags layer.
pub const FLAGS: &str = "command-line flag";
/// The environment variables' prefix.
pub const ENV_PREFIX: &str = "OUTBOX_";

/// Variables of earlier releases, refused with their new name rather than ignored:
/// a relay that silently lost its token would only fail at the ledger.
const RENAMED: &[(&str, &str)] = &[
    ("OUTBOX_LEDGER_URL", "OUTBOX_LEDGER__URL"),
    ("OUTBOX_LEDGER_NAME", "OUTBOX_LEDGER__NAME"),
    ("OUTBOX_LEDGER_TOKEN", "OUTBOX_LEDGER__TOKEN"),
    ("OUTBOX_WEBHOOK_SECRET", "OUTBOX_FANOUT__SECRET"),
    (
        "OUTBOX_WEBHOOK_PREVIOUS_SECRET",
        "OUTBOX_FANOUT__PREVIOUS_SECRET",
    ),
    (
        "OUTBOX_PUBLISH_SECRET",
        "OUTBOX_FANOUT__PUBLISH_SECRET or OUTBOX_CONSUME__SECRET",
    ),
    ("OUTBOX_FANOUT_LISTEN", "OUTBOX_FANOUT__LISTEN"),
];

/// Where the configuration file is: `--config PATH` or `OUTBOX_CONFIG`. Without
/// either, no file is read (a file found by accident in the working directory would
/// be a surprise).
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    pub file: Option<PathBuf>,
}

/// The effective configuration and the layers it was built from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub settings: Settings,
    pub(super) figment: Figment,
    pub(super) file: Option<PathBuf>,
}

/// Merges defaults, the file, the environment and `flags` (an object shaped like
/// [`Settings`], holding only the flags given) and extracts the settings.
pub fn load(source: &ConfigSource, flags: serde_json::Value) -> Result<Loaded> {
    check_renamed_variables()?;
    let mut figment = Figment::from(Named {
        name: DEFAULTS,
        inner: Serialized::defaults(Settings::default()),
    });
    if let Some(file) = &source.file {
        if !file.is_file() {
            return Err(Error::new(
                ErrorKind::Config,
                format!("no configuration file at {}", file.display()),
            )
            .with("key", "config"));
        }
        figment = figment.merge(Toml::file_exact(file));
    }
    figment = figment.merge(environment()).merge(Named {
        name: FLAGS,
        inner: Serialized::defaults(without_nulls(flags)),
    });
    let settings = figment
        .extract::<Settings>()
        .map_err(|e| describe(&figment, e))?;
    Ok(Loaded {
        settings,
        figment,
        file: source.file.clone(),
    })
}

/// `OUTBOX_…` variables whose first key is a section of [`Settings`]; `OUTBOX_LOG`
/// is the log filter (`log.level`). Others (`OUTBOX_CONFIG`, the test suite's own)
/// are not configuration.
fn environment() -> Env {
    let sections = top_level_keys();
    Env::prefixed(ENV_PREFIX)
        .map(|key| {
            if key == "log" {
                "log__level".into()
            } else {
                key.into()
            }
        })
        .split("__")
        .filter(move |key| {
            let first = key.as_str().split('.').next().unwrap_or_default();
            sections.iter().any(|s| s.eq_ignore_ascii_case(first))
        })
}

/// The keys a configuration file may hold at its top level.
fn top_level_keys() -> Vec<String> {
    match serde_json::to_value(Settings::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

fn check_renamed_variables() -> Result<()> {
    for (old, new) in RENAMED {
        if std::env::var_os(old).is_some() {
            return Err(Error::new(
                ErrorKind::Config,
                format!("{old} is no longer read: nested keys take a double underscore, use {new}"),
            )
            .with("key", *old));
        }
    }
    Ok(())
}

/// The environment variable that sets `key`.
pub fn env_name(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        key.replace('.', "__").to_ascii_uppercase()
    )
}

/// Where the value at `key` came from, in words an operator can act on.
pub fn origin(figment: &Figment, key: &str) -> String {
    match figment.find_metadata(key) {
        None => DEFAULTS.to_owned(),
        Some(md) if md.name == FLAGS || md.name == DEFAULTS => md.name.to_string(),
        Some(md) if md.name.contains("environment") => env_name(key),
        Some(md) => match &md.source {
            Some(source) => source.to_string(),
            None => md.name.to_string(),
        },
    }
}

/// One error per bad key: `` `relay.batch_size` (OUTBOX_RELAY__BATCH_SIZE): invalid type… ``.
fn describe(figment: &Figment, errors: figment::Error) -> Error {
    let mut keys = Vec::new();
    let mut lines = Vec::new();
    for error in errors {
        let mut key = error.path.join(".");
        let kind = match &error.kind {
            figment::error::Kind::UnknownField(field, expected) => {
                // The path usually ends at the unknown key already.
                if !key.ends_with(field.as_str()) {
                    key = if key.is_empty() {
                        field.clone()
                    } else {
                        format!("{key}.{field}")
                    };
                }
                format!("unknown key (expected {})", figment::error::OneOf(expected))
            }
            other => other.to_string(),
        };
        lines.push(format!("`{key}` ({}): {kind}", origin(figment, &key)));
        keys.push(key);
    }
    Error::new(
        ErrorKind::Config,
        format!("configuration: {}", lines.join("; ")),
    )
    .with("key", keys.join(", "))
}

fn without_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// A provider under a name of ours, so `config show` and errors say "default" and
/// "command-line flag" rather than a Rust type name.
struct Named<P> {
    name: &'static str,
    inner: P,
}

impl<P: Provider> Provider for Named<P> {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name)
    }

    fn data(&self) -> std::result::Result<Map<Profile, Dict>, figment::Error> {
        self.inner.data()
    }
}

impl Loaded {
    /// The file the configuration was read from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}
