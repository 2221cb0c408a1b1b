//! All adapter selection by Cargo feature lives here: one arm per adapter, and a
//! clear error naming the feature when a URL asks for one that was not compiled in.

use std::sync::Arc;

use outbox_core::{Error, ErrorKind, NewEvent, OutboxEvent, Relay, Result, Store};

/// The outbox database named by a URL.
#[derive(Debug, Clone)]
pub enum Database {
    #[cfg(feature = "sqlite")]
    Sqlite(outbox_store_sqlite::SqliteConfig),
}

fn not_compiled(scheme: &str, feature: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("{scheme}:// databases need the `{feature}` feature: rebuild with `cargo build -p outbox-bins --features {feature}`"),
    )
    .with("field", "database")
}

pub fn database(url: &str) -> Result<Database> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    match scheme {
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            return outbox_store_sqlite::SqliteConfig::from_url(url).map(Database::Sqlite);
            #[cfg(not(feature = "sqlite"))]
            return Err(not_compiled("sqlite", "sqlite"));
        }
        "postgres" | "postgresql" => Err(not_compiled("postgres", "postgres")),
        _ => Err(Error::invalid(
            "database",
            format!("{url:?}: expected sqlite://PATH or postgres://…"),
        )),
    }
}

impl Database {
    /// Creates or upgrades the outbox schema.
    pub async fn migrate(&self) -> Result<()> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => outbox_store_sqlite::SqliteStore::open(config.clone())
                .await
                .map(drop),
        }
    }

    /// The store and its default polling relay named `relay`.
    pub async fn store_and_relay(&self, relay: &str) -> Result<(Arc<dyn Store>, Box<dyn Relay>)> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                let store = outbox_store_sqlite::SqliteStore::open(config.clone()).await?;
                let relay = store.polling_relay(relay).await?;
                Ok((Arc::new(store), Box::new(relay)))
            }
        }
    }

    /// Enqueues `events` in one transaction: all or none. On failure the error carries
    /// the index of the event that failed in context `index`.
    pub async fn enqueue_all(&self, events: Vec<NewEvent>) -> Result<Vec<OutboxEvent>> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                let config = config.clone();
                tokio::task::spawn_blocking(move || sqlite_enqueue_all(&config, &events))
                    .await
                    .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?
            }
        }
    }
}

#[cfg(feature = "sqlite")]
fn sqlite_enqueue_all(
    config: &outbox_store_sqlite::SqliteConfig,
    events: &[NewEvent],
) -> Result<Vec<OutboxEvent>> {
    use outbox_store_sqlite::{connect, enqueue, map_error, migrate};
    let mut conn = connect(config)?;
    migrate(&mut conn)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let mut stored = Vec::with_capacity(events.len());
    for (index, event) in events.iter().enumerate() {
        stored.push(enqueue(&tx, event).map_err(|e| e.with("index", index))?);
    }
    tx.commit().map_err(map_error)?;
    Ok(stored)
}
