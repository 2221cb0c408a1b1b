//! `outbox fanout`: the webhook intake plus one fan-out loop per destination (and,
//! with a ledger URL, the periodic catch-up from the ledger's log), and its
//! subcommands.

use std::time::Duration;

use outbox_core::{Error, ErrorKind, FanoutConfig, FanoutLoop, Result, RunMode, Wakeup};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::signal::stop_on_signal;
use super::{catch_up, fanout_dead_letters, fanout_replay};
use crate::cli::{FanoutCli, FanoutCommand};
use crate::config::{Settings, resolve_secret};
use crate::wiring;

pub async fn run(cli: FanoutCli, settings: &Settings) -> Result<()> {
    match (cli.command, cli.run) {
        (Some(FanoutCommand::CatchUp(args)), _) => catch_up::run_once(args, settings).await,
        (Some(FanoutCommand::DeadLetters(args)), _) => fanout_dead_letters::run(args).await,
        (Some(FanoutCommand::Replay(args)), _) => fanout_replay::run(args).await,
        (None, _) => daemon(settings).await,
    }
}

async fn daemon(settings: &Settings) -> Result<()> {
    let args = &settings.fanout;
    if args.to.is_empty() {
        return Err(Error::invalid(
            "fanout.to",
            "no destination: give --to URL (repeatable) or fanout.to",
        ));
    }
    let secret = resolve_secret(
        "fanout.secret",
        args.secret.as_deref(),
        args.secret_file.as_deref(),
    )?;
    let secret = crate::config::required("fanout.secret", secret.as_deref())?.to_owned();
    let previous_secret = resolve_secret(
        "fanout.previous_secret",
        args.previous_secret.as_deref(),
        args.previous_secret_file.as_deref(),
    )?;
    let publish_secret = resolve_secret(
        "fanout.publish_secret",
        args.publish_secret.as_deref(),
        args.publish_secret_file.as_deref(),
    )?;
    // Two URLs for one destination would share a cursor: refused before anything starts.
    let names = wiring::distinct_destinations(&args.to)?;
    let catch_up = catch_up::Periodic::from_settings(settings)?;
    let store = wiring::fanout_store(&settings.fanout_database()?).await?;
    let mut publishers = Vec::new();
    for (to, name) in args.to.iter().zip(&names) {
        let publisher = wiring::publisher(to, publish_secret.as_deref()).await?;
        if publisher.name() != name {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "--to {name}: the publisher calls itself {}",
                    publisher.name()
                ),
            ));
        }
        publishers.push(publisher);
    }
    let wakeup = Wakeup::new();
    let intake = wiring::start_intake(
        args.listen,
        &secret,
        previous_secret.as_deref(),
        Duration::from_secs(args.tolerance_secs),
        store.clone(),
        wakeup.clone(),
    )
    .await?;
    // Tests and operators wait for this line: the intake is bound from here on.
    println!(
        "fanout: intake on {} publishing to {}",
        intake.webhook_url(),
        names.join(", ")
    );
    let mut signal = stop_on_signal("finishing the publishes in flight");
    let admin = crate::admin::for_fanout(settings, &names, signal.clone()).await?;
    let (stop, stopping) = watch::channel(false);
    let catch_up = catch_up.map(|c| c.spawn(store.clone(), wakeup.clone(), stopping.clone()));
    let config = FanoutConfig {
        batch_size: args.batch_size,
        pipelined_batch_size: args.pipelined_batch_size,
        poll_interval: Duration::from_millis(args.poll_interval_ms),
        ..FanoutConfig::default()
    };
    let mut loops = JoinSet::new();
    for (publisher, name) in publishers.into_iter().zip(names) {
        let fanout = FanoutLoop::open(store.clone(), publisher, config.clone())
            .await
            .map_err(|e| e.with("destination", &name))?
            .with_wakeup(wakeup.clone());
        let stopping = stopping.clone();
        let health = admin.as_ref().map(crate::admin::Admin::health);
        loops.spawn(async move {
            let outcome = fanout.run(RunMode::Daemon, stopping).await;
            crate::admin::loop_ended(health.as_deref(), &name, &outcome);
            (name, outcome)
        });
    }
    // A loop ends before a stop only when its store stayed unusable: the destination
    // is no longer served, so the whole process stops rather than go on answering
    // the ledger 204 for messages nobody publishes.
    let ended_early = tokio::select! {
        _ = signal.wait_for(|stop| *stop) => None,
        ended = loops.join_next() => ended,
    };
    // Stop taking webhooks first (the ledger retries them), then let the loops finish.
    intake.shutdown().await;
    let _ = stop.send(true);
    if let Some(task) = catch_up {
        let _ = task.await;
    }
    let mut failure = None;
    if let Some(ended) = ended_early {
        let (name, outcome) = ended.map_err(task_failed)?;
        let error = match outcome {
            Ok(_) => Error::new(ErrorKind::Internal, "the fan-out loop ended by itself"),
            Err(e) => e,
        }
        .with("destination", &name);
        tracing::error!(destination = %name, error = %error, "a fan-out loop stopped: stopping the intake and the other loops");
        failure = Some(error);
    }
    while let Some(ended) = loops.join_next().await {
        let (name, outcome) = ended.map_err(task_failed)?;
        match outcome {
            Ok(summary) => println!(
                "fanout {name}: published {}, retried {}, dead-lettered {} (set aside behind them {}, replayed {}), parked accounts {}",
                summary.published,
                summary.retried,
                summary.permanent_failures,
                summary.set_aside,
                summary.replayed,
                summary.blocked.len()
            ),
            Err(e) => {
                let error = e.with("destination", &name);
                tracing::error!(destination = %name, error = %error, "a fan-out loop stopped");
                failure.get_or_insert(error);
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

fn task_failed(e: tokio::task::JoinError) -> Error {
    Error::new(ErrorKind::Internal, format!("fan-out task: {e}"))
}
