//! Hop 2: the ledger's events, stored by the webhook intake in a [`FanoutStore`] and
//! published to every transport by the fan-out loop; consumers receive them through a
//! [`Subscriber`] that feeds a [`MessageSink`] (their inbox transaction).
//!
//! ```text
//! ledger ─webhook─▶ intake ───────────────────────append─┐
//! ledger log ─CatchUp (what the webhooks missed)──append─┤
//!                                                        ▼
//!                      FanoutStore ─read_after(cursor per transport)─▶ Publisher ─▶ broker
//!                        ▲ dead letters, replay requests                │ refused for good
//!                        └──────────────────────────────────────────────┘
//! broker ─▶ Subscriber ─▶ MessageSink (the consumer's inbox transaction)
//! ```

mod catch_up;
mod config;
pub mod dead_letter;
mod engine;
pub mod headers;
mod message;
mod publisher;
mod set_aside;
mod store;
mod subscriber;
mod webhook;

pub use catch_up::{
    CatchUp, CatchUpReport, DEFAULT_CATCH_UP_PAGE, LedgerLogEntry, LedgerLogSource,
};
pub use config::{FanoutConfig, FanoutSummary};
pub use dead_letter::{
    DeadLetter, DeadLetterAccount, DeadLetterQuery, DeadLetterReason, DeadLetterState,
    NewDeadLetter, ReplayRequest,
};
pub use engine::FanoutLoop;
pub use message::FanoutMessage;
pub use publisher::{Publisher, PublisherCapabilities};
pub use store::{AppendOutcome, FanoutStore, StoredMessage};
pub use subscriber::{MessageSink, Subscriber};
pub use webhook::{RequestHeaders, WebhookDecoder, WebhookDelivery, WebhookRefusal};

#[cfg(test)]
mod catch_up_tests;
#[cfg(test)]
mod tests;
