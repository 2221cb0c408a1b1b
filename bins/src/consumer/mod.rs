//! The reference consumer: applies the ledger's events to a treasury table through
//! the inbox, one database transaction per message (SQLite or PostgreSQL).

mod impact;
mod stats;
#[cfg(feature = "sqlite")]
mod treasury;
#[cfg(feature = "postgres")]
mod treasury_pg;

pub use impact::{Delta, deltas};
pub use stats::ConsumerStats;
#[cfg(feature = "sqlite")]
pub use treasury::TreasuryConsumer;
#[cfg(feature = "postgres")]
pub use treasury_pg::{PgTreasuryConsumer, write_impact};
