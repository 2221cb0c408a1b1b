//! Command-line arguments. Every flag can also come from an `OUTBOX_`-prefixed variable.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "outbox",
    version,
    about = "Move payout instructions into the ledger exactly once, in per-account order"
)]
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

/// Where the Formance ledger is and how to reach it (the relay, the catch-up).
#[derive(Debug, Clone, clap::Args)]
pub struct LedgerArgs {
    /// Formance API root without /v2, e.g. http://127.0.0.1:3068
    #[arg(id = "ledger_url", long = "ledger-url", env = "OUTBOX_LEDGER_URL")]
    pub url: String,
    #[arg(id = "ledger_name", long = "ledger-name", env = "OUTBOX_LEDGER_NAME")]
    pub name: String,
    /// Bearer token for the ledger API, if it needs one.
    #[arg(
        id = "ledger_token",
        long = "ledger-token",
        env = "OUTBOX_LEDGER_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    #[arg(long, env = "OUTBOX_DATABASE")]
    pub database: String,
    #[command(flatten)]
    pub ledger: LedgerArgs,
    /// Create the ledger if it does not exist.
    #[arg(long)]
    pub create_ledger: bool,
    /// Drain what is committed, then exit (instead of running as a daemon).
    #[arg(long)]
    pub once: bool,
    /// Name of this relay; its cursor is kept under this name.
    #[arg(long, default_value = "relay")]
    pub name: String,
    /// Events read per batch.
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    /// Post one event per request instead of bulk.
    #[arg(long)]
    pub no_bulk: bool,
    /// Ledger requests in flight at once.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Longest idle wait between polls, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub poll_interval_ms: u64,
    /// Ledger request timeout, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// Give up on an event after this many transient failures (default: 30 with --once, never otherwise).
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Read the outbox through PostgreSQL logical replication (slot and publication
    /// `outbox_<name>`) instead of polling.
    #[arg(long, conflicts_with = "partitions")]
    pub cdc: bool,
    /// Run as one of several relay processes sharing N partitions of the accounts
    /// (PostgreSQL; daemon mode only). Every member must use the same N and --name.
    #[arg(long, conflicts_with = "once")]
    pub partitions: Option<u32>,
    /// With --partitions: how often ownership is checked and rebalanced; bounds how
    /// long a dead member's partitions wait for a new owner.
    #[arg(long, default_value_t = 500)]
    pub partition_check_ms: u64,
    /// With --partitions: when the database holds another partition count for this
    /// relay (or it ran as a single relay), start a new layout with N partitions, each
    /// resuming at the lowest cursor it merges. Refused while other members run.
    #[arg(long, requires = "partitions")]
    pub repartition: bool,
    #[command(flatten)]
    pub admin: crate::admin::AdminArgs,
}

/// `outbox fanout`: the intake and the loops, or one of its subcommands.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct FanoutCli {
    #[command(subcommand)]
    pub command: Option<FanoutCommand>,
    /// Present when no subcommand is given (clap then requires its arguments).
    #[command(flatten)]
    pub run: Option<FanoutArgs>,
    /// The daemon's admin server. Here rather than in `FanoutArgs`: clap cannot tell
    /// an optional flattened struct is present when it flattens another one.
    #[command(flatten)]
    pub admin: crate::admin::AdminArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct CatchUpArgs {
    /// The fan-out store: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long, env = "OUTBOX_DATABASE")]
    pub database: String,
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

#[derive(Debug, Clone, clap::Args)]
pub struct FanoutArgs {
    /// Where the ledger POSTs its webhooks (path /webhooks/ledger).
    #[arg(long, env = "OUTBOX_FANOUT_LISTEN", default_value = "127.0.0.1:8091")]
    pub listen: std::net::SocketAddr,
    /// The fan-out store: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long, env = "OUTBOX_DATABASE")]
    pub database: String,
    /// The ledger's webhook secret (verifies formance-webhook-signature).
    #[arg(long, env = "OUTBOX_WEBHOOK_SECRET", hide_env_values = true)]
    pub secret: String,
    /// During a secret rotation, the secret being replaced: deliveries signed with it
    /// are accepted too. Remove it once the ledger signs with --secret only.
    #[arg(long, env = "OUTBOX_WEBHOOK_PREVIOUS_SECRET", hide_env_values = true)]
    pub previous_secret: Option<String>,
    /// Oldest signature timestamp accepted, in seconds.
    #[arg(long, default_value_t = 300)]
    pub tolerance_secs: u64,
    /// A destination; repeat for several, each with its own cursor:
    /// kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?partitions=N],
    /// amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME[&queues=N],
    /// http(s)://HOST/PATH (signed with --publish-secret).
    #[arg(long = "to", required = true)]
    pub to: Vec<String>,
    /// Our own signing secret for HTTP destinations.
    #[arg(long, env = "OUTBOX_PUBLISH_SECRET", hide_env_values = true)]
    pub publish_secret: Option<String>,
    /// Messages read and sent per round (RabbitMQ and HTTP destinations).
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// The same for Kafka destinations, whose idempotent producer pipelines in order.
    #[arg(long, default_value_t = 5000)]
    pub pipelined_batch_size: usize,
    /// Longest idle wait between polls of the store, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub poll_interval_ms: u64,
    /// Catch up from this ledger's log (Formance API root without /v2): at start and
    /// every --catch-up-interval-secs, append what the webhooks never brought.
    #[arg(long, env = "OUTBOX_LEDGER_URL", requires = "ledger_name")]
    pub ledger_url: Option<String>,
    #[arg(long, env = "OUTBOX_LEDGER_NAME")]
    pub ledger_name: Option<String>,
    /// Bearer token for the ledger API, if it needs one.
    #[arg(long, env = "OUTBOX_LEDGER_TOKEN", hide_env_values = true)]
    pub ledger_token: Option<String>,
    /// With --ledger-url: seconds between two catch-ups.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub catch_up_interval_secs: u64,
    /// With --ledger-url: log entries younger than this many seconds are left to their
    /// webhooks (normally a moment behind the log) until a later catch-up.
    #[arg(long, default_value_t = 10)]
    pub catch_up_settle_secs: u64,
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

#[derive(Debug, Clone, clap::Args)]
pub struct ConsumeArgs {
    /// The source: kafka://HOST:PORT/TOPIC[?group=G], amqp://…?exchange=NAME[&queues=N],
    /// or http://LISTEN_ADDR (the HTTP receiver for an `outbox fanout --to http…`).
    #[arg(long)]
    pub from: String,
    /// The consumer database (inbox + treasury table): sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long, env = "OUTBOX_DATABASE")]
    pub database: String,
    /// The consumer's name: its inbox and, on Kafka, its consumer group.
    #[arg(long, default_value = "treasury")]
    pub name: String,
    /// Secret of an http:// source (the fan-out's --publish-secret).
    #[arg(long, env = "OUTBOX_PUBLISH_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Raise a gap alarm when a held message waits longer than this, in seconds.
    #[arg(long, default_value_t = 300)]
    pub gap_alarm_secs: u64,
    #[command(flatten)]
    pub admin: crate::admin::AdminArgs,
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
