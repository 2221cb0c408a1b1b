//! `RelayLock`: at most one relay process per relay name on one outbox file.
//!
//! Two relays with one name (a rolling deploy, `--once` beside the daemon) would post
//! the same events side by side; a refusal is not idempotent in the ledger, so the
//! second could commit a payout the first reported as refused. The lock is an
//! exclusive advisory lock (`flock`) on a file beside the database: the operating
//! system drops it when the holder exits, however it exits (SIGKILL included), so a
//! crashed relay never blocks its successor.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

use outbox_core::{Error, ErrorKind, Result};

/// Held for as long as the relay runs; dropping it releases the name.
#[derive(Debug)]
pub struct RelayLock {
    path: PathBuf,
    _file: File,
}

impl RelayLock {
    /// Takes relay `relay`'s lock for the outbox at `database`.
    ///
    /// # Errors
    /// `Config` naming the relay when another process holds it; storage errors when
    /// the lock file cannot be opened.
    pub fn acquire(database: &Path, relay: &str) -> Result<Self> {
        let path = lock_path(database, relay);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Storage,
                    format!("opening relay lock file {}: {e}", path.display()),
                )
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "relay {relay:?} is already running on {} ({}): a second instance would post the same events; stop it first",
                        database.display(),
                        holder.trim()
                    ),
                )
                .with("relay", relay));
            }
            Err(TryLockError::Error(e)) => {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!("locking {}: {e}", path.display()),
                ));
            }
        }
        // For the message a second instance prints; the lock itself is what counts.
        let _ = file.set_len(0);
        let _ = writeln!(file, "held by pid {}", std::process::id());
        Ok(Self { path, _file: file })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `<database>.relay-<name>.lock`; names outside `[A-Za-z0-9_-]` are hex-encoded so
/// every relay name maps to one plain file name.
fn lock_path(database: &Path, relay: &str) -> PathBuf {
    let plain = !relay.is_empty()
        && relay
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let name = if plain {
        relay.to_owned()
    } else {
        relay.bytes().map(|b| format!("{b:02x}")).collect()
    };
    let mut file = database.as_os_str().to_owned();
    file.push(format!(".relay-{name}.lock"));
    PathBuf::from(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_per_name_and_released_on_drop() {
        let dir = tempfile::TempDir::new().unwrap();
        let db = dir.path().join("outbox.db");
        let first = RelayLock::acquire(&db, "relay").unwrap();
        let err = RelayLock::acquire(&db, "relay").unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
        assert!(err.to_string().contains("already running"), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        RelayLock::acquire(&db, "other").expect("another name is free");
        drop(first);
        RelayLock::acquire(&db, "relay").expect("released on drop");
    }

    #[test]
    fn odd_names_map_to_plain_file_names() {
        let p = lock_path(Path::new("/x/o.db"), "a/b");
        assert_eq!(p, PathBuf::from("/x/o.db.relay-612f62.lock"));
        assert_eq!(
            lock_path(Path::new("o.db"), "relay-1"),
            PathBuf::from("o.db.relay-relay-1.lock")
        );
    }
}
