//! `outbox`: the ledger-outbox command-line binary. Parses arguments, loads the
//! configuration, builds the adapters through `wiring`, runs one command, and exits
//! with a documented code (`outbox_bins::exit`).

use clap::Parser;
use outbox_bins::{cli, commands, config, exit, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let source = config::ConfigSource {
        file: cli.config.clone(),
    };
    let loaded = match config::load(&source, commands::flags(&cli)) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("error: {err}");
            return std::process::ExitCode::from(exit::code(&err));
        }
    };
    // The demo tells its own story on stdout; its staged faults would only add noise.
    let default_level = if cli.command.is_demo() {
        "error"
    } else {
        "warn"
    };
    let telemetry = telemetry::init(&loaded.settings.log, default_level);
    config::install(loaded.settings.clone());
    let result = commands::run(cli.command, &loaded).await;
    if let Err(err) = &result {
        // A log shipper reading JSON lines gets the final error as one more of them.
        if loaded.settings.log.format == config::LogFormat::Json {
            tracing::error!(error = %err, exit_code = exit::code(err), "the command failed");
        } else {
            eprintln!("error: {err}");
        }
    }
    telemetry.shutdown().await;
    exit::status(&result)
}
