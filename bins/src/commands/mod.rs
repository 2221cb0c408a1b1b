//! One file per `outbox` command.

mod enqueue;
mod relay;

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
        Command::Retention {
            database,
            older_than,
        } => retention(&database, older_than).await,
        #[cfg(all(feature = "sqlite", feature = "http", feature = "dev-ledger"))]
        Command::Demo(args) => crate::demo::run(args).await,
        #[cfg(feature = "dev-ledger")]
        Command::DevLedger(args) => outbox_ledger_dev::run_cli(args).await,
    }
}

async fn retention(database: &str, older_than: std::time::Duration) -> outbox_core::Result<()> {
    let db = wiring::database(database)?;
    #[cfg(feature = "postgres")]
    {
        let age = chrono::Duration::from_std(older_than)
            .map_err(|_| outbox_core::Error::invalid("older_than", "too long"))?;
        let report = db.retention(chrono::Utc::now() - age).await?;
        for day in &report.dropped {
            println!("dropped {day}");
        }
        for (day, pending) in &report.kept {
            println!("kept {day}: {pending} events without a terminal outcome");
        }
        println!(
            "retention: {} days dropped, {} kept",
            report.dropped.len(),
            report.kept.len()
        );
        Ok(())
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (db, older_than);
        Err(outbox_core::Error::invalid(
            "database",
            "retention needs the `postgres` feature and a postgres:// database",
        ))
    }
}
