//! The periodic reading behind the database gauges (backlogs, gaps, open
//! exceptions, the PostgreSQL horizon and slot) and the readiness conditions
//! "store reachable" and "ledger reachable". It reads through
//! [`crate::status::gather`], the code `outbox status` prints from.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use outbox_core::Result;
use outbox_core::metrics as m;
use outbox_core::status::StatusReader;

use super::health::Health;
use crate::status::gather;

/// What one process's sampler reads.
#[derive(Debug, Clone)]
pub enum Scope {
    /// A relay: its backlog (not for a fleet member, whose cursors are per
    /// partition), the horizon on PostgreSQL, its CDC slot's WAL.
    Relay {
        name: String,
        fleet: bool,
        cdc_slot: Option<String>,
    },
    /// A fan-out daemon: each destination's backlog.
    Fanout { destinations: Vec<String> },
    /// A consumer: its gap queue.
    Consumer { name: String },
}

/// Where the ledger answers, for the "ledger reachable" condition: the command's own
/// Formance client (same authentication, OAuth2 included), reading the `world`
/// account — a read every ledger answers, and a missing ledger is an error.
#[derive(Debug, Clone)]
pub struct LedgerProbe {
    client: std::sync::Arc<outbox_ledger_formance::FormanceLedger>,
}

impl LedgerProbe {
    /// # Errors
    /// A bad `[ledger]` configuration, named.
    pub fn new(ledger: &crate::config::LedgerSettings) -> outbox_core::Result<Self> {
        let mut config = ledger.formance_config()?;
        config.request_timeout_ms = config.request_timeout_ms.min(5_000);
        Ok(Self {
            client: std::sync::Arc::new(outbox_ledger_formance::FormanceLedger::new(&config)?),
        })
    }

    /// `None` when the ledger answered, else what went wrong.
    async fn problem(&self) -> Option<String> {
        let world = outbox_core::Account::parse("world").ok()?;
        match self.client.account(&world).await {
            Ok(_) => None,
            Err(e) => Some(format!("ledger {}: {e}", self.client.ledger_name())),
        }
    }
}

/// Reads every `interval` until dropped (its task is aborted with the admin server).
pub struct Sampler {
    reader: Arc<dyn StatusReader>,
    scope: Scope,
    health: Arc<Health>,
    handle: PrometheusHandle,
    ledger: Option<LedgerProbe>,
    interval: Duration,
    /// Exception kinds and severities given a value, so a resolved one goes to 0.
    exception_series: BTreeSet<(&'static str, &'static str)>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("scope", &self.scope)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    pub fn new(
        reader: Arc<dyn StatusReader>,
        scope: Scope,
        health: Arc<Health>,
        handle: PrometheusHandle,
        interval: Duration,
    ) -> Self {
        health.set("store", Some("not read yet".to_owned()));
        Self {
            reader,
            scope,
            health,
            handle,
            ledger: None,
            interval,
            exception_series: BTreeSet::new(),
        }
    }

    /// Also checks that the ledger answers.
    pub fn with_ledger(mut self, probe: LedgerProbe) -> Self {
        self.health
            .set("ledger", Some("not checked yet".to_owned()));
        self.ledger = Some(probe);
        self
    }

    pub fn spawn(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                self.tick().await;
                tokio::time::sleep(self.interval).await;
            }
        })
    }

    /// One reading: gauges, then the readiness conditions.
    pub async fn tick(&mut self) {
        let read = self.read().await;
        m::set_store_up(read.is_ok());
        if let Err(e) = &read {
            tracing::warn!(error = %e, "metrics sampler: reading the database failed");
        }
        self.health
            .set("store", read.err().map(|e| format!("unreachable: {e}")));
        if let Some(probe) = &self.ledger {
            self.health.set("ledger", probe.problem().await);
        }
        // Histograms keep their samples until upkeep folds them in.
        self.handle.run_upkeep();
    }

    async fn read(&mut self) -> Result<()> {
        let reader = self.reader.as_ref();
        match &self.scope {
            Scope::Relay {
                name,
                fleet,
                cdc_slot,
            } => {
                if !fleet {
                    for relay in gather::relays(reader, Some(name)).await? {
                        if let Some(backlog) = relay.backlog {
                            m::set_relay_backlog(name, backlog.pending, backlog.oldest_at);
                        }
                    }
                }
                if let Some(horizon) = reader.horizon().await? {
                    m::set_postgres_horizon(horizon.oldest_age, horizon.held_back);
                }
                if let Some(slot) = cdc_slot
                    && let Some(bytes) = reader.slot_retained_wal_bytes(slot).await?
                {
                    m::set_cdc_slot_wal(slot, bytes);
                }
            }
            Scope::Fanout { destinations } => {
                for d in gather::destinations(reader, Some(destinations)).await? {
                    m::set_fanout_backlog(&d.destination, d.backlog.pending, d.backlog.oldest_at);
                }
            }
            Scope::Consumer { name } => {
                let gaps = reader.gaps().await?;
                let (accounts, oldest) = gather::gap_summary(&gaps, name);
                m::set_inbox_gaps(name, accounts, oldest);
            }
        }
        let counts = gather::exception_counts(&reader.open_exceptions().await?);
        for series in &self.exception_series {
            if !counts.contains_key(series) {
                m::set_open_exceptions(series.0, series.1, 0);
            }
        }
        for (&(kind, severity), &count) in &counts {
            m::set_open_exceptions(kind, severity, count);
            self.exception_series.insert((kind, severity));
        }
        Ok(())
    }
}
