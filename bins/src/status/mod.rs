//! `outbox status`: where the payouts are right now — relay cursors and backlogs,
//! the oldest pending event, parked and stopped accounts with the reason, fan-out
//! destinations with their pending messages, open gaps, open exceptions — as text
//! for a person or `--json` for a script.
//!
//! It only reads ([`gather`]), through the same code the admin sampler's gauges
//! come from.

pub mod gather;
mod json;
mod text;

use outbox_core::Result;

use crate::wiring;

#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// The outbox database: sqlite://PATH or postgres://…[?schema=NAME]
    /// (config: database)
    #[arg(long)]
    pub database: Option<String>,
    /// The fan-out store, when it is not the outbox database (config: fanout.database).
    #[arg(long)]
    pub fanout_database: Option<String>,
    /// A consumer's database (its inbox and gap queue), when it is not the outbox
    /// database (config: consume.database).
    #[arg(long)]
    pub consumer_database: Option<String>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: StatusArgs) -> Result<()> {
    let configured = crate::config::current();
    let database = crate::config::outbox_database(args.database.as_deref())?;
    let outbox = wiring::status_reader("database", &database).await?;
    // The configured stores (their password files applied) when no flag names them.
    let fanout_database = match &args.fanout_database {
        Some(url) => Some(url.clone()),
        None if configured.fanout.database.is_some() => Some(configured.fanout_database()?),
        None => None,
    };
    let fanout = match &fanout_database {
        Some(url) => Some(wiring::status_reader("fanout-database", url).await?),
        None => None,
    };
    let consumer_database = match &args.consumer_database {
        Some(url) => Some(url.clone()),
        None if configured.consume.database.is_some() => Some(configured.consume_database()?),
        None => None,
    };
    let consumer = match &consumer_database {
        Some(url) => Some(wiring::status_reader("consumer-database", url).await?),
        None => None,
    };
    let readers = gather::Readers {
        outbox: ("database", outbox.as_ref()),
        fanout: fanout.as_deref().map(|r| ("fanout-database", r)),
        consumer: consumer.as_deref().map(|r| ("consumer-database", r)),
    };
    let snapshot = gather::snapshot(readers).await?;
    let now = chrono::Utc::now();
    if args.json {
        println!("{}", json::render(&snapshot, now));
    } else {
        print!("{}", text::render(&snapshot, now));
    }
    Ok(())
}
