//! Command-line arguments. Most flags are configuration keys too (`crate::config`):
//! the flags of relay, fanout and consume are shaped like their sections, so the
//! flags layer of the configuration is the arguments serialized.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    name = "outbox",
    version,
    about = "Move payout instructions into the ledger exactly once, in per-account order",
    after_help = "Exit codes: 0 everything asked was done; 1 an unexpected failure; 2 bad \
                  configuration, flags or input; 3 a service (database, ledger, broker) \
                  could not be reached; 4 events left undelivered or accounts stopped; \
                  5 a control or reconciliation found something a person must look at."
)]
pub struct Cli {
    /// The configuration file (TOML; see outbox.example.toml). Values from
    /// OUTBOX_-prefixed variables and from flags override it.
    #[arg(long, global = true, env = "OUTBOX_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Log lines on standard error: `text` (colours only on a terminal) or `json`.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<crate::config::LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the outbox tables.
    Migrate {
        /// Database URL: sqlite://PATH or postgres://… (config: database)
        #[arg(long)]
        database: Option<String>,
    },
    /// Enqueue payouts from a JSON-lines file, all in one transaction.
    ///
    /// Each line: {"account", "postings" | "script" (+"vars") | "revert", "reference"?,
    /// "metadata"?, "event_id"?}. A bad line is reported with its number and nothing
    /// from the file is committed.
    Enqueue {
        /// (config: database)
        #[arg(long)]
        database: Option<String>,
        /// The JSON-lines file ("-" for standard input).
        #[arg(long)]
        file: PathBuf,
    },
    /// Post committed outbox events to the ledger, in per-account order.
    Relay(RelayArgs),
    /// Apply the database's retention policy: whole expired days whose records are
    /// all terminal leave (outbox, fan-out log, inbox markers, exceptions); `set` and
    /// `show` record and print the policy, never shorter than the ledger's.
    Retention(crate::commands::retention::RetentionCli),
    /// The exception queue: `list` what a person has to look at (account, sequence,
    /// event, ledger transaction, asset, amounts), `resolve` one with a note.
    Exceptions(crate::commands::exceptions::ExceptionsCli),
    /// Hop 2: receive the ledger's signed webhooks, store them durably, and publish
    /// them to every `--to` destination in per-account order.
    #[cfg(feature = "http")]
    Fanout(Box<FanoutCli>),
    /// Hop 2 reference consumer: apply the events from one transport to a treasury
    /// table through an inbox (exactly once in effect, per-account order).
    Consume(ConsumeArgs),
    /// The audit trail of one event across both hops: outbox row, delivery attempts,
    /// ledger transaction, Hop 2 messages and cursors, consumer inbox, exceptions.
    Audit(Box<crate::commands::audit::AuditArgs>),
    /// The five money controls of a deployment, in the order the money moves:
    /// PASS / FAIL / NOT CHECKED each; exits non-zero on any FAIL.
    Check(Box<crate::commands::check::CheckArgs>),
    /// Reconciliation: `sequences` (a consumer's inbox), `ledger` (outbox <-> ledger
    /// completeness), `balances` (the ledger against the provider's statement). Each
    /// raises what it finds into the exception queue and exits non-zero if anything
    /// was found.
    Reconcile(Box<crate::commands::reconcile::ReconcileCli>),
    /// The configuration: `show` prints every key's effective value, with secrets
    /// redacted, and where it came from (default, file, variable).
    Config(crate::commands::config::ConfigCli),
    /// The duplicate-post test: your payout payloads, as enqueue stores them, through
    /// six idempotency steps against a ledger of the probe's own.
    #[cfg(feature = "sqlite")]
    Probe(crate::commands::probe::ProbeArgs),
    /// Run the end-to-end demo on SQLite and the local dev ledger.
    #[cfg(all(feature = "sqlite", feature = "http", feature = "dev-ledger"))]
    Demo(crate::demo::DemoArgs),
    /// Run the local Formance-v2-compatible dev ledger.
    #[cfg(feature = "dev-ledger")]
    DevLedger(crate::commands::dev_ledger::DevLedgerCli),
    /// Where the payouts are: relay cursors and lag, the oldest pending event, parked
    /// and stopped accounts with the reason, fan-out destinations with pending
    /// counts, open gaps, open exceptions.
    Status(crate::status::StatusArgs),
}

impl Command {
    pub fn is_demo(&self) -> bool {
        #[cfg(all(feature = "sqlite", feature = "http", feature = "dev-ledger"))]
        if matches!(self, Self::Demo(_)) {
            return true;
        }
        false
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Where the Formance ledger is and how to reach it: the `[ledger]` keys as flags.
/// Secrets are better given as `ledger.token_file` (or `OUTBOX_LEDGER__TOKEN_FILE`):
/// a flag is visible to every user of the machine.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct LedgerArgs {
    /// Formance API root without /v2, e.g. http://127.0.0.1:3068 (config: ledger.url)
    #[arg(id = "ledger_url", long = "ledger-url")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// (config: ledger.name)
    #[arg(id = "ledger_name", long = "ledger-name")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Bearer token for the ledger API, if it needs one. (config: ledger.token)
    #[arg(id = "ledger_token", long = "ledger-token")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the bearer token. (config: ledger.token_file)
    #[arg(id = "ledger_token_file", long = "ledger-token-file")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Ledger request timeout, in milliseconds (default: 30000, config:
    /// ledger.request_timeout_ms)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
}

/// `--admin-listen`: the `[admin]` keys as flags.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct AdminArgs {
    /// Serve /metrics, /healthz and /readyz on this address (off unless set).
    /// (config: admin.listen)
    #[arg(id = "admin_listen", long = "admin-listen", value_name = "ADDR")]
    #[serde(rename = "listen", skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
    /// How often the gauges read from the database are sampled, in milliseconds
    /// (default 5000, config: admin.sample_interval_ms).
    #[arg(id = "admin_sample_interval_ms", long = "admin-sample-interval-ms", value_parser = clap::value_parser!(u64).range(10..))]
    #[serde(rename = "sample_interval_ms", skip_serializing_if = "Option::is_none")]
    pub sample_interval_ms: Option<u64>,
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct RelayArgs {
    /// The outbox database: sqlite://PATH or postgres://… (config: database)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    #[command(flatten)]
    pub ledger: LedgerArgs,
    #[command(flatten)]
    pub relay: RelayFlags,
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Drain what is committed, then exit (instead of running as a daemon).
    #[arg(long)]
    #[serde(skip)]
    pub once: bool,
    /// With --partitions: when the database holds another partition count for this
    /// relay (or it ran as a single relay), start a new layout with N partitions, each
    /// resuming at the lowest cursor it merges. Refused while other members run.
    #[arg(long)]
    #[serde(skip)]
    pub repartition: bool,
    /// Switch this relay name from CDC to polling (PostgreSQL; stop the CDC relay
    /// first): its LSN cursor is set back to where its CDC run began streaming, and
    /// what follows is checked against the delivery records, so nothing is skipped or
    /// sent twice. Nothing to do once the cursor is a polling one.
    #[arg(long)]
    #[serde(skip)]
    pub from_cdc: bool,
}

/// The `[relay]` keys as flags.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct RelayFlags {
    /// Create the ledger if it does not exist.
    #[arg(long)]
    #[serde(skip_serializing_if = "is_false")]
    pub create_ledger: bool,
    /// Name of this relay; its cursor is kept under this name (default relay).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Events read per batch (default 500).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// Post one event per request: no bulk for many accounts, no ordered runs for
    /// one account with many events waiting.
    #[arg(long)]
    #[serde(skip)]
    pub no_bulk: bool,
    /// Ledger requests in flight at once (default 8).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<usize>,
    /// Longest idle wait between polls, in milliseconds (default 1000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Give up on an event after this many transient failures (default: 30 with
    /// --once, never otherwise).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Read the outbox through PostgreSQL logical replication (slot and publication
    /// `outbox_<name>`) instead of polling.
    #[arg(long)]
    #[serde(skip_serializing_if = "is_false")]
    pub cdc: bool,
    /// Run as one of several relay processes sharing N partitions of the accounts
    /// (PostgreSQL; daemon mode only). Every member must use the same N and --name.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// With --partitions: how often ownership is checked and rebalanced, in
    /// milliseconds (default 500); bounds how long a dead member's partitions wait.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_check_ms: Option<u64>,
}

/// `outbox fanout`: the intake and the loops, or one of its subcommands.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct FanoutCli {
    #[command(subcommand)]
    pub command: Option<FanoutCommand>,
    /// The daemon's flags (all optional: the configuration can hold them).
    #[command(flatten)]
    pub run: FanoutArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct CatchUpArgs {
    /// The fan-out store: sqlite://PATH or postgres://…[?schema=NAME]
    /// (config: fanout.database)
    #[arg(long)]
    pub database: Option<String>,
    #[command(flatten)]
    pub ledger: LedgerArgs,
    /// Rescan from this log id (inclusive) instead of the checkpoint; the checkpoint
    /// never moves backwards.
    #[arg(long)]
    pub since: Option<u64>,
    /// Print only the report, as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct FanoutArgs {
    #[command(flatten)]
    pub fanout: FanoutFlags,
    // Catch up from this ledger's log: at start and every --catch-up-interval-secs,
    // append what the webhooks never brought. `--ledger-url` here turns catch-up on
    // (in the configuration: `fanout.catch_up = true` with `[ledger]`).
    #[command(flatten)]
    pub ledger: LedgerArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// The `[fanout]` keys as flags.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct FanoutFlags {
    /// Where the ledger POSTs its webhooks (path /webhooks/ledger) (default 127.0.0.1:8091).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
    /// The fan-out store: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// The ledger's webhook secret (verifies formance-webhook-signature); better as
    /// fanout.secret_file.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// A file holding the ledger's webhook secret.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// During a secret rotation, the secret being replaced: deliveries signed with it
    /// are accepted too. Remove it once the ledger signs with --secret only.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<String>,
    /// Oldest signature timestamp accepted, in seconds (default 300).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance_secs: Option<u64>,
    /// A destination; repeat for several, each with its own cursor:
    /// kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?partitions=N],
    /// amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME[&queues=N],
    /// http(s)://HOST/PATH (signed with --publish-secret).
    #[arg(long = "to")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    /// Our own signing secret for HTTP destinations.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish_secret: Option<String>,
    /// Messages read and sent per round (RabbitMQ and HTTP destinations) (default 1000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// The same for Kafka destinations, whose idempotent producer pipelines in order
    /// (default 5000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipelined_batch_size: Option<usize>,
    /// Longest idle wait between polls of the store, in milliseconds (default 500).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// With a ledger: seconds between two catch-ups (default 60).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up_interval_secs: Option<u64>,
    /// With a ledger: log entries younger than this many seconds are left to their
    /// webhooks (normally a moment behind the log) until a later catch-up (default 10).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up_settle_secs: Option<u64>,
}

/// `outbox fanout` subcommands (without one, `outbox fanout` runs the daemon).
#[derive(Debug, Clone, Subcommand)]
pub enum FanoutCommand {
    /// Read the ledger's log once, append to the fan-out store what the webhooks never
    /// brought, print what was appended, and exit.
    CatchUp(CatchUpArgs),
    /// List what destinations refused for good and what waits behind it, per account.
    DeadLetters(crate::commands::fanout_dead_letters::DeadLettersArgs),
    /// Release an account parked behind a dead letter: the running `outbox fanout`
    /// re-publishes its dead letters in order, before anything newer of the account.
    Replay(crate::commands::fanout_replay::ReplayArgs),
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub consume: ConsumeFlags,
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// The `[consume]` keys as flags.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct ConsumeFlags {
    /// The source: kafka://HOST:PORT/TOPIC[?group=G], amqp://…?exchange=NAME[&queues=N],
    /// or http://LISTEN_ADDR (the HTTP receiver for an `outbox fanout --to http…`).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The consumer database (inbox + treasury table): sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// The consumer's name: its inbox and, on Kafka, its consumer group (default treasury).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Secret of an http:// source (the fan-out's --publish-secret); better as
    /// consume.secret_file.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Raise a gap alarm when a held message waits longer than this, in seconds (default 300).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap_alarm_secs: Option<u64>,
}

/// `90d`, `36h`, `45m`, `30s`: a whole number and a unit.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a whole number then d, h, m or s"))?;
    let seconds = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" => 1,
        _ => return Err(format!("{text:?}: the unit must be d, h, m or s")),
    };
    number
        .checked_mul(seconds)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks argument ids, conflicts and requirements only when a command is
    /// built: a clash would otherwise surface as a panic of the binary at its first run.
    #[test]
    fn every_command_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
