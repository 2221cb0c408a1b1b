//! Webhook deliveries, as the Formance webhooks service makes them (docs/LEDGER.md#webhook-deliveries).
//!
//! One delivery per event and endpoint, with a UUID that stays the same across its
//! retries. Each attempt is signed afresh (the timestamp changes). 2xx is success;
//! 408, 429, 3xx, 5xx and network errors are retried with capped exponential
//! backoff; any other 4xx is a permanent failure. Deliveries are persisted with the
//! write that produced them and marked done only when they end, so a restart
//! resumes what was not acknowledged: at-least-once, no ordering guarantee.
//!
//! The engine only announces committed deliveries; the dispatcher reads them back
//! from the journal a page at a time, never more than a page ahead of its slots, so a
//! receiver slower than the ledger's writes leaves the backlog in the journal
//! rather than in memory (docs/LEDGER.md#webhook-deliveries).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER, USER_AGENT};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::config::{WebhookBackoff, WebhookTarget};
use crate::events::Event;
use crate::persistence::{DeliveryOutcome, RecordedOutcome, StoredDelivery};
use outbox_core::Result;
use outbox_ledger_formance::sign;

/// Per-attempt HTTP timeout (the real service uses 30 s; dev receivers are local).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries in flight at once.
const MAX_CONCURRENT: usize = 32;
/// Deliveries read from the journal ahead of a free slot: with the ones in flight,
/// the most the dispatcher holds in memory.
const READ_AHEAD: usize = 256;
/// Most outcomes written in one journal transaction.
const RECORD_BATCH: usize = 256;
/// How long the dispatcher waits before reading the journal again after a failed read.
const READ_RETRY: Duration = Duration::from_secs(1);

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

/// The engine's side: turns events into deliveries and announces committed ones.
#[derive(Debug)]
pub(crate) struct WebhookQueue {
    urls: Vec<String>,
    /// Woken when deliveries were committed; the dispatcher reads them from the journal.
    wake: Arc<Notify>,
    pub(crate) counters: Arc<WebhookCounters>,
}

impl WebhookQueue {
    /// The queue, and what wakes its dispatcher.
    pub(crate) fn new(targets: &[WebhookTarget]) -> (Self, Arc<Notify>) {
        let wake = Arc::new(Notify::new());
        let queue = Self {
            urls: targets.iter().map(|t| t.url.clone()).collect(),
            wake: Arc::clone(&wake),
            counters: Arc::new(WebhookCounters::default()),
        };
        (queue, wake)
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

    /// Tells the dispatcher that `count` more deliveries are committed to the journal
    /// (at start: the ones a previous run left pending).
    pub(crate) fn announce(&self, count: usize) {
        if count == 0 {
            return;
        }
        self.counters
            .enqueued
            .fetch_add(count as u64, Ordering::Relaxed);
        // A stored permit when the dispatcher is busy: it reads again before waiting.
        self.wake.notify_one();
    }
}

/// Where the dispatcher reads pending deliveries and records how they ended.
pub(crate) trait DeliveryJournal: Send + Sync + 'static {
    /// Records how these deliveries ended, together (one commit, one wait for the
    /// engine's lock); a failure leaves them pending, to be re-sent after a restart.
    fn record(&self, outcomes: &[RecordedOutcome]);

    /// Up to `limit` deliveries without an outcome, written after the one numbered
    /// `after`, in written order, each with its number.
    fn pending_after(&self, after: i64, limit: usize) -> Result<Vec<(i64, StoredDelivery)>>;
}

/// Runs deliveries until `shutdown`; unfinished ones stay pending in the journal.
pub(crate) async fn run_dispatcher(
    wake: Arc<Notify>,
    targets: Vec<WebhookTarget>,
    backoff: WebhookBackoff,
    counters: Arc<WebhookCounters>,
    journal: Arc<dyn DeliveryJournal>,
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
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    let (outcomes, finished) = mpsc::channel(RECORD_BATCH * 2);
    let recorder = tokio::spawn(run_recorder(
        finished,
        Arc::clone(&journal),
        Arc::clone(&counters),
    ));
    let mut running = JoinSet::new();
    let mut stop = shutdown.clone();
    // Read ahead of the slots, a page at a time: one journal read (and one wait for
    // the engine's lock, behind the writes) per page rather than per delivery.
    let mut ahead: VecDeque<StoredDelivery> = VecDeque::with_capacity(READ_AHEAD);
    // The number of the last delivery read from the journal.
    let mut after = 0;
    loop {
        while running.try_join_next().is_some() {}
        let Some(delivery) = ahead.pop_front() else {
            let page = {
                let journal = Arc::clone(&journal);
                tokio::task::spawn_blocking(move || journal.pending_after(after, READ_AHEAD)).await
            };
            match page {
                Ok(Ok(page)) if page.is_empty() => {
                    tokio::select! {
                        _ = stop.wait_for(|stop| *stop) => break,
                        () = wake.notified() => {}
                    }
                }
                Ok(Ok(page)) => {
                    after = page.last().map_or(after, |(number, _)| *number);
                    ahead.extend(page.into_iter().map(|(_, delivery)| delivery));
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "cannot read pending webhook deliveries; retrying");
                    tokio::select! {
                        _ = stop.wait_for(|stop| *stop) => break,
                        () = tokio::time::sleep(READ_RETRY) => {}
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading pending webhook deliveries panicked; retrying");
                }
            }
            continue;
        };
        let Some(secret) = secrets.get(&delivery.url).cloned() else {
            tracing::warn!(
                delivery = %delivery.id, url = %delivery.url,
                "pending webhook delivery for an endpoint that is no longer configured; left pending"
            );
            continue;
        };
        let slot = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let attempt = Attempts {
            client: client.clone(),
            secret,
            backoff,
            counters: Arc::clone(&counters),
            outcomes: outcomes.clone(),
            shutdown: shutdown.clone(),
        };
        running.spawn(async move {
            let _slot = slot;
            attempt.deliver(delivery).await;
        });
    }
    running.abort_all();
    while running.join_next().await.is_some() {}
    // The recorder ends once every sender is gone and what they sent is written.
    drop(outcomes);
    if let Err(e) = recorder.await {
        tracing::error!(error = %e, "the webhook outcome recorder panicked");
    }
}

/// Writes outcomes as deliveries finish, everything waiting at once: a delivery's
/// slot is free as soon as its outcome is handed over, so the 32 slots never queue
/// one by one for the engine's lock behind the writes.
async fn run_recorder(
    mut finished: mpsc::Receiver<RecordedOutcome>,
    journal: Arc<dyn DeliveryJournal>,
    counters: Arc<WebhookCounters>,
) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while finished.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        let page = std::mem::replace(&mut batch, Vec::with_capacity(RECORD_BATCH));
        let journal = Arc::clone(&journal);
        let recorded = tokio::task::spawn_blocking(move || {
            journal.record(&page);
            page
        })
        .await;
        // Record first, count second: once the stats say "delivered", the journal
        // says so too.
        match recorded {
            Ok(page) => {
                for outcome in &page {
                    let counter = match outcome.outcome {
                        DeliveryOutcome::Delivered => &counters.delivered,
                        DeliveryOutcome::Failed => &counters.failed,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::error!(error = %e, "recording webhook outcomes panicked"),
        }
    }
}

struct Attempts {
    client: reqwest::Client,
    secret: String,
    backoff: WebhookBackoff,
    counters: Arc<WebhookCounters>,
    /// To the recorder, which writes and counts each outcome.
    outcomes: mpsc::Sender<RecordedOutcome>,
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
            let outcome = RecordedOutcome {
                delivery_id: delivery.id,
                outcome,
                attempts: attempt,
                detail,
            };
            // The recorder outlives every delivery task (it ends after them).
            let _ = self.outcomes.send(outcome).await;
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
