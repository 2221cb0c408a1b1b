//! Starting the admin server of each long-running command: the recorder, the
//! `outbox_info` series, the sampler of the command's database, the server.

use std::sync::Arc;

use outbox_core::{FanoutSummary, Result, metrics as m};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::health::Health;
use super::sampler::{LedgerProbe, Sampler, Scope};
use super::server::AdminServer;
use super::{config_identity, dev_ledger, recorder};
use crate::config::{AdminSettings, Settings};
use crate::wiring;

/// A running admin server and the tasks feeding it; all stop when it is dropped.
#[derive(Debug)]
pub struct Admin {
    server: AdminServer,
    health: Arc<Health>,
    tasks: Vec<JoinHandle<()>>,
}

impl Admin {
    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The readiness condition of one fan-out destination's loop.
fn loop_condition(destination: &str) -> String {
    format!("fan-out loop {destination}")
}

/// Records that a destination's loop ended (before a stop, the process is no
/// longer ready: that destination is not served).
pub fn loop_ended(health: Option<&Health>, destination: &str, outcome: &Result<FanoutSummary>) {
    if let Some(health) = health {
        let why = match outcome {
            Ok(_) => "ended".to_owned(),
            Err(e) => format!("ended: {e}"),
        };
        health.set(&loop_condition(destination), Some(why));
    }
}

pub(super) fn describe_dev_ledger() {
    dev_ledger::describe();
}

/// Installs the recorder, sets `outbox_info`, and starts the server with `tasks`.
async fn start(
    admin: &AdminSettings,
    settings: &impl std::fmt::Debug,
    stopping: watch::Receiver<bool>,
    sampler: impl FnOnce(Arc<Health>, metrics_exporter_prometheus::PrometheusHandle) -> JoinHandle<()>,
) -> Result<Option<Admin>> {
    let Some(addr) = admin.listen else {
        return Ok(None);
    };
    let handle = recorder::handle()?;
    m::set_info(env!("CARGO_PKG_VERSION"), &config_identity(settings));
    let health = Arc::new(Health::new(stopping));
    let task = sampler(Arc::clone(&health), handle.clone());
    let server = AdminServer::start(addr, handle, Arc::clone(&health)).await?;
    Ok(Some(Admin {
        server,
        health,
        tasks: vec![task],
    }))
}

/// `outbox relay --admin-listen`: the relay's backlog, horizon and slot; ready while
/// the store and the ledger answer and no stop was requested.
pub async fn for_relay(
    settings: &Settings,
    stopping: watch::Receiver<bool>,
) -> Result<Option<Admin>> {
    if settings.admin.listen.is_none() {
        return Ok(None);
    }
    let relay = &settings.relay;
    let database = settings.outbox_database()?;
    // The relay opens (and migrates) its store after this; the read-only reader
    // needs the tables first.
    wiring::database(&database)?.migrate().await?;
    let reader = wiring::status_reader("database", &database).await?;
    let scope = Scope::Relay {
        name: relay.name.clone(),
        fleet: relay.partitions.is_some(),
        cdc_slot: relay.cdc.then(|| wiring::cdc_slot_name(&relay.name)),
    };
    let probe = LedgerProbe::new(&settings.ledger)?;
    let interval = settings.admin.sample_interval();
    start(&settings.admin, settings, stopping, |health, handle| {
        Sampler::new(reader, scope, health, handle, interval)
            .with_ledger(probe)
            .spawn()
    })
    .await
}

/// `outbox fanout --admin-listen`: each destination's backlog; ready while the
/// store (and, with catch-up, its ledger) answers, every loop runs and no stop was
/// requested.
pub async fn for_fanout(
    settings: &Settings,
    destinations: &[String],
    stopping: watch::Receiver<bool>,
) -> Result<Option<Admin>> {
    if settings.admin.listen.is_none() {
        return Ok(None);
    }
    let reader = wiring::status_reader("fanout.database", &settings.fanout_database()?).await?;
    let scope = Scope::Fanout {
        destinations: destinations.to_vec(),
    };
    // With a catch-up ledger, that ledger must answer too.
    let probe = if settings.fanout.catch_up {
        Some(LedgerProbe::new(&settings.ledger)?)
    } else {
        None
    };
    let interval = settings.admin.sample_interval();
    let admin = start(&settings.admin, settings, stopping, |health, handle| {
        let sampler = Sampler::new(reader, scope, health, handle, interval);
        match probe {
            Some(probe) => sampler.with_ledger(probe).spawn(),
            None => sampler.spawn(),
        }
    })
    .await?;
    if let Some(admin) = &admin {
        for destination in destinations {
            admin.health.set(&loop_condition(destination), None);
        }
    }
    Ok(admin)
}

/// `outbox consume --admin-listen`: the consumer's gap queue; ready while its
/// database answers and no stop was requested.
pub async fn for_consume(
    settings: &Settings,
    stopping: watch::Receiver<bool>,
) -> Result<Option<Admin>> {
    if settings.admin.listen.is_none() {
        return Ok(None);
    }
    let reader = wiring::status_reader("consume.database", &settings.consume_database()?).await?;
    let scope = Scope::Consumer {
        name: settings.consume.name.clone(),
    };
    let interval = settings.admin.sample_interval();
    start(&settings.admin, settings, stopping, |health, handle| {
        Sampler::new(reader, scope, health, handle, interval).spawn()
    })
    .await
}

/// `outbox dev-ledger --admin-listen`: the dev ledger's counters, read from its
/// stats route at `ledger_url`.
pub async fn for_dev_ledger(
    admin: &AdminSettings,
    settings: &impl std::fmt::Debug,
    ledger_url: &str,
    stopping: watch::Receiver<bool>,
) -> Result<Option<Admin>> {
    let stats_url = format!("{}/_dev/stats", ledger_url.trim_end_matches('/'));
    let interval = admin.sample_interval();
    start(admin, settings, stopping, |health, handle| {
        dev_ledger::spawn(stats_url, health, handle, interval)
    })
    .await
}
