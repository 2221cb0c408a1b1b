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

use std::net::SocketAddr;
use std::time::Duration;

pub use commands::{Admin, for_consume, for_dev_ledger, for_fanout, for_relay, loop_ended};
pub use health::Health;
pub use identity::config_identity;
pub use sampler::{Sampler, Scope};
pub use server::AdminServer;

/// `--admin-listen` and the sampling interval, flattened into each long-running
/// command's arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AdminArgs {
    /// Serve /metrics, /healthz and /readyz on this address (off unless set).
    #[arg(long, env = "OUTBOX_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// How often the gauges read from the database are sampled, in milliseconds.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..))]
    pub admin_sample_interval_ms: u64,
}

impl AdminArgs {
    pub fn sample_interval(&self) -> Duration {
        Duration::from_millis(self.admin_sample_interval_ms)
    }
}
