//! Hop 2: the ledger's events, stored by the webhook intake in a [`FanoutStore`] and
//! published to every transport by the fan-out loop; consumers receive them through a
//! [`Subscriber`] that feeds a [`MessageSink`] (their inbox transaction).
//!
//! ```text
//! ledger ─webhook─▶ intake ─append─▶ FanoutStore ─read_after(cursor per transport)─▶ Publisher
//!                                        ▲ dead letters, replay requests   │ refused for good
//!                                        └─────────────────────────────────┘
//!                                                                    Subscriber ─▶ MessageSink (inbox)
//! ```

mod config;
pub mod dead_letter;
mod engine;
pub mod headers;
mod message;
mod publisher;
mod retry;
mod set_aside;
mod store;
mod subscriber;

pub use config::{FanoutConfig, FanoutSummary};
pub use dead_letter::{
    DeadLetter, DeadLetterAccount, DeadLetterQuery, DeadLetterReason, DeadLetterState,
    NewDeadLetter, ReplayRequest,
};
pub use engine::FanoutLoop;
pub use message::FanoutMessage;
pub use publisher::{Publisher, PublisherCapabilities};
pub use retry::StoreRetry;
pub use store::{AppendOutcome, FanoutStore, StoredMessage};
pub use subscriber::{MessageSink, Subscriber};

#[cfg(test)]
mod tests;
