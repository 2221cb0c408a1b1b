//! Command-line arguments. Every flag can also come from an `OUTBOX_`-prefixed variable.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "outbox", version, about = "Move payout instructions into the ledger exactly once, in per-account order")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the outbox tables.
    Migrate {
        /// Database URL: sqlite://PATH
        #[arg(long, env = "OUTBOX_DATABASE")]
        database: String,
    },
    /// Enqueue payouts from a JSON-lines file, all in one transaction.
    ///
    /// Each line: {"account", "postings" | "script" (+"vars") | "revert", "reference"?,
    /// "metadata"?, "event_id"?}. A bad line is reported with its number and nothing
    /// from the file is committed.
    Enqueue {
        #[arg(long, env = "OUTBOX_DATABASE")]
        database: String,
        /// The JSON-lines file ("-" for standard input).
        #[arg(long)]
        file: PathBuf,
    },
}
