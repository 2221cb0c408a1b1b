//! Starting and stopping a dev ledger: journal, engine, webhook dispatcher, HTTP.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{Error, ErrorKind, Result};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{DevLedgerConfig, DevLedgerStats};
use crate::engine::Engine;
use crate::faults::{FaultInjector, FaultLayer};
use crate::persistence::Journal;
use crate::routes::{self, AppState};
use crate::webhooks::{self, DeliveryJournal, WebhookQueue};

/// How long `shutdown` waits for in-flight requests before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Entry point: `DevLedger::start(config)`.
#[derive(Debug, Clone, Copy)]
pub struct DevLedger;

impl DevLedger {
    /// Opens (or creates) the data file, replays its log, creates the configured
    /// ledgers, resumes pending webhook deliveries and starts serving.
    ///
    /// # Errors
    /// `Storage` when the file cannot be opened or decoded, `Config` for an invalid
    /// ledger name or an address that cannot be bound.
    pub async fn start(config: DevLedgerConfig) -> Result<RunningDevLedger> {
        let data = config.data.clone();
        let journal = tokio::task::spawn_blocking(move || Journal::open(data.as_deref()))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("opening the journal panicked: {e}"),
                )
            })??;
        let (queue, wake) = WebhookQueue::new(&config.webhooks);
        let counters = Arc::clone(&queue.counters);
        let bulk_max_size = config.bulk_max_size;
        let faults = FaultInjector::default();
        let engine_faults = faults.clone();
        let (engine, pending) = tokio::task::spawn_blocking(move || {
            Engine::open(journal, queue, bulk_max_size, engine_faults)
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("replaying the journal panicked: {e}"),
            )
        })??;
        let engine = Arc::new(engine);
        for name in &config.create_ledgers {
            let created = {
                let engine = Arc::clone(&engine);
                let name = name.clone();
                tokio::task::spawn_blocking(move || engine.ensure_ledger(&name)).await
            };
            match created {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(Error::new(ErrorKind::Config, e.message).with("ledger", name));
                }
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!("creating a ledger panicked: {e}"),
                    ));
                }
            }
        }
        if pending > 0 {
            tracing::info!(count = pending, "resuming pending webhook deliveries");
        }
        engine
            .webhooks()
            .announce(usize::try_from(pending).unwrap_or(usize::MAX));

        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| {
                Error::new(ErrorKind::Config, format!("cannot listen: {e}"))
                    .with("listen", config.listen)
            })?;
        let addr = listener.local_addr().map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("cannot read the bound address: {e}"),
            )
        })?;

        let (shutdown, shutdown_rx) = watch::channel(false);
        let journal: Arc<dyn DeliveryJournal> = Arc::clone(&engine) as Arc<dyn DeliveryJournal>;
        let dispatcher = tokio::spawn(webhooks::run_dispatcher(
            wake,
            config.webhooks.clone(),
            config.webhook_backoff,
            counters,
            journal,
            shutdown_rx.clone(),
        ));

        let router = routes::router(
            AppState {
                engine: Arc::clone(&engine),
                faults: faults.clone(),
            },
            FaultLayer {
                injector: faults.clone(),
                shutdown: shutdown_rx.clone(),
            },
        );
        let mut stop = shutdown_rx;
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        });
        tracing::info!(%addr, data = ?config.data, webhooks = config.webhooks.len(), "dev ledger listening");
        Ok(RunningDevLedger {
            addr,
            faults,
            engine,
            shutdown,
            server: Some(server),
            dispatcher: Some(dispatcher),
        })
    }
}

/// A dev ledger serving in the background. Dropping it stops serving as well;
/// [`RunningDevLedger::shutdown`] also waits until it has stopped.
#[derive(Debug)]
pub struct RunningDevLedger {
    addr: SocketAddr,
    faults: FaultInjector,
    engine: Arc<Engine>,
    shutdown: watch::Sender<bool>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    dispatcher: Option<JoinHandle<()>>,
}

impl RunningDevLedger {
    /// The bound address (the real port when the config asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for clients, e.g. `http://127.0.0.1:40123`; a wildcard listen
    /// address is reported as loopback.
    pub fn url(&self) -> String {
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.addr.port()))
    }

    /// The fault plan of the write routes (shared with `POST /_dev/faults`).
    pub fn faults(&self) -> FaultInjector {
        self.faults.clone()
    }

    pub fn stats(&self) -> DevLedgerStats {
        DevLedgerStats {
            faults_injected: self.faults.injected(),
            ..self.engine.stats()
        }
    }

    /// Stops accepting requests, lets in-flight ones finish (held fault answers
    /// are released), and stops webhook deliveries; unfinished deliveries stay
    /// pending in the data file and resume at the next start.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            let abort = server.abort_handle();
            match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(error = %e, "dev ledger server stopped with an error")
                }
                Ok(Err(e)) if e.is_cancelled() => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "dev ledger server task failed"),
                Err(_) => {
                    tracing::warn!(
                        "in-flight requests did not finish within {SHUTDOWN_GRACE:?}; cutting them"
                    );
                    abort.abort();
                }
            }
        }
        if let Some(dispatcher) = self.dispatcher.take() {
            let _ = dispatcher.await;
        }
        tracing::info!(addr = %self.addr, "dev ledger stopped");
    }
}

impl Drop for RunningDevLedger {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}
