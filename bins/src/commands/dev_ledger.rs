//! `outbox dev-ledger`: the local Formance-compatible ledger, with the admin server
//! of the long-running commands when `--admin-listen` is given.

use outbox_core::Result;
use outbox_ledger_dev::{DevLedger, DevLedgerArgs};

use super::signal::stop_on_signal;
use crate::cli::AdminArgs;
use crate::config::Settings;

#[derive(Debug, Clone, clap::Args)]
pub struct DevLedgerCli {
    #[command(flatten)]
    pub ledger: DevLedgerArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
}

pub async fn run(cli: DevLedgerCli, settings: &Settings) -> Result<()> {
    let ledger = DevLedger::start(cli.ledger.to_config()?).await?;
    println!("dev ledger listening on {}", ledger.url());
    let mut stopped = stop_on_signal("stopping the dev ledger");
    let admin =
        crate::admin::for_dev_ledger(&settings.admin, &cli.ledger, &ledger.url(), stopped.clone())
            .await?;
    let _ = stopped.wait_for(|stop| *stop).await;
    drop(admin);
    ledger.shutdown().await;
    Ok(())
}
