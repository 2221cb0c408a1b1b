//! `outbox probe`: the duplicate-post test against your own payout payloads.
//!
//! Every line of the file is enqueued, as `outbox enqueue` would store it, into a
//! SQLite outbox of the probe's own; its stored bytes then go through the six steps
//! against ledgers of the probe's own (see `crate::probe`).

use std::path::PathBuf;

use outbox_core::{Error, ErrorKind, EventId, NewEvent, OutboxEvent, RawNewEvent, Result};
use outbox_store_sqlite::{SqliteConfig, SqliteStore, connect, enqueue, map_error};

use crate::probe::{
    self, BadLine, CrashWindow, Funding, Posted, ProbePayload, ProbeReport, RelayPath, Session,
    Target, Verdict,
};

#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// The payouts to probe: a JSON-lines file as `outbox enqueue` takes it ("-" for
    /// standard input).
    #[arg(long)]
    pub file: PathBuf,
    /// A Formance sandbox (API root without /v2) instead of the embedded dev ledger.
    /// Never read from the environment: a probe moves money.
    #[arg(long)]
    pub ledger_url: Option<String>,
    /// The probe ledger's name on --ledger-url (default: a fresh `outbox-probe-<id>`);
    /// `NAME-step3` and `NAME-step5` are used too.
    #[arg(long, requires = "ledger_url")]
    pub ledger_name: Option<String>,
    /// Bearer token for --ledger-url. Its own variable, not the relay's: a
    /// production token must never reach a sandbox.
    #[arg(long, env = "OUTBOX_PROBE_LEDGER_TOKEN", hide_env_values = true)]
    pub ledger_token: Option<String>,
    /// Post into --ledger-name even when it already holds transactions.
    #[arg(long, requires = "ledger_name")]
    pub allow_existing_ledger: bool,
    /// How step 5 puts the SIGKILL between the ledger's accept and the relay's
    /// record: a dev ledger's fault plan holds the answer after commit; a loopback
    /// proxy forwards the write and withholds the answer (any ledger). `auto`: the
    /// fault plan on a dev ledger, the proxy elsewhere.
    #[arg(long, value_enum, default_value_t = WindowChoice::Auto)]
    pub crash_window: WindowChoice,
    /// Print only the report, as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--crash-window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WindowChoice {
    Auto,
    FaultPlan,
    Proxy,
}

pub async fn run(args: ProbeArgs) -> Result<()> {
    let text = super::enqueue::read(&args.file)?;
    let entries = parse(&text);
    if entries.is_empty() {
        return Err(Error::invalid(
            "file",
            format!("{} holds no payouts", args.file.display()),
        ));
    }
    let target = match &args.ledger_url {
        None => Target::Embedded,
        Some(url) => Target::Url {
            url: url.clone(),
            token: args.ledger_token.clone(),
            ledger_name: args.ledger_name.clone(),
            allow_existing: args.allow_existing_ledger,
        },
    };
    let session = Session::open(&target, true).await?;
    let report = probe_file(&session, &entries, args.crash_window).await;
    session.close().await;
    let report = report?;
    if args.json {
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        println!("{json}");
    } else {
        print!("{}", report.text());
    }
    let s = &report.summary;
    if s.ok {
        return Ok(());
    }
    let message = format!(
        "probe FAILED: {} step(s) failed, {} payload(s) refused by the ledger, {} bad line(s); hold the payout batch until the ledger and the payloads pass",
        s.fail, s.refused, s.bad_lines
    );
    Err(if s.fail + s.refused > 0 {
        Error::new(ErrorKind::Ledger, message)
    } else {
        Error::invalid("file", message)
    })
}

async fn probe_file(
    session: &Session,
    entries: &[(usize, Result<NewEvent>)],
    window: WindowChoice,
) -> Result<ProbeReport> {
    let mut report = probe::empty_report(session);
    let dir = tempfile::TempDir::new()
        .map_err(|e| probe::probe_error(format!("cannot make a temporary folder: {e}")))?;
    let outbox = SqliteStore::open(SqliteConfig::new(dir.path().join("outbox.db"))).await?;
    let relay = RelayPath {
        exe: std::env::current_exe()
            .map_err(|e| probe::probe_error(format!("cannot find the outbox binary: {e}")))?,
        outbox: outbox.clone(),
        client: session.ledgers.client.clone(),
        ledger: session
            .relay_ledger
            .clone()
            .ok_or_else(|| probe::probe_error("the session has no step-5 ledger"))?,
        window: crash_window(session, window).await?,
    };
    report.crash_window = Some(relay.window.describe().to_owned());

    let mut funding = Funding::default();
    for (line, event) in entries {
        if let Ok(event) = event {
            funding.add(&format!("line {line}"), &event.command);
        }
    }
    session.fund(&funding).await?;
    report.funded = funding.lines();
    for label in &funding.unread {
        report.notes.push(format!(
            "{label}: its script's debits could not be read, so its sources were not funded (the ledger may refuse it with INSUFFICIENT_FUND)"
        ));
    }

    let mut posted = Posted::default();
    for (line, event) in entries {
        let stored = match event {
            Ok(event) => store(&outbox, event).map_err(|e| e.with("line", line)),
            Err(e) => Err(e.clone()),
        };
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => {
                let error = match e.field() {
                    Some(field) => format!("invalid {field}: {}", e.message()),
                    None => e.to_string(),
                };
                report.bad_lines.push(BadLine {
                    line: *line,
                    field: e.field().map(str::to_owned),
                    error,
                });
                continue;
            }
        };
        let payload = ProbePayload::new(format!("line {line}"), Some(*line), stored)?;
        let mut steps = probe::idempotency_steps(&session.ledgers, &payload, &mut posted).await?;
        let step5 = match steps.first() {
            Some(first) if first.verdict == Verdict::Pass => relay.step(&payload).await?,
            Some(first) => {
                relay
                    .pass_through(&format!("skipped: step 1 was {}", first.verdict.as_str()))
                    .await?
            }
            None => relay.pass_through("skipped").await?,
        };
        steps.push(step5);
        report.payloads.push(probe::payload_report(&payload, steps));
    }
    report.summarise();
    Ok(report)
}

async fn crash_window(session: &Session, choice: WindowChoice) -> Result<CrashWindow> {
    match choice {
        WindowChoice::Auto if session.is_dev_ledger => Ok(CrashWindow::FaultPlan),
        WindowChoice::FaultPlan if session.is_dev_ledger => Ok(CrashWindow::FaultPlan),
        WindowChoice::FaultPlan => Err(Error::invalid(
            "crash_window",
            "fault-plan needs a dev ledger (its /_dev/faults); this ledger has none: use proxy",
        )),
        WindowChoice::Auto | WindowChoice::Proxy => probe::proxy_window(session).await,
    }
}

/// Enqueues one payload in its own transaction, exactly as `outbox enqueue` would.
fn store(outbox: &SqliteStore, event: &NewEvent) -> Result<OutboxEvent> {
    let mut conn = connect(outbox.config())?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let stored = enqueue(&tx, event)?;
    tx.commit().map_err(map_error)?;
    Ok(stored)
}

/// Every non-blank line, parsed as `outbox enqueue` parses it, with its number. A
/// line without an `event_id` gets a fresh one now, so the probe's outbox and every
/// later step agree on it.
fn parse(text: &str) -> Vec<(usize, Result<NewEvent>)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            let number = index + 1;
            let event = serde_json::from_str::<RawNewEvent>(line)
                .map_err(|e| Error::invalid("json", e.to_string()))
                .and_then(RawNewEvent::into_new_event)
                .map(|event| match event.event_id {
                    Some(_) => event,
                    None => event.with_event_id(EventId::new()),
                })
                .map_err(|e| e.with("line", number));
            (number, event)
        })
        .collect()
}
