//! `outbox retention`: apply the database's stored retention policy to every record
//! table it holds; `outbox retention set` / `show`: record and read that policy.

use outbox_core::{Keep, PeriodOutcome, RetentionPolicy, RetentionReport, StoredRetentionPolicy};
use serde_json::json;

use crate::wiring;

/// `outbox retention`: the pass, or one of its subcommands.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RetentionCli {
    #[command(subcommand)]
    pub command: Option<RetentionCommand>,
    /// Present when no subcommand is given (clap then requires its arguments).
    #[command(flatten)]
    pub run: Option<ApplyArgs>,
}

/// `outbox retention` subcommands (without one, `outbox retention` runs a pass).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum RetentionCommand {
    /// Record the database's retention policy: how long its records are kept, given
    /// how long the ledger keeps its transactions. A keep shorter than the ledger's is
    /// refused. The latest policy is in force; earlier ones stay as history.
    Set(SetArgs),
    /// Print the retention policy in force.
    Show(ShowArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ApplyArgs {
    /// The database: sqlite://PATH or postgres://…[?schema=NAME] (outbox, fan-out
    /// store or consumer inbox, or several of them in one database).
    #[arg(long)]
    pub database: Option<String>,
    /// PostgreSQL outbox only: drop its daily partitions older than this (90d, 36h…)
    /// instead of the policy's keep; never shorter than the stored ledger retention.
    /// Without a stored policy only the outbox partitions are considered.
    #[arg(long)]
    pub older_than: Option<String>,
    /// Who runs the pass, recorded on every retention permit (default: $USER).
    #[arg(long)]
    pub by: Option<String>,
    /// Print only the report, as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SetArgs {
    #[arg(long)]
    pub database: Option<String>,
    /// How long the records are kept: 400d, 36h, … or `forever`.
    #[arg(long)]
    pub keep: String,
    /// How long the ledger keeps its transactions (Formance keeps them unless pruned:
    /// `forever`), or a duration such as 400d.
    #[arg(long)]
    pub ledger_keeps: String,
    /// Who sets the policy, for the record (default: $USER).
    #[arg(long)]
    pub by: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ShowArgs {
    #[arg(long)]
    pub database: Option<String>,
    /// Print the policy as JSON (`null` when none is stored).
    #[arg(long)]
    pub json: bool,
}

pub async fn run(cli: RetentionCli) -> outbox_core::Result<()> {
    match (cli.command, cli.run) {
        (Some(RetentionCommand::Set(args)), _) => set(args).await,
        (Some(RetentionCommand::Show(args)), _) => show(args).await,
        (None, Some(args)) => apply(args).await,
        (None, None) => Err(outbox_core::Error::invalid(
            "database",
            "give --database, or a subcommand (set, show)",
        )),
    }
}

/// The operator's name when `--by` is not given.
fn who(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("USERNAME").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

async fn set(args: SetArgs) -> outbox_core::Result<()> {
    let keep = Keep::parse_field("keep", &args.keep)?;
    let ledger_keeps = Keep::parse_field("ledger_keeps", &args.ledger_keeps)?;
    let policy = RetentionPolicy::new(keep, ledger_keeps)?;
    let stored = wiring::database(&crate::config::outbox_database(args.database.as_deref())?)?
        .save_retention_policy(&policy, &who(args.by))
        .await?;
    println!("set {}", describe(&stored));
    Ok(())
}

async fn show(args: ShowArgs) -> outbox_core::Result<()> {
    let stored = wiring::database(&crate::config::outbox_database(args.database.as_deref())?)?
        .load_retention_policy()
        .await?;
    match (stored, args.json) {
        (Some(stored), true) => println!("{}", policy_json(&stored)),
        (None, true) => println!("null"),
        (Some(stored), false) => println!("{}", describe(&stored)),
        (None, false) => println!(
            "no retention policy stored in {}: nothing leaves by retention until `outbox retention set`",
            args.database
                .as_deref()
                .unwrap_or("the configured database")
        ),
    }
    Ok(())
}

async fn apply(args: ApplyArgs) -> outbox_core::Result<()> {
    let older_than = args
        .older_than
        .as_deref()
        .map(|text| {
            crate::cli::parse_duration(text)
                .map_err(|e| outbox_core::Error::invalid("older_than", e))
        })
        .transpose()?;
    let db = wiring::database(&crate::config::outbox_database(args.database.as_deref())?)?;
    let stored = db.load_retention_policy().await?;
    let report = db.apply_retention(&who(args.by), older_than).await?;
    if args.json {
        println!("{}", report_json(stored.as_ref(), &report));
        return Ok(());
    }
    match &stored {
        Some(stored) => println!("applying {}", describe(stored)),
        None => println!(
            "no retention policy stored: only the outbox partitions older than --older-than were \
             considered; the fan-out log, inbox markers and exceptions need `outbox retention set`"
        ),
    }
    if stored
        .as_ref()
        .is_some_and(|s| s.policy.keep() == Keep::Forever)
        && older_than.is_none()
    {
        println!("the policy keeps every record forever: nothing to drop");
    }
    for period in &report.periods {
        println!("{period}");
    }
    println!(
        "retention: {} days dropped, {} kept",
        report.dropped().count(),
        report.kept().count()
    );
    Ok(())
}

/// `policy 3: keep 400d, ledger keeps 400d (set by alice at 2027-01-10T12:00:00Z)`.
fn describe(stored: &StoredRetentionPolicy) -> String {
    format!(
        "retention policy {}: keep {}, ledger keeps {} (set by {} at {})",
        stored.id,
        stored.policy.keep(),
        stored.policy.ledger_keeps(),
        stored.set_by,
        stored
            .set_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

fn policy_json(stored: &StoredRetentionPolicy) -> serde_json::Value {
    json!({
        "id": stored.id,
        "keep": stored.policy.keep().to_string(),
        "keep_seconds": stored.policy.keep().seconds(),
        "ledger_keeps": stored.policy.ledger_keeps().to_string(),
        "ledger_keeps_seconds": stored.policy.ledger_keeps().seconds(),
        "set_by": stored.set_by,
        "set_at": stored.set_at.to_rfc3339(),
    })
}

fn report_json(
    stored: Option<&StoredRetentionPolicy>,
    report: &RetentionReport,
) -> serde_json::Value {
    let periods: Vec<serde_json::Value> = report
        .periods
        .iter()
        .map(|p| {
            let mut entry = json!({
                "family": p.family.as_str(),
                "day": p.day.to_string(),
                "group": p.group,
            });
            match &p.outcome {
                PeriodOutcome::Dropped { rows } => entry["dropped_rows"] = json!(rows),
                PeriodOutcome::Kept { reason } => entry["kept"] = json!(reason),
            }
            entry
        })
        .collect();
    json!({
        "policy": stored.map(policy_json),
        "periods": periods,
        "dropped": report.dropped().count(),
        "kept": report.kept().count(),
    })
}
