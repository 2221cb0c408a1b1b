//! One file per `outbox` command.

pub mod audit;
#[cfg(feature = "http")]
mod catch_up;
pub mod check;
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

use crate::cli::Command;
use crate::wiring;

pub async fn run(command: Command) -> outbox_core::Result<()> {
    match command {
        Command::Migrate { database } => {
            wiring::database(&database)?.migrate().await?;
            println!("migrated {database}");
            Ok(())
        }
        Command::Enqueue { database, file } => enqueue::run(&database, &file).await,
        Command::Relay(args) => relay::run(args).await,
        #[cfg(feature = "http")]
        Command::Fanout(fanout) => fanout::run(*fanout).await,
        Command::Consume(args) => consume::run(args).await,
        Command::Audit(args) => audit::run(*args).await,
        Command::Retention(cli) => retention::run(cli).await,
        Command::Exceptions(cli) => exceptions::run(cli).await,
        Command::Check(args) => check::run(*args).await,
        Command::Reconcile(cli) => reconcile::run(*cli).await,
        #[cfg(feature = "sqlite")]
        Command::Probe(args) => probe::run(args).await,
        #[cfg(all(feature = "sqlite", feature = "http", feature = "dev-ledger"))]
        Command::Demo(args) => crate::demo::run(args).await,
        #[cfg(feature = "dev-ledger")]
        Command::DevLedger(cli) => dev_ledger::run(cli).await,
        Command::Status(args) => crate::status::run(args).await,
    }
}
