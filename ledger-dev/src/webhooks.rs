//! Webhook deliveries, as the Formance webhooks service makes them (docs/LEDGER.md#webhook-deliveries).
//!
//! One delivery per event and endpoint, with a UUID that stays the same across its
//! retries. Each attempt is signed afresh (the timestamp changes). 2xx is success;
//! 408, 429, 3xx, 5xx and network errors are retried with capped exponential
//! backoff; any other 4xx is a permanent failure. Deliveries are persisted with the
//! write that produced them and marked done only when they end, so a restart
//! resumes what was not acknowledged: at-least-once, no ordering guarantee.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER, USER_AGENT};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::config::{WebhookBackoff, WebhookTarget};
use crate::events::Event;
use crate::persistence::{DeliveryOutcome, StoredDelivery};
use outbox_ledger_formance::sign;

/// Per-attempt HTTP timeout (the real service uses 30 s; dev receivers are local).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries in flight at once.
const MAX_CONCURRENT: usize = 32;

/// Delivery counters shared by the engine and the dispatcher.
#[derive(Debug, Default)]
pub(crate) struct WebhookCounters {
    pub(crate) enqueued: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) attempts: AtomicU64,
}

impl WebhookCounters {
    pub(crate) fn pending(&self) -> u64 {
        let done = self.delivered.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        self.enqueued.load(Ordering::Relaxed).saturating_sub(done)
    }
}

/// The engine's side: turns events into deliveries and hands them over.
#[derive(Debug)]
pub(crate) struct WebhookQueue {
    urls: Vec<String>,
    sender: mpsc::UnboundedSender<StoredDelivery>,
    pub(crate) counters: Arc<WebhookCounters>,
}

impl WebhookQueue {
    pub(crate) fn new(
        targets: &[WebhookTarget],
    ) -> (Self, mpsc::UnboundedReceiver<StoredDelivery>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let queue = Self {
            urls: targets.iter().map(|t| t.url.clone()).collect(),
            sender,
            counters: Arc::new(WebhookCounters::default()),
        };
        (queue, receiver)
    }

    /// One delivery per configured endpoint; the body is built once so every
    /// endpoint (and every retry) gets the same bytes.
    pub(crate) fn deliveries_for(
        &self,
        event: &Event,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Vec<StoredDelivery> {
        if self.urls.is_empty() {
            return Vec::new();
        }
        let body = event.webhook_body(at);
        let event_type = event.webhook_type();
        self.urls
            .iter()
            .map(|url| StoredDelivery {
                id: uuid::Uuid::now_v7().to_string(),
                url: url.clone(),
                event_type: event_type.clone(),
                body: body.clone(),
                created_at: at,
            })
            .collect()
    }

    /// Hands committed deliveries to the dispatcher.
    pub(crate) fn dispatch(&self, deliveries: Vec<StoredDelivery>) {
        for d in deliveries {
            self.counters.enqueued.fetch_add(1, Ordering::Relaxed);
            // The receiver lives as long as the server; after shutdown the
            // delivery stays pending in the journal and is resumed next start.
            let _ = self.sender.send(d);
        }
    }
}

/// Where the dispatcher records how deliveries ended.
pub(crate) trait OutcomeSink: Send + Sync + 'static {
    fn record(
        &self,
        delivery_id: &str,
        outcome: DeliveryOutcome,
        attempts: u32,
        detail: Option<&str>,
    );
}

/// Runs deliveries until `shutdown`; unfinished ones stay pending in the journal.
pub(crate) async fn run_dispatcher(
    mut receiver: mpsc::UnboundedReceiver<StoredDelivery>,
    targets: Vec<WebhookTarget>,
    backoff: WebhookBackoff,
    counters: Arc<WebhookCounters>,
    sink: Arc<dyn OutcomeSink>,
    shutdown: watch::Receiver<bool>,
) {
    let client = match reqwest::Client::builder()
        .timeout(ATTEMPT_TIMEOUT)
        // 3xx is a retryable answer for the webhooks service, not a redirect to follow.
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook HTTP client; webhooks stay pending");
            return;
        }
    };
    let secrets: Arc<HashMap<String, String>> = Arc::new(
        targets
            .into_iter()
            .rev() // the first target wins when a URL is listed twice
            .map(|t| (t.url, t.secret))
            .collect(),
    );
    let permits = Arc::new(Semaphore::new(MAX_CONCURRENT));
    let mut running = JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            Some(_) = running.join_next(), if !running.is_empty() => {}
            next = receiver.recv() => {
                let Some(delivery) = next else { break };
                let Some(secret) = secrets.get(&delivery.url).cloned() else {
                    tracing::warn!(
                        delivery = %delivery.id, url = %delivery.url,
                        "pending webhook delivery for an endpoint that is no longer configured; left pending"
                    );
                    continue;
                };
                let attempt = Attempts {
                    client: client.clone(),
                    secret,
                    backoff,
                    counters: Arc::clone(&counters),
                    sink: Arc::clone(&sink),
                    shutdown: shutdown.clone(),
                };
                let permits = Arc::clone(&permits);
                running.spawn(async move {
                    let Ok(_permit) = permits.acquire_owned().await else { return };
                    attempt.deliver(delivery).await;
                });
            }
        }
    }
    running.abort_all();
    while running.join_next().await.is_some() {}
}

struct Attempts {
    client: reqwest::Client,
    secret: String,
    backoff: WebhookBackoff,
    counters: Arc<WebhookCounters>,
    sink: Arc<dyn OutcomeSink>,
    shutdown: watch::Receiver<bool>,
}

/// What one attempt concluded.
enum Verdict {
    Delivered,
    Permanent(String),
    Retry {
        detail: String,
        after: Option<Duration>,
    },
}

impl Attempts {
    async fn deliver(mut self, delivery: StoredDelivery) {
        let max_attempts = self.backoff.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.counters.attempts.fetch_add(1, Ordering::Relaxed);
            let (outcome, detail) = match self.attempt(&delivery).await {
                Verdict::Delivered => (DeliveryOutcome::Delivered, None),
                Verdict::Permanent(detail) => (DeliveryOutcome::Failed, Some(detail)),
                Verdict::Retry { detail, after } if attempt < max_attempts => {
                    let mut delay = self.backoff.delay(attempt);
                    if let Some(after) = after {
                        delay = delay.max(after.min(self.backoff.max));
                    }
                    tracing::debug!(delivery = %delivery.id, attempt, ?delay, %detail, "webhook attempt failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        _ = self.shutdown.wait_for(|stop| *stop) => return,
                    }
                }
                Verdict::Retry { detail, .. } => (
                    DeliveryOutcome::Failed,
                    Some(format!("{detail}; attempts exhausted")),
                ),
            };
            if outcome == DeliveryOutcome::Failed {
                tracing::warn!(delivery = %delivery.id, url = %delivery.url, attempts = attempt,
                    detail = detail.as_deref().unwrap_or(""), "webhook delivery failed");
            }
            // Record first, count second: once the stats say "delivered", the
            // journal says so too.
            let sink = Arc::clone(&self.sink);
            let id = delivery.id.clone();
            let recorded = tokio::task::spawn_blocking(move || {
                sink.record(&id, outcome, attempt, detail.as_deref())
            });
            if let Err(e) = recorded.await {
                tracing::error!(delivery = %delivery.id, error = %e, "recording a webhook outcome panicked");
            }
            let counter = match outcome {
                DeliveryOutcome::Delivered => &self.counters.delivered,
                DeliveryOutcome::Failed => &self.counters.failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }

    async fn attempt(&self, delivery: &StoredDelivery) -> Verdict {
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign(
            &self.secret,
            &delivery.id,
            timestamp,
            delivery.body.as_bytes(),
        );
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static("formance-webhooks/v0"));
        let values = [
            ("formance-webhook-id", delivery.id.clone()),
            ("formance-webhook-timestamp", timestamp.to_string()),
            ("formance-webhook-signature", signature),
            ("formance-webhook-test", "false".to_owned()),
        ];
        for (name, value) in values {
            match HeaderValue::from_str(&value) {
                Ok(v) => {
                    headers.insert(name, v);
                }
                Err(e) => return Verdict::Permanent(format!("header {name} is not valid: {e}")),
            }
        }
        let sent = self
            .client
            .post(&delivery.url)
            .headers(headers)
            .body(delivery.body.clone())
            .send()
            .await;
        match sent {
            Err(e) => Verdict::Retry {
                detail: format!("request failed: {e}"),
                after: None,
            },
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    return Verdict::Delivered;
                }
                let retryable = status.is_server_error()
                    || status.is_redirection()
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                if retryable {
                    let after = response
                        .headers()
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    Verdict::Retry {
                        detail: format!("answered {status}"),
                        after,
                    }
                } else {
                    Verdict::Permanent(format!("answered {status}"))
                }
            }
        }
    }
}
