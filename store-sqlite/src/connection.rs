//! Opening connections (WAL, busy timeout) and running the embedded migrations.

use rusqlite::{Connection, TransactionBehavior};

use crate::config::SqliteConfig;
use crate::error::SqliteResultExt;

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_outbox.sql"),
    include_str!("../migrations/0002_fanout.sql"),
    include_str!("../migrations/0003_fanout_dead_letters.sql"),
    include_str!("../migrations/0004_retention.sql"),
    include_str!("../migrations/0005_exception_queue.sql"),
    include_str!("../migrations/0006_reconcile.sql"),
];

/// The schema version this build migrates a database to (its `user_version`).
pub fn current_schema_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Refuses a database an older release left behind, for readers that never migrate:
/// its version, this build's and the command that upgrades it.
pub(crate) fn require_current_schema(
    conn: &Connection,
    path: &std::path::Path,
) -> outbox_core::Result<()> {
    let applied: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .storage()?;
    let current = current_schema_version();
    if applied < current {
        return Err(outbox_core::Error::new(
            outbox_core::ErrorKind::Config,
            format!(
                "{} is at schema version {applied}, this build reads version {current}: run `outbox migrate --database sqlite://{}` first",
                path.display(),
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Opens a connection configured for the outbox: WAL, busy timeout, synchronous level.
///
/// Callers use such a connection for their own transactions too, so that enqueue runs
/// in the same transaction as the payout intent. Prefer
/// `conn.transaction_with_behavior(TransactionBehavior::Immediate)`: a deferred
/// transaction that reads before it writes can fail with BUSY at its first write.
pub fn connect(config: &SqliteConfig) -> outbox_core::Result<Connection> {
    let conn = Connection::open(&config.path).storage()?;
    conn.busy_timeout(config.busy_timeout).storage()?;
    conn.pragma_update(None, "journal_mode", "WAL").storage()?;
    conn.pragma_update(
        None,
        "synchronous",
        if config.synchronous_full {
            "FULL"
        } else {
            "NORMAL"
        },
    )
    .storage()?;
    conn.pragma_update(None, "foreign_keys", "ON").storage()?;
    Ok(conn)
}

/// Applies the migrations not yet applied (tracked in `PRAGMA user_version`), in one
/// immediate transaction so that concurrent starts do not race.
pub fn migrate(conn: &mut Connection) -> outbox_core::Result<()> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .storage()?;
    let applied: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .storage()?;
    for (version, sql) in (1_i64..).zip(MIGRATIONS) {
        if version > applied {
            tx.execute_batch(sql).storage()?;
            tx.pragma_update(None, "user_version", version).storage()?;
        }
    }
    tx.commit().storage()
}
