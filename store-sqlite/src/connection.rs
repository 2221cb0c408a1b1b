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
