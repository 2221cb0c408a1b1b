#![doc = include_str!("../README.md")]

mod audit;
mod config;
mod connection;
mod enqueue;
mod error;
mod exceptions;
mod fanout;
mod fanout_append;
mod fanout_dead_letters;
mod group_commit;
mod inbox;
pub mod position;
mod reconcile;
mod relay_lock;
mod retention;
mod shared;
mod status;
mod store;
mod time;
mod wakeup;

pub use audit::SqliteAuditReader;
pub use config::SqliteConfig;
pub use connection::{connect, current_schema_version, migrate};
pub use enqueue::enqueue;
pub use error::map as map_error;
pub use fanout::SqliteFanoutStore;
pub use group_commit::{GroupCommit, WriteFn};
pub use inbox::SqliteInbox;
pub use relay_lock::RelayLock;
pub use retention::{apply_retention, load_retention_policy, save_retention_policy};
pub use store::SqliteStore;
