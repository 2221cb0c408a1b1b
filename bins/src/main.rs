//! `outbox`: the ledger-outbox command-line binary. Parses arguments, builds the
//! adapters through `wiring`, runs one command.

use clap::Parser;
use outbox_bins::{cli, commands};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    // The demo tells its own story on stdout; its staged faults would only add noise.
    let default_level = if cli.command.is_demo() {
        "error"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OUTBOX_LOG")
                .unwrap_or_else(|_| default_level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match commands::run(cli.command).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
