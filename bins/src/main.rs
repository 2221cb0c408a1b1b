//! `outbox`: the ledger-outbox command-line binary. Parses arguments, builds the
//! adapters through `wiring`, runs one command.

use clap::Parser;
use outbox_bins::{cli, commands, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    // The demo tells its own story on stdout; its staged faults would only add noise.
    let default_level = if cli.command.is_demo() {
        "error"
    } else {
        "warn"
    };
    let telemetry = telemetry::init(default_level);
    let result = commands::run(cli.command).await;
    telemetry.shutdown().await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
