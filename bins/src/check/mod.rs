//! `outbox check`: the five money controls of a real deployment, in the order the
//! money moves — Commit, Relay, Dedup, Order, Audit — each PASS, FAIL (naming the
//! missing control and what to do) or NOT CHECKED (saying why).

mod audit;
mod commit;
mod db;
mod dedup;
mod order;
#[cfg(feature = "postgres")]
mod postgres;
mod relay;
mod report;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::time::Duration;

use outbox_core::Result;

pub use audit::retention_check;
pub use db::Db;
pub use report::{Check, CheckReport, Part, Status};

use crate::probe::Target;
use crate::wiring::{self, Database};

/// What to check, and with what.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The outbox database.
    pub database: String,
    pub consumer_database: Option<String>,
    pub fanout_database: Option<String>,
    /// Where step 2 opens its fresh probe ledgers.
    pub ledger: Target,
    /// How many of the most recent payloads step 2 probes.
    pub sample: usize,
    /// The consumer's gap alarm: a held gap older than this fails check 4.
    pub gap_alarm: Duration,
}

/// Opens a database of the deployment without migrating it.
///
/// # Errors
/// A URL no compiled-in store takes, or a server that cannot be reached.
pub async fn open(url: &str) -> Result<Box<dyn Db>> {
    match wiring::database(url)? {
        #[cfg(feature = "sqlite")]
        Database::Sqlite(config) => Ok(Box::new(sqlite::SqliteDb::new(config))),
        #[cfg(feature = "postgres")]
        Database::Postgres(config) => Ok(Box::new(postgres::PgDb::connect(&config).await?)),
    }
}

/// Runs the five checks.
///
/// # Errors
/// Only when a database cannot be opened; every finding is in the report.
pub async fn run(options: &CheckOptions) -> Result<CheckReport> {
    let outbox = open(&options.database).await?;
    let consumer = match &options.consumer_database {
        Some(url) => Some(
            open(url)
                .await
                .map_err(|e| e.with("field", "consumer_database"))?,
        ),
        None => None,
    };
    let fanout = match &options.fanout_database {
        Some(url) => Some(
            open(url)
                .await
                .map_err(|e| e.with("field", "fanout_database"))?,
        ),
        None => None,
    };
    let checks = vec![
        commit::check(outbox.as_ref(), &options.database).await,
        relay::check(
            outbox.as_ref(),
            fanout.as_deref(),
            &options.ledger,
            options.sample,
        )
        .await,
        dedup::check(consumer.as_deref()).await,
        order::check(outbox.as_ref(), consumer.as_deref(), options.gap_alarm).await,
        audit::check(outbox.as_ref(), fanout.as_deref()).await,
    ];
    Ok(CheckReport::new(
        outbox.name(),
        consumer.as_ref().map(|db| db.name()),
        fanout.as_ref().map(|db| db.name()),
        checks,
    ))
}
