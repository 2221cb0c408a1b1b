//! The `outbox` binary's library half: commands, adapter wiring, the reference
//! treasury consumer and the demo, so end-to-end tests can drive them directly.

pub mod admin;
pub mod audit;
pub mod check;
pub mod cli;
pub mod commands;
pub mod config;
pub mod consumer;
#[cfg(all(feature = "sqlite", feature = "http", feature = "dev-ledger"))]
pub mod demo;
pub mod exit;
pub mod probe;
pub mod progress;
pub mod status;
pub mod telemetry;
pub mod wiring;
