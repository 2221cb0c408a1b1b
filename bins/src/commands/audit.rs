//! `outbox audit EVENT_ID`: the audit trail of one event, read from every database
//! given and from the ledger, printed as a report (or `--json`). Exits non-zero for
//! an unknown id, records that contradict each other, a broken log hash chain, or a
//! store it was told to read that cannot be read.

use outbox_core::{Error, ErrorKind, EventId, Result};
use outbox_ledger_formance::FormanceLedger;

use crate::audit::{self, Source, Sources};
use crate::wiring;

#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// The outbox event id (the Idempotency-Key, the instruction id).
    pub event_id: String,
    /// The outbox database: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    /// Read the ledger (Formance API root without /v2): the transaction carrying the
    /// event id, its revert, the rejection notice.
    /// (config: ledger.url)
    #[arg(long, requires = "ledger_name")]
    pub ledger_url: Option<String>,
    #[arg(long)]
    pub ledger_name: Option<String>,
    /// Bearer token for the ledger API, if it needs one.
    #[arg(long)]
    pub ledger_token: Option<String>,
    /// The fan-out store (`outbox fanout --database`): the Hop 2 messages and cursors.
    #[arg(long)]
    pub fanout_database: Option<String>,
    /// The consumer's database (`outbox consume --database`): its inbox and exceptions.
    #[arg(long)]
    pub consumer_database: Option<String>,
    /// Check the ledger's log hash chain from its first log to the event's entry.
    #[arg(long)]
    pub verify_log: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: AuditArgs) -> Result<()> {
    let event_id = EventId::parse(args.event_id.trim()).map_err(|e| {
        Error::invalid(
            "EVENT_ID",
            format!(
                "{:?} is not an outbox event id: {}",
                args.event_id,
                e.message()
            ),
        )
    })?;
    let database = crate::config::outbox_database(args.database.as_deref())?;
    let outbox = wiring::audit_store("--database", &database).await?;
    let fanout = match &args.fanout_database {
        Some(url) => Some(wiring::audit_store("--fanout-database", url).await?),
        None => None,
    };
    let consumer = match &args.consumer_database {
        Some(url) => Some(wiring::audit_store("--consumer-database", url).await?),
        None => None,
    };
    let ledger_settings = crate::config::ledger_with(&crate::cli::LedgerArgs {
        url: args.ledger_url.clone(),
        name: args.ledger_name.clone(),
        token: args.ledger_token.clone(),
        ..Default::default()
    });
    let ledger = if ledger_settings.is_set() {
        Some(FormanceLedger::new(&ledger_settings.formance_config()?)?)
    } else if args.verify_log {
        return Err(Error::invalid(
            "verify_log",
            "--verify-log reads the ledger's log: give --ledger-url and --ledger-name (or [ledger])",
        ));
    } else {
        None
    };
    let sources = Sources {
        outbox: Source {
            reader: &outbox,
            name: shown(&database),
        },
        ledger: ledger
            .as_ref()
            .zip(ledger_settings.url.as_deref())
            .map(|(reader, url)| Source {
                reader,
                name: shown(url),
            }),
        fanout: fanout
            .as_ref()
            .zip(args.fanout_database.as_deref())
            .map(|(reader, url)| Source {
                reader,
                name: shown(url),
            }),
        consumer: consumer
            .as_ref()
            .zip(args.consumer_database.as_deref())
            .map(|(reader, url)| Source {
                reader,
                name: shown(url),
            }),
        verify_log: args.verify_log,
    };
    let report = audit::gather(event_id, &sources).await?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot encode the report: {e}"),
            )
        })?;
        println!("{json}");
    } else {
        print!("{}", audit::render(&report));
    }
    if report.consistent {
        return Ok(());
    }
    let mut reasons = report.findings.clone();
    if let Some(fault) = report
        .ledger
        .as_ref()
        .and_then(|l| l.log.as_ref())
        .and_then(|log| log.fault.clone())
    {
        reasons.push(fault);
    }
    Err(Error::new(
        ErrorKind::Internal,
        format!("audit of {event_id} FAILED: {}", reasons.join("; ")),
    ))
}

/// A URL as the report shows it: any password replaced by `***`.
fn shown(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}
