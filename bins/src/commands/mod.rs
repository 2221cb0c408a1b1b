//! One file per `outbox` command.

mod enqueue;

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
    }
}
