//! `SqliteConfig`: where the database lives and how connections behave.

use std::path::PathBuf;
use std::time::Duration;

/// How to open the outbox database.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `path` | — | database file; created if missing |
/// | `busy_timeout` | 5 s | how long a writer waits for the lock before BUSY (reported as transient) |
/// | `synchronous_full` | true | `PRAGMA synchronous=FULL`: a commit survives power loss, not only a crash |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    pub path: PathBuf,
    pub busy_timeout: Duration,
    pub synchronous_full: bool,
}

impl SqliteConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            busy_timeout: Duration::from_secs(5),
            synchronous_full: true,
        }
    }

    /// Parses `sqlite://PATH` (also `sqlite:PATH`).
    pub fn from_url(url: &str) -> outbox_core::Result<Self> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                outbox_core::Error::invalid(
                    "database",
                    format!("{url:?} is not a sqlite://PATH URL"),
                )
            })?;
        Ok(Self::new(path))
    }
}
