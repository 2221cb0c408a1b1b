//! The duplicate-post probe: the six steps of `outbox probe`, run on stored payload
//! bytes against a ledger of the probe's own (the embedded dev ledger, or a fresh
//! ledger on a Formance server). `outbox check` runs steps 1–4 and 6 of it on a
//! sample of a deployment's most recent payloads.

mod funding;
#[cfg(feature = "sqlite")]
mod hold_proxy;
mod ledger;
mod payload;
#[cfg(feature = "sqlite")]
mod relay_crash;
mod report;
mod steps;

use outbox_core::{Error, ErrorKind, EventId, Result};

pub use funding::Funding;
pub use ledger::{Answer, ProbeLedger};
pub use payload::{ProbePayload, Request};
pub use report::{BadLine, PayloadReport, ProbeReport, STEP_NAMES, StepResult, Summary, Verdict};
pub use steps::{Ledgers, Posted, idempotency_steps};

/// Which ledger server the probe's ledgers live on.
#[derive(Debug, Clone)]
pub enum Target {
    /// A dev ledger started in this process, in memory.
    Embedded,
    /// A Formance v2 API root (a sandbox), or a dev ledger run elsewhere.
    Url {
        url: String,
        token: Option<String>,
        /// The probe ledger's name; default `outbox-probe-<id>`.
        ledger_name: Option<String>,
        /// Post into a named ledger even when it already holds transactions.
        allow_existing: bool,
    },
}

/// A probe's ledgers, ready and funded, on the server [`Target`] names.
#[derive(Debug)]
pub struct Session {
    pub ledgers: Ledgers,
    /// `outbox-probe-<id>-step5`, for the relay path (`None` without step 5).
    pub relay_ledger: Option<String>,
    pub target: String,
    pub is_dev_ledger: bool,
    #[cfg(feature = "dev-ledger")]
    embedded: Option<outbox_ledger_dev::RunningDevLedger>,
}

/// A fresh probe ledger name: `outbox-probe-` and 12 hex digits of a new id.
fn fresh_name() -> String {
    let id = EventId::new().as_uuid().simple().to_string();
    format!("outbox-probe-{}", &id[id.len() - 12..])
}

impl Session {
    /// Starts (or reaches) the ledger server and prepares the probe's ledgers:
    /// `NAME` (steps 1, 2, 4, 6), `NAME-step3` and, with `relay`, `NAME-step5`, each
    /// fresh unless `allow_existing`.
    ///
    /// # Errors
    /// A ledger that holds transactions, a server that cannot be reached, a build
    /// without the dev ledger and no URL.
    pub async fn open(target: &Target, relay: bool) -> Result<Self> {
        #[cfg(feature = "dev-ledger")]
        let mut embedded = None;
        let (client, described, name, allow_existing) = match target {
            Target::Embedded => {
                #[cfg(feature = "dev-ledger")]
                {
                    let ledger = outbox_ledger_dev::DevLedger::start(
                        outbox_ledger_dev::DevLedgerConfig::default(),
                    )
                    .await?;
                    let client = ProbeLedger::new(&ledger.url(), None)?;
                    let described =
                        format!("the embedded dev ledger (in memory, {})", ledger.url());
                    embedded = Some(ledger);
                    (client, described, fresh_name(), false)
                }
                #[cfg(not(feature = "dev-ledger"))]
                return Err(Error::invalid(
                    "ledger_url",
                    "this build has no embedded dev ledger (feature `dev-ledger`): pass --ledger-url of a sandbox",
                ));
            }
            Target::Url {
                url,
                token,
                ledger_name,
                allow_existing,
            } => (
                ProbeLedger::new(url, token.clone())?,
                url.clone(),
                ledger_name.clone().unwrap_or_else(fresh_name),
                *allow_existing,
            ),
        };
        let is_dev_ledger = client.is_dev_ledger().await;
        let concurrent = format!("{name}-step3");
        let relay_ledger = relay.then(|| format!("{name}-step5"));
        for ledger in [Some(&name), Some(&concurrent), relay_ledger.as_ref()]
            .into_iter()
            .flatten()
        {
            client.prepare(ledger, allow_existing).await?;
        }
        Ok(Self {
            ledgers: Ledgers {
                client,
                main: name,
                concurrent,
            },
            relay_ledger,
            target: described,
            is_dev_ledger,
            #[cfg(feature = "dev-ledger")]
            embedded,
        })
    }

    pub fn ledger_names(&self) -> Vec<String> {
        [&self.ledgers.main, &self.ledgers.concurrent]
            .into_iter()
            .chain(self.relay_ledger.as_ref())
            .cloned()
            .collect()
    }

    /// Credits every debited account from `@world` in each probe ledger.
    ///
    /// # Errors
    /// The ledger's refusal of a funding transaction.
    pub async fn fund(&self, funding: &Funding) -> Result<()> {
        for ledger in self.ledger_names() {
            funding.post(&self.ledgers.client, &ledger).await?;
        }
        Ok(())
    }

    /// Stops the embedded dev ledger, if any.
    pub async fn close(self) {
        #[cfg(feature = "dev-ledger")]
        if let Some(ledger) = self.embedded {
            ledger.shutdown().await;
        }
    }
}

/// The report entry of `payload`, with `steps` in step order.
pub fn payload_report(payload: &ProbePayload, mut steps: Vec<StepResult>) -> PayloadReport {
    steps.sort_by_key(|s| s.step);
    PayloadReport {
        label: payload.label.clone(),
        line: payload.line,
        account: payload.event.account.to_string(),
        event_id: payload.event.event_id.to_string(),
        kind: payload.kind(),
        reference: payload.reference().map(str::to_owned),
        reverts: match &payload.request {
            Request::Revert { target, .. } => Some(target.to_string()),
            Request::Post { .. } => None,
        },
        steps,
    }
}

/// An empty report of a session, for the caller to fill.
pub fn empty_report(session: &Session) -> ProbeReport {
    ProbeReport {
        target: session.target.clone(),
        ledgers: session.ledger_names(),
        funded: Vec::new(),
        crash_window: None,
        notes: Vec::new(),
        bad_lines: Vec::new(),
        payloads: Vec::new(),
        summary: Summary::default(),
    }
}

/// An error for a probe that could not run (not a probe that found a problem).
pub fn probe_error(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, what)
}

#[cfg(feature = "sqlite")]
pub use relay_crash::{CrashWindow, RelayPath};

/// Step 5's crash window through a loopback proxy in front of the session's ledger.
///
/// # Errors
/// When the proxy cannot bind a loopback port.
#[cfg(feature = "sqlite")]
pub async fn proxy_window(session: &Session) -> Result<CrashWindow> {
    Ok(CrashWindow::Proxy(
        hold_proxy::HoldingProxy::start(session.ledgers.client.base_url()).await?,
    ))
}
