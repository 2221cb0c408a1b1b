#![doc = include_str!("../README.md")]

mod config;
mod ledger_events;
mod receiver;

pub use config::ReceiverConfig;
pub use ledger_events::{LedgerEvent, messages_from_webhook};
pub use receiver::{MessageSink, RunningReceiver, WEBHOOK_PATH, start_receiver};
