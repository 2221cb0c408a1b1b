//! `outbox relay`: the Hop 1 daemon, or `--once` to drain and exit.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    Backoff, DispatchConfig, Dispatcher, Error, ErrorKind, Result, RunMode, Summary,
};
use outbox_ledger_formance::FormanceLedger;

use super::signal::stop_on_signal;
use crate::cli::RelayArgs;
use crate::config::Settings;
use crate::wiring;

pub async fn run(args: RelayArgs, settings: &Settings) -> Result<()> {
    let summary = relay(&args, settings).await?;
    let name = &settings.relay.name;
    println!(
        "relay {name}: accepted {}, replayed {}, rejected {}, retried {}, already done {}, stopped accounts {}",
        summary.accepted,
        summary.replayed,
        summary.rejected,
        summary.retried,
        summary.already_done,
        summary.stopped.len()
    );
    if summary.stopped.is_empty() {
        return Ok(());
    }
    let names: Vec<_> = summary.stopped.iter().map(ToString::to_string).collect();
    eprintln!(
        "stopped accounts (see `outbox exceptions list`): {}",
        names.join(", ")
    );
    // A scheduled drain that left accounts stopped did not do what it was asked.
    Err(Error::new(
        ErrorKind::Incomplete,
        format!(
            "{} account(s) stopped with events left undelivered",
            summary.stopped.len()
        ),
    )
    .with("relay", name))
}

/// Flag combinations that the configuration layers could bring together.
fn check(args: &RelayArgs, settings: &Settings) -> Result<()> {
    let relay = &settings.relay;
    let refuse = |key: &str, message: &str| Err(Error::invalid(key, message));
    if relay.cdc && relay.partitions.is_some() {
        return refuse(
            "relay.cdc",
            "a CDC relay is one process: it cannot share partitions (relay.partitions)",
        );
    }
    if args.once && relay.partitions.is_some() {
        return refuse(
            "relay.partitions",
            "a fleet member runs as a daemon: --once drains with a single relay",
        );
    }
    if args.from_cdc && (relay.cdc || relay.partitions.is_some()) {
        return refuse(
            "relay.cdc",
            "--from-cdc switches a CDC relay to the single polling relay: drop --cdc and --partitions",
        );
    }
    if args.repartition && relay.partitions.is_none() {
        return refuse("relay.partitions", "--repartition needs --partitions N");
    }
    Ok(())
}

/// Runs the dispatcher (or, with `--partitions`, a fleet member) with the wiring the
/// configuration names.
pub async fn relay(args: &RelayArgs, settings: &Settings) -> Result<Summary> {
    check(args, settings)?;
    let relay = &settings.relay;
    let database = wiring::database(&settings.outbox_database()?)?;
    let mut ledger_config = settings.ledger.formance_config()?;
    ledger_config.create_ledger_if_missing = relay.create_ledger;
    let ledger = Arc::new(FormanceLedger::connect(&ledger_config).await?);
    let config = DispatchConfig {
        batch_size: relay.batch_size,
        bulk: relay.bulk,
        parallel_requests: relay.parallel,
        poll_interval: Duration::from_millis(relay.poll_interval_ms),
        backoff: Backoff::default(),
        max_attempts: relay.max_attempts.or(args.once.then_some(30)),
        ..DispatchConfig::default()
    };
    // Held to the end of the run: a second relay of this name is refused meanwhile.
    let mut name_lock = database
        .lock_relay(&relay.name, relay.partitions.is_some())
        .await?;
    let stopped = stop_on_signal("finishing the posts in flight");
    // Served until the run ends; not ready from the stop signal on (draining).
    let _admin = crate::admin::for_relay(settings, stopped.clone()).await?;
    if let Some(partitions) = relay.partitions {
        let fleet = wiring::FleetStart {
            partitions,
            repartition: args.repartition,
            other_members: name_lock.other_holders().await?,
            check_interval: Duration::from_millis(relay.partition_check_ms),
        };
        return database
            .run_fleet(&relay.name, fleet, ledger, config, stopped)
            .await;
    }
    let _name_lock = name_lock;
    if args.from_cdc {
        database.leave_cdc(&relay.name).await?;
    }
    let (store, relay_source) = if relay.cdc {
        database.store_and_cdc_relay(&relay.name).await?
    } else {
        database.store_and_relay(&relay.name).await?
    };
    let dispatcher = Dispatcher::open(store, relay_source, ledger, config).await?;
    if args.once {
        crate::progress::while_running("relay: draining", dispatcher.run(RunMode::Drain, stopped))
            .await
    } else {
        dispatcher.run(RunMode::Daemon, stopped).await
    }
}
