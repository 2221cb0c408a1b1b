//! The admin server of the long-running commands (`relay`, `fanout`, `consume`,
//! `dev-ledger`): `/metrics` (Prometheus text), `/healthz` (liveness: the process
//! answers) and `/readyz` (readiness: store reachable, ledger reachable where the
//! command has one, every loop alive; 503 with a plain reason otherwise, and while
//! draining after a stop signal). Off unless `--admin-listen` is given.
//!
//! The metrics themselves are recorded through the `metrics` facade where the work
//! happens (`outbox_core::metrics`); this module installs the Prometheus recorder,
//! samples the database gauges ([`Sampler`]) and serves the text.

mod commands;
pub mod dev_ledger;
mod health;
mod identity;
mod recorder;
mod sampler;
mod server;

pub use commands::{Admin, for_consume, for_dev_ledger, for_fanout, for_relay, loop_ended};
pub use health::Health;
pub use identity::config_identity;
pub use sampler::{Sampler, Scope};
pub use server::AdminServer;
