//! The reference consumer: applies the ledger's events to a treasury table through
//! the inbox, inside one SQLite transaction per message.

mod treasury;

pub use treasury::{ConsumerStats, TreasuryConsumer};
