//! The treasury service: consumes the ledger's committed transactions from RabbitMQ
//! and applies each through the PostgreSQL inbox, until SIGTERM or ctrl-c.
//!
//! `treasury-service --database postgres://… [--schema S] --amqp amqp://… --queue Q
//! [--consumer NAME]`

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use outbox_core::Subscriber;
use outbox_example_treasury_service::Treasury;
use outbox_store_postgres::PgConfig;
use outbox_transport_amqp::{AmqpConfig, AmqpSubscriber};
use tokio::sync::watch;

#[derive(Parser)]
struct Args {
    /// The treasury's database: its balances, its journal and the inbox tables.
    #[arg(long, env = "DATABASE_URL")]
    database: String,
    /// Schema of those tables (created if missing).
    #[arg(long)]
    schema: Option<String>,
    /// The RabbitMQ broker, `amqp://user:password@host:port/vhost`.
    #[arg(long, env = "TREASURY_AMQP_URL")]
    amqp: String,
    /// The queues to consume: the exchange the fan-out publishes to, whose queues
    /// are `<queue>.0` … `<queue>.<N-1>` (outbox-transport-amqp's topology).
    #[arg(long, visible_alias = "exchange")]
    queue: String,
    /// `N`, how many queues accounts are spread over; must match the publisher's.
    #[arg(long, default_value_t = 8)]
    queue_count: u16,
    /// The name the inbox is keyed on; two services with one name share one inbox.
    #[arg(long, default_value = "treasury")]
    consumer: String,
    /// How long a gap may stay open before it raises an alarm, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    gap_alarm_after_ms: u64,
    /// How often the gap queue is checked for alarms, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    gap_check_every_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "treasury service stopped");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> outbox_core::Result<()> {
    let mut database = PgConfig::from_url(&args.database)?;
    // How an operator (or `pg_terminate_backend`) finds our sessions in pg_stat_activity.
    database.application_name = format!("treasury-service/{}", args.consumer);
    if let Some(schema) = args.schema {
        database = database.with_schema(schema);
    }
    let treasury = Treasury::open(
        &database,
        &args.consumer,
        Duration::from_millis(args.gap_alarm_after_ms),
    )
    .await?;
    let mut amqp = AmqpConfig::new(args.amqp, &args.queue);
    amqp.queue_count = args.queue_count;
    let subscriber = AmqpSubscriber::new(amqp)?;

    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down after the delivery in hand");
        let _ = stop.send(true);
    });
    let gaps = tokio::spawn(watch_gaps(
        treasury.clone(),
        Duration::from_millis(args.gap_check_every_ms.max(1)),
        shutdown.clone(),
    ));
    // The line a supervisor (or the tests) waits for: set up, about to consume.
    println!(
        "treasury-service consuming {queue}.0..{queue}.{last} as {consumer}",
        queue = args.queue,
        last = args.queue_count.saturating_sub(1),
        consumer = treasury.consumer()
    );
    let result = subscriber.run(Arc::new(treasury), shutdown).await;
    gaps.abort();
    result
}

/// Checks for old gaps every `every` until shutdown. An alarm is logged (by the
/// inbox engine, once per gap) and recorded in `exceptions`; the gap is never skipped.
async fn watch_gaps(treasury: Treasury, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        match treasury.check_gaps().await {
            Ok(alarms) if !alarms.is_empty() => {
                tracing::error!(
                    new_alarms = alarms.len(),
                    "gaps older than the alarm age: held messages wait, nothing is skipped"
                );
            }
            Ok(_) => {}
            // The next tick tries again; an unreachable database also stops the inbox.
            Err(e) => tracing::warn!(error = %e, "gap check failed"),
        }
    }
}

/// SIGTERM (how a process manager stops us) or ctrl-c.
#[cfg(unix)]
async fn shutdown_signal() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(e) => {
                tracing::warn!(error = %e, "no SIGTERM handler; ctrl-c only");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(not(unix))]
async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
