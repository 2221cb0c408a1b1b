//! `outbox exceptions list | resolve`: the exception queue of an outbox or consumer
//! database, and the append-only record that closes one exception (who, when, why).

use outbox_core::{Error, Exception, ExceptionKind, ExceptionQuery, NewException, Result};
use serde_json::json;

use crate::wiring;

/// `outbox exceptions`: one of its subcommands.
#[derive(Debug, Clone, clap::Args)]
pub struct ExceptionsCli {
    #[command(subcommand)]
    pub command: ExceptionsCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ExceptionsCommand {
    /// List the exceptions, oldest first: what each names (account, sequence, event,
    /// ledger transaction, asset, amounts) and whether someone resolved it.
    List(ListArgs),
    /// Record the resolution of one exception: who, and a note saying what was found
    /// and done. Append-only: the exception itself never changes, and a resolution is
    /// never replaced.
    Resolve(ResolveArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// The database holding the exceptions: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    /// Only those nobody has resolved yet.
    #[arg(long)]
    pub open: bool,
    /// Only this kind (gap, balance_mismatch, …); repeat for several.
    #[arg(long = "kind")]
    pub kinds: Vec<String>,
    /// One JSON object per exception (amounts as strings, exact) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ResolveArgs {
    /// The exception's id (the first column of `outbox exceptions list`).
    pub id: i64,
    /// What was found and what was done.
    #[arg(long)]
    pub note: String,
    /// Who resolves it (default: $USER).
    #[arg(long)]
    pub by: Option<String>,
    #[arg(long)]
    pub database: Option<String>,
}

pub async fn run(cli: ExceptionsCli) -> Result<()> {
    match cli.command {
        ExceptionsCommand::List(args) => list(args).await,
        ExceptionsCommand::Resolve(args) => resolve(args).await,
    }
}

/// `--kind` values as kinds; an unknown one is refused with the list of valid ones.
fn parse_kinds(texts: &[String]) -> Result<Vec<ExceptionKind>> {
    texts
        .iter()
        .map(|text| {
            ExceptionKind::parse(text).ok_or_else(|| {
                let valid: Vec<&str> = ExceptionKind::ALL.iter().map(|k| k.as_str()).collect();
                Error::invalid(
                    "kind",
                    format!(
                        "{text:?} is not an exception kind; valid kinds: {}",
                        valid.join(", ")
                    ),
                )
            })
        })
        .collect()
}

async fn list(args: ListArgs) -> Result<()> {
    let query = ExceptionQuery {
        open_only: args.open,
        kinds: parse_kinds(&args.kinds)?,
    };
    let store = wiring::database(&crate::config::outbox_database(args.database.as_deref())?)?
        .existing_store()
        .await?;
    let exceptions = store.exceptions_matching(&query).await?;
    if args.json {
        for exception in &exceptions {
            println!("{}", to_json(exception));
        }
    } else if exceptions.is_empty() {
        println!(
            "no {}exceptions{}",
            if args.open { "open " } else { "" },
            if query.kinds.is_empty() {
                String::new()
            } else {
                format!(" of kind {}", args.kinds.join(", "))
            }
        );
    } else {
        print!("{}", table(&exceptions));
    }
    Ok(())
}

async fn resolve(args: ResolveArgs) -> Result<()> {
    let by = args
        .by
        .or_else(|| std::env::var("USER").ok())
        .filter(|name| !name.trim().is_empty())
        .ok_or_else(|| {
            Error::invalid(
                "by",
                "a resolution records who resolved it: give --by NAME (or set $USER)",
            )
        })?;
    let store = wiring::database(&crate::config::outbox_database(args.database.as_deref())?)?
        .existing_store()
        .await?;
    let resolution = store.resolve_exception(args.id, &by, &args.note).await?;
    let exception = store
        .exceptions()
        .await?
        .into_iter()
        .find(|e| e.id == args.id);
    let what = exception
        .map(|e| {
            format!(
                " ({} {} #{})",
                e.kind.as_str(),
                e.account.as_str(),
                e.sequence
            )
        })
        .unwrap_or_default();
    println!(
        "resolved exception {}{what} by {} at {}: {}",
        args.id,
        resolution.resolved_by,
        resolution.resolved_at.to_rfc3339(),
        resolution.note
    );
    Ok(())
}

pub(crate) fn to_json(e: &Exception) -> serde_json::Value {
    let mut out = finding_json(&e.finding());
    out["id"] = json!(e.id);
    out["detected_at"] = json!(e.detected_at.to_rfc3339());
    out["open"] = json!(e.is_open());
    out["resolution"] = json!(e.resolution.as_ref().map(|r| json!({
        "resolved_by": r.resolved_by,
        "note": r.note,
        "resolved_at": r.resolved_at.to_rfc3339(),
    })));
    out
}

/// What a finding names, as JSON: the same fields in `outbox exceptions list --json`
/// and in `outbox reconcile … --json`.
pub(crate) fn finding_json(f: &NewException) -> serde_json::Value {
    json!({
        "source": f.source,
        "kind": f.kind.as_str(),
        "severity": f.severity.as_str(),
        "account": f.account.as_str(),
        "sequence": f.sequence,
        "event_id": f.event_id,
        "ledger_tx": f.ledger_tx,
        "asset": f.asset,
        // Strings: a JSON number would lose digits of an i128 in most readers.
        "ledger_amount": f.ledger_amount.map(|a| a.to_string()),
        "provider_amount": f.provider_amount.map(|a| a.to_string()),
        "detail": f.detail,
    })
}

/// One line per exception under a header, columns padded to their widest cell; the
/// detail comes last, unpadded.
fn table(exceptions: &[Exception]) -> String {
    let dash = || "-".to_owned();
    let header = [
        "ID",
        "SEVERITY",
        "KIND",
        "SOURCE",
        "ACCOUNT",
        "SEQ",
        "EVENT",
        "LEDGER TX",
        "ASSET",
        "LEDGER",
        "PROVIDER",
        "DETECTED",
        "STATUS",
        "DETAIL",
    ]
    .map(str::to_owned);
    let mut rows = vec![header];
    for e in exceptions {
        let status = match &e.resolution {
            None => "open".to_owned(),
            // The note is in `--json`: a long one would push the detail off the screen.
            Some(r) => format!(
                "resolved by {} at {}",
                r.resolved_by,
                r.resolved_at.format("%Y-%m-%dT%H:%M:%SZ")
            ),
        };
        rows.push([
            e.id.to_string(),
            e.severity.as_str().to_owned(),
            e.kind.as_str().to_owned(),
            e.source.clone(),
            e.account.as_str().to_owned(),
            e.sequence.to_string(),
            e.event_id.clone().unwrap_or_else(dash),
            e.ledger_tx.map_or_else(dash, |tx| tx.to_string()),
            e.asset.clone().unwrap_or_else(dash),
            e.ledger_amount.map_or_else(dash, |a| a.to_string()),
            e.provider_amount.map_or_else(dash, |a| a.to_string()),
            e.detected_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            status,
            e.detail.replace('\n', " "),
        ]);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
