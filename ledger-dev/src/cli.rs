//! `outbox dev-ledger`: command-line options and the run-until-signal loop.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use outbox_core::{Error, ErrorKind, Result};

use crate::config::{DEFAULT_BULK_MAX_SIZE, DevLedgerConfig, WebhookBackoff, WebhookTarget};
use crate::server::DevLedger;

/// Options of `outbox dev-ledger` (flatten into the binary's CLI).
#[derive(Clone, clap::Args)]
pub struct DevLedgerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// SQLite file keeping transactions, balances, idempotency keys and pending
    /// webhooks across restarts; everything stays in memory when absent.
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// Webhook endpoint receiving every ledger event (repeatable).
    #[arg(long = "webhook", value_name = "URL")]
    pub webhooks: Vec<String>,
    /// Secret that signs webhook deliveries (used as-is as the HMAC key).
    #[arg(
        long,
        value_name = "SECRET",
        env = "OUTBOX_DEV_LEDGER_WEBHOOK_SECRET",
        hide_env_values = true
    )]
    pub webhook_secret: Option<String>,
    /// Ledger to create at start if missing (repeatable).
    #[arg(long = "ledger", value_name = "NAME")]
    pub ledgers: Vec<String>,
    /// Most elements one `_bulk` call accepts.
    #[arg(long, default_value_t = DEFAULT_BULK_MAX_SIZE)]
    pub bulk_max_size: usize,
}

impl fmt::Debug for DevLedgerArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevLedgerArgs")
            .field("listen", &self.listen)
            .field("data", &self.data)
            .field("webhooks", &self.webhooks)
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("ledgers", &self.ledgers)
            .field("bulk_max_size", &self.bulk_max_size)
            .finish()
    }
}

impl DevLedgerArgs {
    /// The configuration these options describe.
    ///
    /// # Errors
    /// `Config` when webhooks are given without a secret.
    pub fn to_config(&self) -> Result<DevLedgerConfig> {
        let webhooks = if self.webhooks.is_empty() {
            Vec::new()
        } else {
            let secret = self.webhook_secret.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
                Error::new(
                    ErrorKind::Config,
                    "--webhook needs --webhook-secret (or OUTBOX_DEV_LEDGER_WEBHOOK_SECRET) to sign deliveries",
                )
            })?;
            self.webhooks
                .iter()
                .map(|url| WebhookTarget {
                    url: url.clone(),
                    secret: secret.clone(),
                })
                .collect()
        };
        Ok(DevLedgerConfig {
            listen: self.listen,
            data: self.data.clone(),
            webhooks,
            webhook_backoff: WebhookBackoff::default(),
            bulk_max_size: self.bulk_max_size,
            create_ledgers: self.ledgers.clone(),
        })
    }
}

/// Runs a dev ledger until Ctrl-C or SIGTERM, then shuts it down cleanly.
///
/// # Errors
/// What [`DevLedger::start`] returns, or a `Config` error for invalid options.
pub async fn run_cli(args: DevLedgerArgs) -> Result<()> {
    let ledger = DevLedger::start(args.to_config()?).await?;
    println!("dev ledger listening on {}", ledger.url());
    wait_for_signal().await?;
    ledger.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot listen for SIGTERM: {e}"),
        )
    })?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(|e| Error::new(ErrorKind::Internal, format!("cannot listen for Ctrl-C: {e}"))),
        _ = term.recv() => Ok(()),
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> Result<()> {
    tokio::signal::ctrl_c().await.map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot listen for Ctrl-C: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: DevLedgerArgs,
    }

    #[test]
    fn parses_and_hides_the_secret() {
        let cli = Cli::parse_from([
            "x",
            "--webhook",
            "http://127.0.0.1:9/a",
            "--webhook",
            "http://127.0.0.1:9/b",
            "--webhook-secret",
            "s3cr3t",
            "--ledger",
            "main",
        ]);
        assert_eq!(cli.args.listen.to_string(), "127.0.0.1:8090");
        let config = cli.args.to_config().unwrap();
        assert_eq!(config.webhooks.len(), 2);
        assert_eq!(config.create_ledgers, ["main"]);
        assert!(!format!("{:?}", cli.args).contains("s3cr3t"));
        assert!(!format!("{config:?}").contains("s3cr3t"));
    }

    #[test]
    fn webhooks_need_a_secret() {
        let cli = Cli::parse_from(["x", "--webhook", "http://127.0.0.1:9/a"]);
        if cli.args.webhook_secret.is_none() {
            assert_eq!(cli.args.to_config().unwrap_err().kind(), &ErrorKind::Config);
        }
    }
}
