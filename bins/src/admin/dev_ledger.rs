//! `outbox dev-ledger --admin-listen`: the dev ledger's own few metrics, read from
//! its `/_dev/stats` counters (the ledger crate keeps them; this copies them into
//! the recorder), and readiness while that answers.

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::PrometheusHandle;

use super::health::Health;

/// Transactions committed (reversals included, dry runs not).
pub const TRANSACTIONS: &str = "outbox_dev_ledger_transactions_total";
/// Writes answered from an idempotency key.
pub const IDEMPOTENCY_HITS: &str = "outbox_dev_ledger_idempotency_hits_total";
/// Webhook deliveries acknowledged with a 2xx.
pub const WEBHOOKS_DELIVERED: &str = "outbox_dev_ledger_webhooks_delivered_total";
/// Webhook deliveries given up.
pub const WEBHOOKS_FAILED: &str = "outbox_dev_ledger_webhooks_failed_total";
/// Webhook deliveries waiting for (another) attempt.
pub const WEBHOOKS_PENDING: &str = "outbox_dev_ledger_webhooks_pending";

/// The dev ledger's names, for the alert rules' check and the docs.
pub const NAMES: &[&str] = &[
    TRANSACTIONS,
    IDEMPOTENCY_HITS,
    WEBHOOKS_DELIVERED,
    WEBHOOKS_FAILED,
    WEBHOOKS_PENDING,
];

pub fn describe() {
    describe_counter!(
        TRANSACTIONS,
        "Dev ledger: transactions committed (reversals included)."
    );
    describe_counter!(
        IDEMPOTENCY_HITS,
        "Dev ledger: writes answered from an idempotency key."
    );
    describe_counter!(
        WEBHOOKS_DELIVERED,
        "Dev ledger: webhook deliveries acknowledged with a 2xx."
    );
    describe_counter!(
        WEBHOOKS_FAILED,
        "Dev ledger: webhook deliveries given up (4xx or attempts spent)."
    );
    describe_gauge!(
        WEBHOOKS_PENDING,
        "Dev ledger: webhook deliveries waiting for another attempt."
    );
}

/// Copies the counters every `interval`; the task ends with the admin server.
pub fn spawn(
    stats_url: String,
    health: Arc<Health>,
    handle: PrometheusHandle,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    health.set("ledger", Some("not read yet".to_owned()));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_default();
    tokio::spawn(async move {
        loop {
            let problem = match read(&client, &stats_url).await {
                Ok(()) => None,
                Err(e) => Some(format!("GET {stats_url}: {e}")),
            };
            health.set("ledger", problem);
            handle.run_upkeep();
            tokio::time::sleep(interval).await;
        }
    })
}

async fn read(client: &reqwest::Client, url: &str) -> Result<(), String> {
    let stats: serde_json::Value = client
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let field = |name: &str| stats.get(name).and_then(serde_json::Value::as_u64);
    let missing = |name: &str| format!("the stats have no {name:?}");
    counter!(TRANSACTIONS).absolute(field("transactions").ok_or_else(|| missing("transactions"))?);
    counter!(IDEMPOTENCY_HITS).absolute(field("idempotencyHits").unwrap_or(0));
    counter!(WEBHOOKS_DELIVERED).absolute(field("webhooksDelivered").unwrap_or(0));
    counter!(WEBHOOKS_FAILED).absolute(field("webhooksFailed").unwrap_or(0));
    gauge!(WEBHOOKS_PENDING).set(field("webhooksPending").unwrap_or(0) as f64);
    Ok(())
}
