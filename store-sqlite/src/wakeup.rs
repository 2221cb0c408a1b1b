//! In-process wake-ups keyed by database file, so an enqueue through any connection
//! of this process wakes the relays polling that file without waiting for the interval.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use outbox_core::Wakeup;

/// Keyed by the absolute path SQLite reports for a connection (`Connection::path`),
/// so the hot path (enqueue) needs no filesystem call.
static WAKEUPS: LazyLock<Mutex<HashMap<String, Wakeup>>> = LazyLock::new(Default::default);

/// The wake-up of the database file SQLite reports as `path`.
pub(crate) fn for_path(path: &str) -> Wakeup {
    let mut map = WAKEUPS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    map.entry(path.to_owned()).or_default().clone()
}

/// Wakes the relays of the database at `path`, if any are waiting in this process.
pub(crate) fn notify(path: &str) {
    if path.is_empty() {
        return; // in-memory database: no relay can share it
    }
    let map = WAKEUPS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(wakeup) = map.get(path) {
        wakeup.notify();
    }
}
