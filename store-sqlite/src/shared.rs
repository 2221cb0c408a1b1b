//! `SharedConnection`: the one migrated connection a store's clones share, used off
//! the async runtime (SQLite calls block).

use std::sync::{Arc, Mutex};

use outbox_core::{Error, ErrorKind};
use rusqlite::Connection;

use crate::config::SqliteConfig;
use crate::connection::{connect, migrate};

/// One connection behind a mutex; cheap to clone.
#[derive(Clone)]
pub(crate) struct SharedConnection {
    inner: Arc<Inner>,
}

struct Inner {
    config: SqliteConfig,
    conn: Arc<Mutex<Connection>>,
}

impl SharedConnection {
    /// Opens (creating if needed) and migrates the database.
    pub(crate) async fn open(config: SqliteConfig) -> outbox_core::Result<Self> {
        tokio::task::spawn_blocking(move || {
            let mut conn = connect(&config)?;
            migrate(&mut conn)?;
            Ok(Self {
                inner: Arc::new(Inner {
                    config,
                    conn: Arc::new(Mutex::new(conn)),
                }),
            })
        })
        .await
        .map_err(join_error)?
    }

    pub(crate) fn config(&self) -> &SqliteConfig {
        &self.inner.config
    }

    /// Runs `f` on the connection on a blocking thread.
    pub(crate) async fn run<T, F>(&self, f: F) -> outbox_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> outbox_core::Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&mut inner.lock()))
            .await
            .map_err(join_error)?
    }

    /// The connection itself, for a [`crate::GroupCommit`] that writes through it
    /// (waiting for the same mutex as every other use).
    pub(crate) fn connection(&self) -> Arc<Mutex<Connection>> {
        Arc::clone(&self.inner.conn)
    }
}

impl Inner {
    /// The connection; a panic while it was held does not make it unusable (every
    /// write is a transaction that the panic rolled back).
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn join_error(err: tokio::task::JoinError) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("sqlite worker task failed: {err}"),
    )
}
