#![doc = include_str!("../README.md")]

mod bulk;
mod cli;
mod clock;
mod commands;
mod config;
mod controller;
mod engine;
mod errors;
mod events;
mod faults;
mod features;
#[doc(hidden)]
pub mod fuzzing;
mod history;
mod idempotency;
mod listing;
mod log;
mod log_hash;
mod log_tamper;
mod logs;
mod model;
mod names;
mod numscript;
mod params;
mod persistence;
mod query;
mod reads;
mod routes;
mod server;
mod state;
mod stored_log;
mod stored_metadata;
mod stored_transaction;
mod stored_volumes;
mod undo;
mod webhooks;

pub use cli::{DevLedgerArgs, run_cli};
pub use config::{
    DEFAULT_BULK_MAX_SIZE, DevLedgerConfig, DevLedgerStats, WebhookBackoff, WebhookTarget,
};
pub use faults::{FaultInjector, FaultPlan, QueuedAnswer};
pub use server::{DevLedger, RunningDevLedger};
