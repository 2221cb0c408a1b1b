//! `outbox consume`: the reference treasury consumer on one transport.

use std::time::Duration;

use std::sync::Arc;

use outbox_core::{MessageSink, Result};

use super::signal::stop_on_signal;
use crate::config::{Settings, redact_url, required, resolve_secret};
use crate::wiring;

pub async fn run(settings: &Settings) -> Result<()> {
    let args = &settings.consume;
    let from = required("consume.from", args.from.as_deref())?;
    let secret = resolve_secret(
        "consume.secret",
        args.secret.as_deref(),
        args.secret_file.as_deref(),
    )?;
    let database = settings.consume_database()?;
    let gap_alarm = Duration::from_secs(args.gap_alarm_secs);
    let treasury = wiring::treasury(&database, &args.name, gap_alarm).await?;
    let subscriber = wiring::subscriber(from, &args.name, secret.as_deref()).await?;
    println!(
        "consume: {} from {} into {}",
        args.name,
        subscriber.describe,
        redact_url(&database)
    );
    let stopped = stop_on_signal("finishing the message in hand");
    let _admin = crate::admin::for_consume(settings, stopped.clone()).await?;
    let alarms = tokio::spawn(watch_gaps(treasury.clone(), gap_alarm));
    let sink: Arc<dyn MessageSink> = treasury.sink();
    let result = subscriber.subscriber.run(sink, stopped).await;
    alarms.abort();
    let s = treasury.stats();
    let get = crate::consumer::ConsumerStats::get;
    println!(
        "consume {}: applied {}, duplicates {}, held {}, released {}, stale {}, conflicts {}",
        args.name,
        get(&s.applied),
        get(&s.duplicates),
        get(&s.held),
        get(&s.released),
        get(&s.stale),
        get(&s.conflicts)
    );
    result
}

/// Checks the gap queue now and then: a held message that waits too long raises an
/// alarm (an exception row and a log line); it is never skipped.
async fn watch_gaps(treasury: wiring::Treasury, every: Duration) {
    let every = (every / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        match treasury.check_gaps().await {
            Ok(alarms) => {
                for alarm in alarms {
                    tracing::error!(
                        ?alarm,
                        "gap alarm: a held message waits for a missing sequence"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "gap check failed"),
        }
    }
}
