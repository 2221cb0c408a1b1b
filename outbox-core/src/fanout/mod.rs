//! Hop 2: the ledger's events, stored by the webhook intake in a [`FanoutStore`] and
//! published to every transport by the fan-out loop; consumers receive them through a
//! [`Subscriber`] that feeds a [`MessageSink`] (their inbox transaction).
//!
//! ```text
//! ledger ─webhook─▶ intake ─append─▶ FanoutStore ─read_after(cursor per transport)─▶ Publisher
//! ledger log ─CatchUp (what webhooks missed)─▶ ┘        Subscriber ─▶ MessageSink (inbox)
//! ```

mod catch_up;
mod config;
mod engine;
pub mod headers;
mod message;
mod publisher;
mod store;
mod subscriber;

pub use catch_up::{
    CatchUp, CatchUpReport, DEFAULT_CATCH_UP_PAGE, LedgerLogEntry, LedgerLogSource,
};
pub use config::{FanoutConfig, FanoutSummary};
pub use engine::FanoutLoop;
pub use message::FanoutMessage;
pub use publisher::{Publisher, PublisherCapabilities};
pub use store::{AppendOutcome, FanoutStore, StoredMessage};
pub use subscriber::{MessageSink, Subscriber};

#[cfg(test)]
mod catch_up_tests;
#[cfg(test)]
mod tests;
