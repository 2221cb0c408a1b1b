//! In-process wake-ups keyed by database file, so an enqueue through any connection
//! of this process wakes the relays polling that file without waiting for the interval.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use outbox_core::Wakeup;

static WAKEUPS: LazyLock<Mutex<HashMap<PathBuf, Wakeup>>> = LazyLock::new(Default::default);

fn key(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The wake-up of the database at `path`.
pub(crate) fn for_path(path: &Path) -> Wakeup {
    let mut map = WAKEUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    map.entry(key(path)).or_default().clone()
}

/// Wakes the relays of the database at `path`, if any are waiting in this process.
pub(crate) fn notify(path: &str) {
    if path.is_empty() {
        return; // in-memory database: no relay can share it
    }
    let map = WAKEUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(wakeup) = map.get(&key(Path::new(path))) {
        wakeup.notify();
    }
}
