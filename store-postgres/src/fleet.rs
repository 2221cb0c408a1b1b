//! Partition ownership for several relay processes: session advisory locks on one
//! dedicated connection per process (`outbox_core::fleet::PartitionLocks`).
//!
//! A session lock needs no lease renewal and no clock: it is held exactly as long as
//! the database session lives, and PostgreSQL drops it the moment the process dies
//! (SIGKILL closes its socket), so another instance can take over at its next check.
//! Live instances are counted from `pg_stat_activity` by application name.

use std::collections::BTreeSet;

use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::fleet::{PartitionLocks, PartitionRelays};
use outbox_core::{Error, ErrorKind, Relay, Result, Store};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::Mutex;

use crate::error::map_error;
use crate::fleet_layout::FleetLayout;
use crate::store::PgStore;

/// The fencing facts a partition's store needs: who holds which lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// Backend pid of the session holding the locks.
    pub holder_pid: i32,
    /// First advisory-lock key (derived from the relay name); the partition is the second.
    pub lock_class: i32,
    pub partition: u32,
}

/// Session advisory locks, one per owned partition, on a dedicated connection.
#[derive(Debug)]
pub struct AdvisoryLocks {
    conn: Mutex<PgConnection>,
    application_name: String,
    lock_class: i32,
    holder_pid: i32,
    partitions: u32,
    held: Mutex<BTreeSet<u32>>,
}

impl AdvisoryLocks {
    /// Connects the lock session for relay `relay` sharing `partitions` partitions.
    pub async fn connect(url: &str, relay: &str, partitions: u32) -> Result<Self> {
        if partitions == 0 {
            return Err(Error::invalid(
                "partitions",
                "at least one partition is required",
            ));
        }
        if !relay
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Error::invalid(
                "relay",
                format!("{relay:?}: use letters, digits, - and _ only"),
            ));
        }
        // A random suffix keeps instances apart in pg_stat_activity.
        let application_name = format!("outbox-relay:{relay}:{}", uuid::Uuid::now_v7().simple());
        let options: PgConnectOptions = url
            .parse::<PgConnectOptions>()
            .map_err(|e| Error::invalid("database", e.to_string()))?
            .application_name(&application_name);
        let mut conn = options.connect().await.map_err(map_error)?;
        let (holder_pid, lock_class): (i32, i32) =
            sqlx::query_as("SELECT pg_backend_pid(), hashtext('outbox-relay:' || $1)")
                .bind(relay)
                .fetch_one(&mut conn)
                .await
                .map_err(map_error)?;
        Ok(Self {
            conn: Mutex::new(conn),
            application_name,
            lock_class,
            holder_pid,
            partitions,
            held: Mutex::new(BTreeSet::new()),
        })
    }

    /// The fence a partition's store checks before writing its cursor.
    pub fn fence(&self, partition: u32) -> Fence {
        Fence {
            holder_pid: self.holder_pid,
            lock_class: self.lock_class,
            partition,
        }
    }

    fn prefix(&self) -> &str {
        self.application_name
            .rsplit_once(':')
            .map_or("", |(prefix, _)| prefix)
    }
}

#[async_trait]
impl PartitionLocks for AdvisoryLocks {
    fn partitions(&self) -> u32 {
        self.partitions
    }

    async fn live_instances(&self) -> Result<u32> {
        let mut conn = self.conn.lock().await;
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, $1 || ':')",
        )
        .bind(self.prefix())
        .fetch_one(&mut *conn)
        .await
        .map_err(map_error)?;
        Ok(u32::try_from(live).unwrap_or(u32::MAX))
    }

    async fn try_acquire(&self, partition: u32) -> Result<bool> {
        let mut held = self.held.lock().await;
        if held.contains(&partition) {
            return Ok(true);
        }
        let mut conn = self.conn.lock().await;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
            .bind(self.lock_class)
            .bind(partition as i32)
            .fetch_one(&mut *conn)
            .await
            .map_err(map_error)?;
        if got {
            held.insert(partition);
        }
        Ok(got)
    }

    async fn release(&self, partition: u32) -> Result<()> {
        let mut held = self.held.lock().await;
        if held.remove(&partition) {
            let mut conn = self.conn.lock().await;
            sqlx::query("SELECT pg_advisory_unlock($1, $2)")
                .bind(self.lock_class)
                .bind(partition as i32)
                .execute(&mut *conn)
                .await
                .map_err(map_error)?;
        }
        Ok(())
    }

    async fn still_held(&self) -> Result<bool> {
        let held = self.held.lock().await.len() as i64;
        let mut conn = self.conn.lock().await;
        // Any failure of the lock session means the locks may be gone.
        if conn.ping().await.is_err() {
            return Ok(false);
        }
        let granted: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND classid = $1::int4::oid",
        )
        .bind(self.lock_class)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| Error::new(ErrorKind::Storage, e.to_string()).transient(None))?;
        Ok(granted == held)
    }
}

/// Opens each owned partition as a fenced view of the store with its own polling
/// relay and cursor (`<relay>:g<generation>:p<n>`, see [`FleetLayout`]).
#[derive(Debug, Clone)]
pub struct PgPartitionRelays {
    store: PgStore,
    locks: Arc<AdvisoryLocks>,
    relay: String,
    layout: FleetLayout,
}

impl PgPartitionRelays {
    /// `layout` as [`crate::establish_layout`] returned it; `locks` must share its
    /// partition count.
    ///
    /// # Errors
    /// `InvalidInput` when the locks were taken for another partition count.
    pub fn new(
        store: PgStore,
        locks: Arc<AdvisoryLocks>,
        relay: impl Into<String>,
        layout: FleetLayout,
    ) -> Result<Self> {
        if locks.partitions() != layout.partitions {
            return Err(Error::invalid(
                "partitions",
                format!(
                    "the partition locks cover {} partitions, the layout {}",
                    locks.partitions(),
                    layout.partitions
                ),
            ));
        }
        Ok(Self {
            store,
            locks,
            relay: relay.into(),
            layout,
        })
    }
}

#[async_trait]
impl PartitionRelays for PgPartitionRelays {
    async fn open(&self, partition: u32) -> Result<(Arc<dyn Store>, Box<dyn Relay>)> {
        let view = self.store.partition_view(
            partition,
            self.locks.partitions(),
            Some(self.locks.fence(partition)),
        )?;
        let relay = view
            .polling_relay(&self.layout.cursor_name(&self.relay, partition))
            .await?;
        Ok((Arc::new(view), Box::new(relay)))
    }
}
