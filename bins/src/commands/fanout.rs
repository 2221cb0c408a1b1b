//! `outbox fanout`: the webhook intake plus one fan-out loop per destination.

use std::time::Duration;

use outbox_core::{FanoutConfig, FanoutLoop, Result, RunMode, Wakeup};

use super::signal::stop_on_signal;
use crate::cli::FanoutArgs;
use crate::wiring;

pub async fn run(args: FanoutArgs) -> Result<()> {
    let catch_up = super::catch_up::Periodic::from_args(&args)?;
    let store = wiring::fanout_store(&args.database).await?;
    let mut publishers = Vec::new();
    for to in &args.to {
        publishers.push(wiring::publisher(to, args.publish_secret.as_deref()).await?);
    }
    let wakeup = Wakeup::new();
    let intake = wiring::start_intake(
        args.listen,
        &args.secret,
        args.previous_secret.as_deref(),
        Duration::from_secs(args.tolerance_secs),
        store.clone(),
        wakeup.clone(),
    )
    .await?;
    let names: Vec<_> = publishers.iter().map(|p| p.name().to_owned()).collect();
    // Tests and operators wait for this line: the intake is bound from here on.
    println!(
        "fanout: intake on {} publishing to {}",
        intake.webhook_url(),
        names.join(", ")
    );
    let stopped = stop_on_signal("finishing the publishes in flight");
    let catch_up = catch_up.map(|c| c.spawn(store.clone(), wakeup.clone(), stopped.clone()));
    let config = FanoutConfig {
        batch_size: args.batch_size,
        pipelined_batch_size: args.pipelined_batch_size,
        poll_interval: Duration::from_millis(args.poll_interval_ms),
        ..FanoutConfig::default()
    };
    let mut loops = Vec::new();
    for publisher in publishers {
        let fanout = FanoutLoop::open(store.clone(), publisher, config.clone())
            .await?
            .with_wakeup(wakeup.clone());
        loops.push(tokio::spawn(fanout.run(RunMode::Daemon, stopped.clone())));
    }
    let mut stopped_for_intake = stopped.clone();
    let _ = stopped_for_intake.wait_for(|stop| *stop).await;
    // Stop taking webhooks first (the ledger retries them), then let the loops finish.
    intake.shutdown().await;
    if let Some(task) = catch_up {
        let _ = task.await;
    }
    for (name, task) in names.iter().zip(loops) {
        let summary = task.await.map_err(|e| {
            outbox_core::Error::new(
                outbox_core::ErrorKind::Internal,
                format!("fan-out task: {e}"),
            )
        })??;
        println!(
            "fanout {name}: published {}, retried {}, permanent failures {}, blocked accounts {}",
            summary.published,
            summary.retried,
            summary.permanent_failures,
            summary.blocked.len()
        );
    }
    Ok(())
}
