//! The single-instance lock of a relay name, on whichever store the URL names: held
//! for the whole run, so a second `outbox relay` with the same name (a rolling
//! deploy, `--once` beside the daemon) is refused instead of posting the same events.

use outbox_core::Result;

use super::Database;

/// Held while the relay runs; dropping it releases the name.
#[derive(Debug)]
pub enum RelayNameLock {
    #[cfg(feature = "sqlite")]
    Sqlite(outbox_store_sqlite::RelayLock),
    #[cfg(feature = "postgres")]
    Postgres(outbox_store_postgres::PgRelayLock),
}

impl Database {
    /// Takes relay `relay`'s lock: exclusive for a plain or CDC relay, shared for a
    /// fleet member (fleet members run together, never beside a plain relay).
    pub async fn lock_relay(&self, relay: &str, fleet_member: bool) -> Result<RelayNameLock> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                let _ = fleet_member; // no fleet on SQLite
                outbox_store_sqlite::RelayLock::acquire(&config.path, relay)
                    .map(RelayNameLock::Sqlite)
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                use outbox_store_postgres::{LockMode, PgRelayLock};
                let mode = if fleet_member {
                    LockMode::Shared
                } else {
                    LockMode::Exclusive
                };
                PgRelayLock::acquire(config, relay, mode)
                    .await
                    .map(RelayNameLock::Postgres)
            }
        }
    }
}

impl RelayNameLock {
    /// Other processes holding this name (the other members of a fleet).
    pub async fn other_holders(&mut self) -> Result<u32> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => Ok(0),
            #[cfg(feature = "postgres")]
            Self::Postgres(lock) => lock.other_holders().await,
        }
    }
}
