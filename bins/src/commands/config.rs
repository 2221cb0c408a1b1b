//! `outbox config show`: the effective configuration and where each value came from.

use outbox_core::Result;

use crate::config::{Loaded, show};

#[derive(Debug, Clone, clap::Args)]
pub struct ConfigCli {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ConfigCommand {
    /// Every key with its effective value (secrets redacted) and its source: default,
    /// the configuration file, an OUTBOX_ variable.
    Show {
        /// One JSON object per key: {"key", "value", "source"}.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cli: ConfigCli, loaded: &Loaded) -> Result<()> {
    match cli.command {
        ConfigCommand::Show { json } => {
            for line in show(loaded, json) {
                println!("{line}");
            }
            Ok(())
        }
    }
}
