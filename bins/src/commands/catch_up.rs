//! Catch-up from the ledger's log: `outbox fanout catch-up` (one run, printed), and
//! the periodic run `outbox fanout --ledger-url` starts beside the intake and loops.
//! Both append to the fan-out store what the webhooks never brought
//! (`outbox_core::CatchUp`, reading `outbox_ledger_formance::FormanceLedgerLog`).

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{CatchUp, FanoutMessage, FanoutStore, LedgerLogSource, Result, Wakeup};
use outbox_ledger_formance::{FormanceLedger, FormanceLedgerLog};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::CatchUpArgs;
use crate::config::{LedgerSettings, Settings};
use crate::wiring;

/// The ledger's log through the Formance client (same auth and timeouts as the relay's).
fn ledger_log(ledger: &LedgerSettings) -> Result<Arc<FormanceLedgerLog>> {
    let client = FormanceLedger::new(&ledger.formance_config()?)?;
    Ok(Arc::new(FormanceLedgerLog::new(Arc::new(client))))
}

/// `outbox fanout catch-up`: one run to the end of the log (no settle time: the
/// operator asks for everything now); prints each appended message, then the report
/// (or only the report, as JSON).
pub async fn run_once(args: CatchUpArgs, settings: &Settings) -> Result<()> {
    let log = ledger_log(&settings.ledger)?;
    let ledger_name = log.ledger().to_owned();
    let database = crate::config::fanout_database(args.database.as_deref())?;
    let store = wiring::fanout_store(&database).await?;
    let catch_up = CatchUp::new(store, log);
    let json = args.json;
    let progress = crate::progress::spinner("catch-up: messages appended");
    let mut print = |log_id: u64, message: &FanoutMessage| {
        progress.inc(1);
        if !json {
            progress.suspend(|| {
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
                )
            });
        }
    };
    let report = catch_up.run_once(args.since, &mut print).await;
    progress.finish_and_clear();
    let report = report?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ledger": ledger_name,
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
            ledger_name,
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

/// The periodic catch-up `outbox fanout` runs with `fanout.catch_up` (or
/// `--ledger-url`), checked before anything starts and spawned once the store and the
/// loops' wake-up exist.
pub struct Periodic {
    log: Arc<FormanceLedgerLog>,
    interval: Duration,
    settle: Duration,
}

impl Periodic {
    /// `None` unless `fanout.catch_up` is on.
    ///
    /// # Errors
    /// A missing or bad `ledger.url` / `ledger.name`, named.
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>> {
        if !settings.fanout.catch_up {
            return Ok(None);
        }
        Ok(Some(Self {
            log: ledger_log(&settings.ledger)?,
            interval: Duration::from_secs(settings.fanout.catch_up_interval_secs.max(1)),
            settle: Duration::from_secs(settings.fanout.catch_up_settle_secs),
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
