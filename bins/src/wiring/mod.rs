//! All adapter selection by Cargo feature lives here: one arm per adapter, and a
//! clear error naming the feature when a URL asks for one that was not compiled in.

mod audit_stores;
mod destinations;
mod reconcile;
mod relay_lock;
mod retention;
mod status_reader;
mod treasury;

use std::sync::Arc;

pub use audit_stores::{AuditStore, audit_store};
#[cfg(feature = "http")]
pub use destinations::start_intake;
pub use destinations::{
    NamedSubscriber, destination_name, distinct_destinations, publisher, subscriber,
};
pub use reconcile::{ReconcileDatabase, formance_client, reconcile_database};
pub use relay_lock::RelayNameLock;
pub use status_reader::status_reader;
pub use treasury::{Treasury, fanout_store, treasury};

use outbox_core::{Error, ErrorKind, NewEvent, OutboxEvent, Relay, Result, Store};

/// How a fleet member starts (see [`Database::run_fleet`]).
#[derive(Debug, Clone, Copy)]
pub struct FleetStart {
    pub partitions: u32,
    /// Start a new layout generation when the stored one has another partition count.
    pub repartition: bool,
    /// Other members running (holders of the relay name's shared lock).
    pub other_members: u32,
    /// How often ownership is checked and rebalanced.
    pub check_interval: std::time::Duration,
}

/// The outbox database named by a URL.
#[derive(Debug, Clone)]
pub enum Database {
    #[cfg(feature = "sqlite")]
    Sqlite(outbox_store_sqlite::SqliteConfig),
    /// `postgres://…[?schema=NAME]`: the outbox tables live in `schema` (default: the
    /// server's search path).
    #[cfg(feature = "postgres")]
    Postgres(outbox_store_postgres::PgConfig),
}

/// The replication slot (and publication) of the CDC relay named `relay`.
pub fn cdc_slot_name(relay: &str) -> String {
    format!("outbox_{}", relay.replace('-', "_"))
}

#[allow(dead_code)] // used only for the schemes whose feature is off
pub(crate) fn not_compiled(field: &str, scheme: &str, feature: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("{scheme}:// needs the `{feature}` feature: rebuild with `cargo build -p outbox-bins --features {feature}`"),
    )
    .with("field", field)
}

pub fn database(url: &str) -> Result<Database> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    match scheme {
        "sqlite" => {
            #[cfg(feature = "sqlite")]
            return outbox_store_sqlite::SqliteConfig::from_url(url).map(Database::Sqlite);
            #[cfg(not(feature = "sqlite"))]
            return Err(not_compiled("database", "sqlite", "sqlite"));
        }
        "postgres" | "postgresql" => {
            #[cfg(feature = "postgres")]
            return postgres_config(url).map(Database::Postgres);
            #[cfg(not(feature = "postgres"))]
            return Err(not_compiled("database", "postgres", "postgres"));
        }
        _ => Err(Error::invalid(
            "database",
            format!("{url:?}: expected sqlite://PATH or postgres://…"),
        )),
    }
}

/// Takes our own `schema=` query parameter off the URL before it reaches the driver.
#[cfg(feature = "postgres")]
fn postgres_config(text: &str) -> Result<outbox_store_postgres::PgConfig> {
    let mut parsed =
        url::Url::parse(text).map_err(|e| Error::invalid("database", format!("not a URL: {e}")))?;
    let mut schema = None;
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter_map(|(k, v)| {
            if k == "schema" {
                schema = Some(v.into_owned());
                None
            } else {
                Some((k.into_owned(), v.into_owned()))
            }
        })
        .collect();
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    let config = outbox_store_postgres::PgConfig::from_url(parsed.as_str())?;
    Ok(match schema {
        Some(schema) => config.with_schema(schema),
        None => config,
    })
}

impl Database {
    /// Creates or upgrades the outbox schema.
    pub async fn migrate(&self) -> Result<()> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => outbox_store_sqlite::SqliteStore::open(config.clone())
                .await
                .map(drop),
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => outbox_store_postgres::PgStore::open(config.clone())
                .await
                .map(drop),
        }
    }

    /// Enqueues `events` in one transaction: all or none. Each comes with the input
    /// line it was read from, which an error of that event names (`line`). `progress`
    /// counts the events written (from 0 again on a retry).
    pub async fn enqueue_all(
        &self,
        events: Vec<(usize, NewEvent)>,
        progress: indicatif::ProgressBar,
    ) -> Result<Vec<OutboxEvent>> {
        progress.set_position(0);
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                let config = config.clone();
                tokio::task::spawn_blocking(move || sqlite_enqueue_all(&config, &events, &progress))
                    .await
                    .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                use outbox_store_postgres::{PgStore, enqueue, map_error};
                let store = PgStore::open(config.clone()).await?;
                let mut tx = store.pool().begin().await.map_err(map_error)?;
                let mut stored = Vec::with_capacity(events.len());
                for (line, event) in &events {
                    stored.push(
                        enqueue(&mut tx, event)
                            .await
                            .map_err(|e| e.with("line", line))?,
                    );
                    progress.inc(1);
                }
                tx.commit().await.map_err(map_error)?;
                Ok(stored)
            }
        }
    }

    /// The store of a database that already exists (an outbox, or a consumer's inbox
    /// with its exceptions), migrated to this version. A SQLite path with no file is
    /// an error naming it, never a new empty database.
    pub async fn existing_store(&self) -> Result<Arc<dyn Store>> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                if !config.path.is_file() {
                    return Err(Error::new(
                        ErrorKind::NotFound,
                        format!("no SQLite database at {}", config.path.display()),
                    )
                    .with("field", "database"));
                }
                let store = outbox_store_sqlite::SqliteStore::open(config.clone()).await?;
                Ok(Arc::new(store))
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                let store = outbox_store_postgres::PgStore::open(config.clone()).await?;
                Ok(Arc::new(store))
            }
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
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                let store = outbox_store_postgres::PgStore::open(config.clone()).await?;
                let relay = store.polling_relay(relay).await?;
                Ok((Arc::new(store), Box::new(relay)))
            }
        }
    }

    /// Switches relay `relay` from CDC to polling (`relay --from-cdc`, under the name's
    /// lock), saying what it did; nothing when its cursor is a polling one already.
    pub async fn leave_cdc(&self, relay: &str) -> Result<()> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                let store = outbox_store_postgres::PgStore::open(config.clone()).await?;
                match store.leave_cdc(relay).await? {
                    Some(left) => tracing::warn!(
                        relay,
                        cdc_cursor = %left.cdc_cursor,
                        resume_after = %left.resume_after,
                        checked_through = %left.checked_through,
                        from_handover = left.from_handover,
                        rows_to_read = left.rows_after,
                        slot = %cdc_slot_name(relay),
                        "switching relay from CDC to polling: re-reading from where the CDC run began streaming, every event up to the checked horizon looked up in the delivery records first. The slot and publication are left: drop them once polling runs"
                    ),
                    None => tracing::info!(
                        relay,
                        "--from-cdc: the relay's cursor is not a CDC one, nothing to switch"
                    ),
                }
                Ok(())
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = relay;
                Err(Error::invalid(
                    "from_cdc",
                    "only a PostgreSQL outbox has a CDC relay to switch from",
                ))
            }
        }
    }

    /// The store and a CDC relay (Postgres logical replication) named `relay`, with
    /// its own slot and publication `outbox_<relay>`. On its first start the relay
    /// catches up from the polling cursor of the same name (or from the start), so a
    /// deployment switches from polling to CDC by restarting with `--cdc`. The store
    /// keeps the daily partitions ahead of the calendar, as with the polling relay.
    pub async fn store_and_cdc_relay(
        &self,
        relay: &str,
    ) -> Result<(Arc<dyn Store>, Box<dyn Relay>)> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                use outbox_store_postgres::PgStore;
                use outbox_store_postgres::cdc::{CdcConfig, CdcRelay};
                let store = PgStore::open(config.clone()).await?;
                let mut cdc = CdcConfig::new(&config.url);
                cdc.relay = relay.to_owned();
                cdc.slot = cdc_slot_name(relay);
                cdc.publication = cdc.slot.clone();
                if let Some(schema) = &config.schema {
                    cdc.schema = schema.clone();
                }
                let relay = CdcRelay::open_with_pool(cdc, store.pool().clone()).await?;
                store.start_partition_maintenance().await;
                Ok((Arc::new(store), Box::new(relay)))
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = relay;
                Err(Error::invalid(
                    "cdc",
                    "the CDC relay reads PostgreSQL logical replication: use a postgres:// database",
                ))
            }
        }
    }

    /// Runs the relay as one member of a fleet sharing `fleet.partitions` partitions
    /// until `shutdown`, then returns the sum of its dispatchers' work. The layout is
    /// kept in the database: a member with another partition count is refused unless
    /// `fleet.repartition` (and no other member runs).
    pub async fn run_fleet(
        &self,
        relay: &str,
        fleet: FleetStart,
        ledger: Arc<dyn outbox_core::Ledger>,
        dispatch: outbox_core::DispatchConfig,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<outbox_core::Summary> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                use outbox_core::fleet::{Fleet, FleetConfig};
                use outbox_store_postgres::{
                    AdvisoryLocks, LayoutRequest, PgPartitionRelays, PgStore, establish_layout,
                };
                let store = PgStore::open(config.clone()).await?;
                let request = LayoutRequest {
                    partitions: fleet.partitions,
                    repartition: fleet.repartition,
                    other_members: fleet.other_members,
                };
                let layout = establish_layout(&store, relay, request).await?;
                let locks =
                    Arc::new(AdvisoryLocks::connect(&config.url, relay, layout.partitions).await?);
                let relays = Arc::new(PgPartitionRelays::new(
                    store,
                    Arc::clone(&locks),
                    relay,
                    layout,
                )?);
                let fleet_config = FleetConfig {
                    check_interval: fleet.check_interval,
                    dispatch,
                };
                Fleet::new(locks, relays, ledger, fleet_config)
                    .run(shutdown)
                    .await
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (relay, fleet, ledger, dispatch, shutdown);
                Err(Error::invalid(
                    "partitions",
                    "a relay fleet shares partitions through PostgreSQL locks: use a postgres:// database",
                ))
            }
        }
    }
}

#[cfg(feature = "sqlite")]
fn sqlite_enqueue_all(
    config: &outbox_store_sqlite::SqliteConfig,
    events: &[(usize, NewEvent)],
    progress: &indicatif::ProgressBar,
) -> Result<Vec<OutboxEvent>> {
    use outbox_store_sqlite::{connect, enqueue, map_error, migrate};
    let mut conn = connect(config)?;
    migrate(&mut conn)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let mut stored = Vec::with_capacity(events.len());
    for (line, event) in events {
        stored.push(enqueue(&tx, event).map_err(|e| e.with("line", line))?);
        progress.inc(1);
    }
    tx.commit().map_err(map_error)?;
    Ok(stored)
}
