//! `outbox reconcile sequences | ledger | balances`: the three reconciliation checks
//! (docs/RECONCILIATION.md). Each reads, raises what it finds into the exception queue
//! of the database it checks (an open exception is not raised twice), prints it, and
//! exits non-zero when anything was found.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::reconcile::balances::BalanceCheck;
use outbox_core::reconcile::completeness::CompletenessCheck;
use outbox_core::reconcile::sequences::SequenceCheck;
use outbox_core::reconcile::statement::{AccountMapping, Statement};
use outbox_core::{Error, ErrorKind, NewException, Result, Store};

use crate::cli::LedgerArgs;
use crate::wiring;

#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileCli {
    #[command(subcommand)]
    pub command: ReconcileCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ReconcileCommand {
    /// The consuming team's check: every account's applied sequences in the consumer's
    /// inbox, from 1, with no hole and no repeat; held gaps with their age. Read-only:
    /// it never advances or skips anything.
    Sequences(SequencesArgs),
    /// The ledger team's check: every outbox event has exactly one ledger transaction
    /// (or a recorded refusal), and every ledger transaction with outbox metadata has
    /// its outbox row. Incremental from its own checkpoint.
    Ledger(LedgerCheckArgs),
    /// The reconciliation function's check: the ledger's balances per account and asset
    /// against the provider's statement, at the statement's time.
    Balances(BalancesArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct SequencesArgs {
    /// The consumer database (its inbox): sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    /// A held gap older than this many seconds is an exception (younger ones are
    /// messages on their way and only reported).
    #[arg(long, default_value_t = 300)]
    pub gap_alarm_secs: u64,
    /// Markers read per page (memory is bounded by it).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub page_size: u64,
    /// One JSON object per finding instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct LedgerCheckArgs {
    /// The outbox database: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    #[command(flatten)]
    pub ledger: LedgerArgs,
    /// The checkpoint's name (default: the ledger's name).
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// An event younger than this many seconds without a ledger transaction is left
    /// for a later run (the relay may still be posting it).
    #[arg(long, default_value_t = 300)]
    pub settle_secs: u64,
    /// Transactions and events read per page (memory is bounded by it).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub page_size: u64,
    /// One JSON object per finding instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BalancesArgs {
    /// The outbox database: the exception queue, and the events posted before each drift.
    #[arg(long)]
    pub database: Option<String>,
    #[command(flatten)]
    pub ledger: LedgerArgs,
    /// The provider's statement: a CSV file (account,asset,balance,as_of) or an ISO
    /// 20022 camt.053 XML file (with --mapping), told apart by the extension.
    #[arg(long)]
    pub statement: PathBuf,
    /// For camt.053: the CSV mapping from IBAN to ledger account (`iban,account[,asset]`).
    #[arg(long)]
    pub mapping: Option<PathBuf>,
    /// Only statement accounts matching this pattern (`*` one segment, trailing `**`
    /// any number: `merchants:*:payouts:pending`, `merchants:4471:**`).
    #[arg(long)]
    pub accounts: Option<String>,
    /// Compare at this RFC 3339 time instead of each line's as-of time.
    #[arg(long)]
    pub at: Option<DateTime<Utc>>,
    /// The largest difference in minor units that is not a drift.
    #[arg(long, default_value_t = 0)]
    pub tolerance: u128,
    /// One JSON object per finding instead of text.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(cli: ReconcileCli) -> Result<()> {
    match cli.command {
        ReconcileCommand::Sequences(args) => sequences(args).await,
        ReconcileCommand::Ledger(args) => ledger(args).await,
        ReconcileCommand::Balances(args) => balances(args).await,
    }
}

async fn sequences(args: SequencesArgs) -> Result<()> {
    let database = crate::config::consume_database(args.database.as_deref())?;
    let db = wiring::reconcile_database("--database", &database).await?;
    let check = SequenceCheck {
        page_size: args.page_size as usize,
        gap_alarm_after: Duration::from_secs(args.gap_alarm_secs),
        now: Utc::now(),
    };
    let report =
        crate::progress::while_running("reconcile sequences", check.run(db.as_ref())).await?;
    if !args.json {
        println!(
            "sequences: {} markers over {} accounts, {} held gap(s)",
            report.check.checked,
            report.accounts,
            report.held.len()
        );
        for held in &report.held {
            println!(
                "  held: {} {} applied through {}, {} message(s) held from {} for {}s",
                held.gap.consumer,
                held.gap.gap.account,
                held.gap.gap.last_applied,
                held.gap.held,
                held.gap.gap.lowest_held,
                held.age.num_seconds()
            );
        }
    }
    finish("sequences", db.as_ref(), &report.check, &[], args.json).await
}

async fn ledger(args: LedgerCheckArgs) -> Result<()> {
    let database = crate::config::outbox_database(args.database.as_deref())?;
    let db = wiring::reconcile_database("--database", &database).await?;
    let client = wiring::formance_client(&args.ledger)?;
    let check = CompletenessCheck {
        name: args
            .checkpoint
            .unwrap_or_else(|| client.ledger_name().to_owned()),
        page_size: args.page_size as usize,
        settle: Duration::from_secs(args.settle_secs),
        now: Utc::now(),
    };
    let report =
        crate::progress::while_running("reconcile ledger", check.run(db.as_ref(), &client)).await?;
    if !args.json {
        println!(
            "ledger: {} transactions read ({} with outbox metadata), {} events checked, {} not settled yet",
            report.transactions, report.outbox_transactions, report.events, report.unsettled
        );
    }
    finish("ledger", db.as_ref(), &report.check, &[], args.json).await
}

async fn balances(args: BalancesArgs) -> Result<()> {
    let statement = read_statement(&args.statement, args.mapping.as_deref())?;
    let database = crate::config::outbox_database(args.database.as_deref())?;
    let db = wiring::reconcile_database("--database", &database).await?;
    let client = wiring::formance_client(&args.ledger)?;
    let check = BalanceCheck {
        accounts: args.accounts,
        at: args.at,
        tolerance: args.tolerance,
        ..BalanceCheck::default()
    };
    let report = crate::progress::while_running(
        "reconcile balances",
        check.run(&statement, &client, db.as_ref()),
    )
    .await?;
    if !args.json {
        println!(
            "balances: {} statement line(s) compared",
            report.check.checked
        );
        for c in &report.compared {
            let inserted = c
                .ledger_by_insertion
                .map_or_else(String::new, |i| format!(", by insertion date {i}"));
            println!(
                "  {} {} at {}: provider {} ledger {}{inserted} difference {:+}",
                c.line.account,
                c.line.asset,
                c.at.to_rfc3339(),
                c.line.balance,
                c.ledger,
                c.difference
            );
        }
    }
    finish(
        "balances",
        db.as_ref(),
        &report.check,
        &report.unanswered,
        args.json,
    )
    .await
}

/// A statement file, by its extension.
fn read_statement(path: &std::path::Path, mapping: Option<&std::path::Path>) -> Result<Statement> {
    let read = |flag: &str, path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map_err(|e| Error::invalid(flag, format!("cannot read {}: {e}", path.display())))
    };
    let text = read("--statement", path)?;
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let statement = match extension.as_deref() {
        Some("csv") => Statement::from_csv(&text),
        Some("xml") => {
            let mapping = mapping.ok_or_else(|| {
                Error::invalid(
                    "--mapping",
                    "a camt.053 statement needs --mapping IBAN,account",
                )
            })?;
            let mapping = AccountMapping::from_csv(&read("--mapping", mapping)?)
                .map_err(|e| e.with("file", mapping.display().to_string()))?;
            Statement::from_camt053(&text, &mapping)
        }
        _ => Err(Error::invalid(
            "--statement",
            format!(
                "{}: expected a .csv or a camt.053 .xml file",
                path.display()
            ),
        )),
    };
    statement.map_err(|e| e.with("file", path.display().to_string()))
}

/// Raises every finding, prints each (new or already open), and fails when there was
/// any finding or an unanswered line.
async fn finish(
    check: &str,
    store: &dyn Store,
    report: &outbox_core::reconcile::CheckReport,
    unanswered: &[String],
    json: bool,
) -> Result<()> {
    let mut new = 0;
    for finding in &report.findings {
        let raised = store.raise_exception(finding).await?;
        new += usize::from(raised);
        if json {
            println!("{}", finding_json(finding, raised));
        } else {
            println!("{}", finding_line(finding, raised));
        }
    }
    for note in &report.notes {
        eprintln!("note: {note}");
    }
    for line in unanswered {
        eprintln!("unanswered: {line}");
    }
    if report.findings.is_empty() && unanswered.is_empty() {
        if !json {
            println!("{check}: no exception");
        }
        return Ok(());
    }
    let total = report.findings.len();
    let mut what = format!("{total} exception(s), {new} new");
    if new < total {
        what.push_str(&format!(", {} already open", total - new));
    }
    if !unanswered.is_empty() {
        what.push_str(&format!(
            "; {} statement line(s) the ledger gave no balance for",
            unanswered.len()
        ));
    }
    Err(Error::new(
        ErrorKind::ControlFailed,
        format!("reconcile {check} found {what}: see `outbox exceptions list --open`"),
    ))
}

fn finding_line(f: &NewException, raised: bool) -> String {
    let mut parts = vec![
        format!("{:<8}", f.severity.as_str()),
        f.kind.as_str().to_owned(),
        format!("{} #{}", f.account, f.sequence),
    ];
    if let Some(id) = &f.event_id {
        parts.push(format!("event {id}"));
    }
    if let Some(tx) = f.ledger_tx {
        parts.push(format!("tx {tx}"));
    }
    if let Some(asset) = &f.asset {
        parts.push(asset.clone());
    }
    if let (Some(l), Some(p)) = (f.ledger_amount, f.provider_amount) {
        parts.push(format!("ledger {l} provider {p}"));
    }
    let status = if raised { "new" } else { "already open" };
    format!("{} [{status}]\n    {}", parts.join("  "), f.detail)
}

fn finding_json(f: &NewException, raised: bool) -> serde_json::Value {
    let mut out = super::exceptions::finding_json(f);
    out["new"] = serde_json::json!(raised);
    out
}
