//! One file per `outbox` command.

pub mod audit;
#[cfg(feature = "http")]
mod catch_up;
pub mod check;
pub mod config;
mod consume;
#[cfg(feature = "dev-ledger")]
pub mod dev_ledger;
mod enqueue;
pub mod exceptions;
#[cfg(feature = "http")]
mod fanout;
pub mod fanout_dead_letters;
pub mod fanout_replay;
#[cfg(feature = "sqlite")]
pub mod probe;
pub mod reconcile;
mod relay;
pub mod retention;
mod signal;

use crate::cli::{Cli, Command};
use crate::config::Loaded;
use crate::wiring;

/// The flags of `cli` shaped like the configuration ([`crate::config::Settings`]):
/// the highest layer of the configuration. Only the flags given appear.
pub fn flags(cli: &Cli) -> serde_json::Value {
    let mut flags = match &cli.command {
        Command::Relay(args) => {
            let mut value = serde_json::to_value(args).unwrap_or_default();
            if args.relay.no_bulk {
                value["relay"]["bulk"] = false.into();
            }
            value
        }
        #[cfg(feature = "http")]
        Command::Fanout(fanout) => match (&fanout.command, &fanout.run) {
            (None, args) => {
                let mut value = serde_json::to_value(args).unwrap_or_default();
                // `--ledger-url` on the fan-out is how catch-up was always asked for.
                if args.ledger.url.is_some() {
                    value["fanout"]["catch_up"] = true.into();
                }
                value
            }
            (Some(crate::cli::FanoutCommand::CatchUp(args)), _) => serde_json::json!({
                "ledger": serde_json::to_value(&args.ledger).unwrap_or_default(),
            }),
            _ => serde_json::json!({}),
        },
        Command::Consume(args) => serde_json::to_value(args).unwrap_or_default(),
        #[cfg(feature = "dev-ledger")]
        Command::DevLedger(cli) => serde_json::json!({
            "admin": serde_json::to_value(&cli.admin).unwrap_or_default(),
        }),
        _ => serde_json::json!({}),
    };
    if let Some(format) = cli.log_format {
        flags["log"] = serde_json::json!({ "format": format });
    }
    flags
}

pub async fn run(command: Command, loaded: &Loaded) -> outbox_core::Result<()> {
    let settings = &loaded.settings;
    match command {
        Command::Migrate { database } => {
            let database = crate::config::outbox_database(database.as_deref())?;
            wiring::database(&database)?.migrate().await?;
            println!("migrated {}", crate::config::redact_url(&database));
            Ok(())
        }
        Command::Enqueue { database, file } => {
            let database = crate::config::outbox_database(database.as_deref())?;
            enqueue::run(&database, &file).await
        }
        Command::Relay(args) => relay::run(args, settings).await,
        #[cfg(feature = "http")]
        Command::Fanout(fanout) => fanout::run(*fanout, settings).await,
        Command::Consume(_) => consume::run(settings).await,
        Command::Audit(args) => audit::run(*args).await,
        Command::Retention(cli) => retention::run(cli).await,
        Command::Exceptions(cli) => exceptions::run(cli).await,
        Command::Check(args) => check::run(*args).await,
        Command::Reconcile(cli) => reconcile::run(*cli).await,
        Command::Config(cli) => config::run(cli, loaded),
        #[cfg(feature = "sqlite")]
        Command::Probe(args) => probe::run(args).await,
        #[cfg(all(feature = "sqlite", feature = "http", feature = "dev-ledger"))]
        Command::Demo(args) => crate::demo::run(args).await,
        #[cfg(feature = "dev-ledger")]
        Command::DevLedger(cli) => dev_ledger::run(cli, settings).await,
        Command::Status(args) => crate::status::run(args).await,
    }
}
