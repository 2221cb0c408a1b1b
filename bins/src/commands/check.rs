//! `outbox check`: the five checks against a deployment, the gate before a payout
//! batch (see `crate::check`).

use std::time::Duration;

use outbox_core::{Error, ErrorKind, Result};

use crate::check::{self, CheckOptions};
use crate::probe::Target;

#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// The outbox database: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    /// The consumer's database (inbox tables), for checks 3 and 4.
    #[arg(long)]
    pub consumer_database: Option<String>,
    /// The fan-out store, for checks 2 and 5.
    #[arg(long)]
    pub fanout_database: Option<String>,
    /// A Formance server (API root without /v2) on which check 2 creates fresh probe
    /// ledgers; the embedded dev ledger when absent. Never the production ledger, and
    /// never read from the environment.
    #[arg(long)]
    pub ledger_url: Option<String>,
    /// Bearer token for --ledger-url. Its own variable, not the relay's: a
    /// production token must never reach a sandbox.
    #[arg(long, env = "OUTBOX_PROBE_LEDGER_TOKEN", hide_env_values = true)]
    pub ledger_token: Option<String>,
    /// How many of the most recent stored payloads check 2 probes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub sample: u64,
    /// The consumer's gap alarm, in seconds (as `outbox consume --gap-alarm-secs`).
    #[arg(long, default_value_t = 300)]
    pub gap_alarm_secs: u64,
    /// Print only the report, as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: CheckArgs) -> Result<()> {
    let options = CheckOptions {
        database: crate::config::outbox_database(args.database.as_deref())?,
        consumer_database: args.consumer_database,
        fanout_database: args.fanout_database,
        ledger: match args.ledger_url {
            None => Target::Embedded,
            Some(url) => Target::Url {
                url,
                token: args.ledger_token,
                ledger_name: None,
                allow_existing: false,
            },
        },
        sample: args.sample as usize,
        gap_alarm: Duration::from_secs(args.gap_alarm_secs),
    };
    let report = check::run(&options).await?;
    if args.json {
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        println!("{json}");
    } else {
        print!("{}", report.text());
    }
    let failed: Vec<String> = report
        .failed()
        .iter()
        .map(|c| format!("{}. {}", c.number, c.name))
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "check FAILED: {}; hold the payout batch until the control is in place",
            failed.join(", ")
        ),
    ))
}
