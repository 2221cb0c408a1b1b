//! `outbox relay`: the Hop 1 daemon, or `--once` to drain and exit.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{Backoff, DispatchConfig, Dispatcher, Result, RunMode, Summary};
use outbox_ledger_formance::{AuthConfig, FormanceConfig, FormanceLedger, Secret};

use super::signal::stop_on_signal;
use crate::cli::RelayArgs;
use crate::wiring;

pub async fn run(args: RelayArgs) -> Result<()> {
    let summary = relay(&args).await?;
    println!(
        "relay {}: accepted {}, replayed {}, rejected {}, retried {}, already done {}, stopped accounts {}",
        args.name,
        summary.accepted,
        summary.replayed,
        summary.rejected,
        summary.retried,
        summary.already_done,
        summary.stopped.len()
    );
    if !summary.stopped.is_empty() {
        let names: Vec<_> = summary.stopped.iter().map(ToString::to_string).collect();
        eprintln!(
            "stopped accounts (see the exceptions table): {}",
            names.join(", ")
        );
    }
    Ok(())
}

/// Runs the dispatcher (or, with `--partitions`, a fleet member) with the wiring the
/// arguments name.
pub async fn relay(args: &RelayArgs) -> Result<Summary> {
    let database = wiring::database(&args.database)?;
    let mut ledger_config = FormanceConfig::new(&args.ledger.url, &args.ledger.name);
    ledger_config.request_timeout_ms = args.request_timeout_ms;
    ledger_config.create_ledger_if_missing = args.create_ledger;
    if let Some(token) = &args.ledger.token {
        ledger_config.auth = AuthConfig::Bearer {
            token: Secret::new(token.clone()),
        };
    }
    let ledger = Arc::new(FormanceLedger::connect(&ledger_config).await?);
    let config = DispatchConfig {
        batch_size: args.batch_size,
        bulk: !args.no_bulk,
        parallel_requests: args.parallel,
        poll_interval: Duration::from_millis(args.poll_interval_ms),
        backoff: Backoff::default(),
        max_attempts: args.max_attempts.or(args.once.then_some(30)),
        ..DispatchConfig::default()
    };
    // Held to the end of the run: a second relay of this name is refused meanwhile.
    let mut name_lock = database
        .lock_relay(&args.name, args.partitions.is_some())
        .await?;
    let stopped = stop_on_signal("finishing the posts in flight");
    // Served until the run ends; not ready from the stop signal on (draining).
    let _admin = crate::admin::for_relay(args, stopped.clone()).await?;
    if let Some(partitions) = args.partitions {
        let fleet = wiring::FleetStart {
            partitions,
            repartition: args.repartition,
            other_members: name_lock.other_holders().await?,
            check_interval: Duration::from_millis(args.partition_check_ms),
        };
        return database
            .run_fleet(&args.name, fleet, ledger, config, stopped)
            .await;
    }
    let _name_lock = name_lock;
    let (store, relay) = if args.cdc {
        database.store_and_cdc_relay(&args.name).await?
    } else {
        database.store_and_relay(&args.name).await?
    };
    let dispatcher = Dispatcher::open(store, relay, ledger, config).await?;
    let mode = if args.once {
        RunMode::Drain
    } else {
        RunMode::Daemon
    };
    dispatcher.run(mode, stopped).await
}
