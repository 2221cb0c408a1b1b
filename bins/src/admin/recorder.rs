//! The process's one Prometheus recorder, installed on first use.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use outbox_core::{Error, ErrorKind, Result, metrics as names};

/// Ledger call latencies: from a local dev ledger's milliseconds to a slow ledger's
/// timeout.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Events per bulk request, up to the ledger's bulk limit.
const BULK_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The installed recorder's handle (installing it on the first call).
///
/// # Errors
/// `Internal` when another recorder was installed in this process first.
pub fn handle() -> Result<PrometheusHandle> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let failed = |e: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::Internal,
            format!("installing the Prometheus recorder: {e}"),
        )
    };
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(names::RELAY_POST_DURATION.to_owned()),
            LATENCY_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(names::RELAY_BULK_SIZE.to_owned()),
                BULK_BUCKETS,
            )
        })
        .map_err(|e| failed(&e))?
        .install_recorder()
        .map_err(|e| failed(&e))?;
    names::describe();
    crate::admin::commands::describe_dev_ledger();
    Ok(HANDLE.get_or_init(|| handle).clone())
}
