#![doc = include_str!("../README.md")]

mod audit;
pub mod cdc;
mod config;
mod connection;
mod cursors;
mod enqueue;
mod error;
mod exceptions;
mod fanout;
mod fanout_dead_letters;
mod fleet;
mod fleet_layout;
mod horizon;
mod inbox;
mod notify;
pub mod partitions;
mod payload_split;
mod position;
mod reconcile;
mod relay_lock;
mod retention;
mod status;
mod store;

pub use audit::PgAuditReader;
pub use config::PgConfig;
pub use connection::{MIGRATIONS_TABLE, connect, current_schema_version, migrate};
pub use enqueue::{EnqueueOptions, enqueue, enqueue_with};
pub use error::{APPEND_ONLY_SQLSTATE, map_error};
pub use fanout::{DEFAULT_APPEND_LOCK_TIMEOUT, PgFanoutStore};
pub use fleet::{AdvisoryLocks, Fence, PgPartitionRelays};
pub use fleet_layout::{FleetLayout, LayoutRequest, establish_layout};
pub use horizon::{Horizon, HorizonHolder};
pub use inbox::PgInbox;
pub use notify::NOTIFY_CHANNEL;
pub use partitions::{PartitionBounds, TablePartition};
pub use position::PgPosition;
pub use relay_lock::{LockMode, PgRelayLock};
pub use retention::{
    PartitionReport, RetentionOptions, apply_retention, drop_expired, load_retention_policy,
    save_retention_policy,
};
pub use store::PgStore;
