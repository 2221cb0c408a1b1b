//! Catch-up from the ledger's log: `outbox fanout catch-up` (one run, printed), and
//! the periodic run `outbox fanout --ledger-url` starts beside the intake and loops.
//! Both append to the fan-out store what the webhooks never brought
//! (`outbox_core::CatchUp`, reading `outbox_ledger_formance::FormanceLedgerLog`).

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{CatchUp, FanoutMessage, FanoutStore, LedgerLogSource, Result, Wakeup};
use outbox_ledger_formance::{
    AuthConfig, FormanceConfig, FormanceLedger, FormanceLedgerLog, Secret,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::{CatchUpArgs, FanoutArgs};
use crate::wiring;

/// The ledger's log through the Formance client (same auth and timeouts as the relay's).
fn ledger_log(url: &str, name: &str, token: Option<&str>) -> Result<Arc<FormanceLedgerLog>> {
    let mut config = FormanceConfig::new(url, name);
    if let Some(token) = token {
        config.auth = AuthConfig::Bearer {
            token: Secret::new(token),
        };
    }
    let client =
        FormanceLedger::new(&config).map_err(|e| e.with("flag", "--ledger-url / --ledger-name"))?;
    Ok(Arc::new(FormanceLedgerLog::new(Arc::new(client))))
}

/// `outbox fanout catch-up`: one run to the end of the log (no settle time: the
/// operator asks for everything now); prints each appended message, then the report
/// (or only the report, as JSON).
pub async fn run_once(args: CatchUpArgs) -> Result<()> {
    let log = ledger_log(
        &args.ledger.url,
        &args.ledger.name,
        args.ledger.token.as_deref(),
    )?;
    let store = wiring::fanout_store(&args.database).await?;
    let catch_up = CatchUp::new(store, log);
    let json = args.json;
    let mut print = |log_id: u64, message: &FanoutMessage| {
        if !json {
            println!(
                "catch-up: appended log {log_id}: {} {} #{} (instruction {}{})",
                message.kind.as_str(),
                message.account,
                message.sequence,
                message.instruction_id,
                message
                    .ledger_tx_id
                    .map(|tx| format!(", ledger tx {tx}"))
                    .unwrap_or_default()
            );
        }
    };
    let report = catch_up.run_once(args.since, &mut print).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ledger": args.ledger.name,
                "after": report.after,
                "through": report.through,
                "logs": report.logs,
                "messages": report.messages,
                "appended": report.appended,
                "duplicates": report.duplicates,
                "checkpoint": report.checkpoint,
            })
        );
    } else {
        println!(
            "catch-up {}: read {} log entries after {} through {}, {} messages: appended {}, duplicates {}; checkpoint {}",
            args.ledger.name,
            report.logs,
            report.after,
            report.through,
            report.messages,
            report.appended,
            report.duplicates,
            report.checkpoint
        );
    }
    Ok(())
}

/// The periodic catch-up `outbox fanout --ledger-url` runs, checked before anything
/// starts and spawned once the store and the loops' wake-up exist.
pub struct Periodic {
    log: Arc<FormanceLedgerLog>,
    interval: Duration,
    settle: Duration,
}

impl Periodic {
    /// `None` without `--ledger-url`.
    ///
    /// # Errors
    /// A bad `--ledger-url` / `--ledger-name`, named.
    pub fn from_args(args: &FanoutArgs) -> Result<Option<Self>> {
        let (Some(url), Some(name)) = (&args.ledger_url, &args.ledger_name) else {
            return Ok(None);
        };
        Ok(Some(Self {
            log: ledger_log(url, name, args.ledger_token.as_deref())?,
            interval: Duration::from_secs(args.catch_up_interval_secs),
            settle: Duration::from_secs(args.catch_up_settle_secs),
        }))
    }

    /// Runs a catch-up at once, then every interval, until `stopped`.
    pub fn spawn(
        self,
        store: Arc<dyn FanoutStore>,
        wakeup: Wakeup,
        stopped: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        println!(
            "fanout: catching up from ledger {} every {}s",
            self.log.ledger(),
            self.interval.as_secs()
        );
        let catch_up = CatchUp::new(store, self.log)
            .with_settle(self.settle)
            .with_wakeup(wakeup);
        tokio::spawn(catch_up.run_every(self.interval, stopped))
    }
}
