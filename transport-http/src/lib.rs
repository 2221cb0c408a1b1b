#![doc = include_str!("../README.md")]

mod config;
mod error;
mod intake;
mod ledger_events;
mod ledger_log;
mod publisher;
mod receiver;
mod subscriber;

pub use config::{PublisherConfig, ReceiverConfig, SubscriberConfig};
pub use intake::{FanoutIntake, start_intake};
pub use ledger_events::{LedgerEvent, TraceContext, messages_from_log, messages_from_webhook};
pub use ledger_log::FormanceLedgerLog;
pub use publisher::HttpPublisher;
pub use receiver::{RunningReceiver, WEBHOOK_PATH, start_receiver};
pub use subscriber::{HttpSubscriber, MESSAGES_PATH};
