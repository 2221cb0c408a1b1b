//! Fault injection on the write routes (create, bulk, revert, metadata), so the
//! relay's tests can meet the failures a real ledger shows:
//!
//! - **before commit** — a queue of forced answers (`429` with `Retry-After`,
//!   `503`, …) and a seeded ratio of 5xx answers; the request is *not* executed;
//! - **slow** — the request waits `delay` before it is executed;
//! - **after commit** — the request is executed and committed, then its answer is
//!   held for `hold` (longer than the client's timeout), so the client sees a
//!   timeout for a write that happened: the "answer lost" case;
//! - **broken idempotency** — a ledger that ignores `Idempotency-Key` (a replay runs
//!   again) or that never compares the body's hash under a stored key (a changed body
//!   is answered as a replay): what `outbox probe` exists to catch, so its tests can
//!   meet it.
//!
//! Set it in-process through [`FaultInjector`] or from another process with
//! `POST /_dev/faults` and a JSON [`FaultPlan`]; `DELETE /_dev/faults` clears it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::errors::{ApiError, ErrorCode};
use crate::idempotency::Honour;

/// A forced answer, repeated `count` times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueuedAnswer {
    /// HTTP status to answer with (for example 429 or 503).
    pub status: u16,
    /// `Retry-After` header value, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
    /// How many consecutive write requests get this answer.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

fn default_error_status() -> u16 {
    503
}

fn default_hold_ms() -> u64 {
    30_000
}

/// A complete fault plan (the JSON body of `POST /_dev/faults`). All fields are
/// optional; an empty plan injects nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultPlan {
    /// Share (0..=1) of write requests answered `error_status` before executing.
    #[serde(default)]
    pub error_ratio: f64,
    /// Status of ratio-injected errors; 503 by default.
    #[serde(default = "default_error_status")]
    pub error_status: u16,
    /// Seed of the ratio's random draws, so a run can be repeated.
    #[serde(default)]
    pub seed: u64,
    /// Forced answers for the next write requests, in order, before the ratio applies.
    #[serde(default)]
    pub queue: Vec<QueuedAnswer>,
    /// Every write request waits this long before it is executed.
    #[serde(default)]
    pub delay_ms: u64,
    /// The next N write requests are executed, then their answers held `hold_ms`.
    #[serde(default)]
    pub timeout_after_commit: u32,
    /// How long an answer is held after commit; 30 s by default.
    #[serde(default = "default_hold_ms")]
    pub hold_ms: u64,
    /// Share (0..=1) of write requests committed and then held `hold_ms`, drawn like `error_ratio`.
    #[serde(default)]
    pub timeout_after_commit_ratio: f64,
    /// Every write request whose body contains this text is committed, then its answer
    /// held `hold_ms`: lets a test kill a client right after one chosen commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_matching: Option<String>,
    /// With `hold_matching`: hold only the next N matching requests (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_matching_count: Option<u32>,
    /// Every write request whose body contains this text is answered `error_status`
    /// before anything runs: a ledger that keeps failing one account's writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_matching: Option<String>,
    /// `GET /logs` serves the log with this id under a wrong hash (its own with the
    /// first byte flipped): a stored hash that was rewritten. Reads only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_log_hash: Option<u64>,
    /// `GET /logs` serves the log with this id with altered data under its original
    /// hash (a transaction's first posting one minor unit larger, a metadata write with
    /// one more key): a stored log rewritten after it was hashed. Reads only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_log_data: Option<u64>,
    /// No idempotency: the `Idempotency-Key` header is ignored, so a replay runs as a
    /// new write (a new transaction, or the reference's 409 when the body's reference
    /// is taken) and no key is stored.
    #[serde(default)]
    pub ignore_idempotency_key: bool,
    /// Keys are looked up but the body's hash is never compared: the same key with a
    /// changed body answers the stored result as a replay instead of 400 VALIDATION.
    #[serde(default)]
    pub ignore_body_hash: bool,
}

impl Default for FaultPlan {
    fn default() -> Self {
        Self {
            error_ratio: 0.0,
            error_status: default_error_status(),
            seed: 0,
            queue: Vec::new(),
            delay_ms: 0,
            timeout_after_commit: 0,
            hold_ms: default_hold_ms(),
            timeout_after_commit_ratio: 0.0,
            hold_matching: None,
            hold_matching_count: None,
            fail_matching: None,
            corrupt_log_hash: None,
            corrupt_log_data: None,
            ignore_idempotency_key: false,
            ignore_body_hash: false,
        }
    }
}

impl FaultPlan {
    fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.error_ratio) {
            return Err(format!(
                "errorRatio must be within 0..=1, got {}",
                self.error_ratio
            ));
        }
        if !(0.0..=1.0).contains(&self.timeout_after_commit_ratio) {
            return Err(format!(
                "timeoutAfterCommitRatio must be within 0..=1, got {}",
                self.timeout_after_commit_ratio
            ));
        }
        let status_ok = |s: u16| {
            StatusCode::from_u16(s).is_ok_and(|s| s.is_client_error() || s.is_server_error())
        };
        if !status_ok(self.error_status) || !(500..600).contains(&self.error_status) {
            return Err(format!(
                "errorStatus must be a 5xx status, got {}",
                self.error_status
            ));
        }
        if let Some(bad) = self.queue.iter().find(|q| !status_ok(q.status)) {
            return Err(format!(
                "queued status must be a 4xx or 5xx status, got {}",
                bad.status
            ));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Inner {
    plan: FaultPlan,
    queue: VecDeque<QueuedAnswer>,
    rng: SplitMix64,
}

/// A handle on the fault plan of a running dev ledger. Clones share the plan.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    inner: Arc<Mutex<Inner>>,
    injected: Arc<AtomicU64>,
}

impl Default for FaultInjector {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                plan: FaultPlan::default(),
                queue: VecDeque::new(),
                rng: SplitMix64(0),
            })),
            injected: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// What the injector decided for one write request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Answer {
        status: u16,
        retry_after_secs: Option<u64>,
    },
    Proceed {
        delay: Option<Duration>,
        hold: Option<Duration>,
    },
}

impl FaultInjector {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves a consistent plan: keep going.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the whole plan.
    ///
    /// # Errors
    /// A description of the first invalid field (ratio outside 0..=1, a status that
    /// is not an error status).
    pub fn set_plan(&self, plan: FaultPlan) -> Result<(), String> {
        plan.validate()?;
        let mut inner = self.lock();
        inner.queue = plan.queue.iter().cloned().collect();
        inner.rng = SplitMix64(plan.seed);
        inner.plan = plan;
        Ok(())
    }

    /// The plan as it stands (queue and after-commit count are what remains).
    pub fn plan(&self) -> FaultPlan {
        let inner = self.lock();
        FaultPlan {
            queue: inner.queue.iter().cloned().collect(),
            ..inner.plan.clone()
        }
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.set_plan(FaultPlan::default())
            .expect("the default plan is valid");
    }

    /// Answers a share `ratio` (0..=1) of write requests with 503 before executing
    /// them, drawing from a generator seeded with `seed`.
    ///
    /// # Panics
    /// If `ratio` is outside 0..=1.
    pub fn fail_ratio(&self, ratio: f64, seed: u64) {
        assert!(
            (0.0..=1.0).contains(&ratio),
            "a ratio is within 0..=1, got {ratio}"
        );
        let mut inner = self.lock();
        inner.plan.error_ratio = ratio;
        inner.plan.seed = seed;
        inner.rng = SplitMix64(seed);
    }

    /// The next `count` write requests are answered `status` (with `Retry-After`
    /// when given) without being executed.
    pub fn push_status(&self, status: StatusCode, retry_after: Option<Duration>, count: u32) {
        self.lock().queue.push_back(QueuedAnswer {
            status: status.as_u16(),
            retry_after_secs: retry_after.map(|d| d.as_secs()),
            count,
        });
    }

    /// Every write request waits `delay` before it is executed (zero turns it off).
    pub fn set_delay(&self, delay: Duration) {
        self.lock().plan.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    }

    /// The next `count` write requests are committed, then their answers are held
    /// for `hold` — past the client's timeout — before being sent.
    pub fn timeout_after_commit(&self, count: u32, hold: Duration) {
        let mut inner = self.lock();
        inner.plan.timeout_after_commit = count;
        inner.plan.hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
    }

    /// Every write request whose body contains `needle` is committed, then its answer
    /// is held for `hold`.
    pub fn hold_after_commit_matching(&self, needle: &str, hold: Duration) {
        let mut inner = self.lock();
        inner.plan.hold_matching = Some(needle.to_owned());
        inner.plan.hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
    }

    /// Every write request whose body contains `needle` is answered 503 before commit.
    pub fn fail_matching(&self, needle: &str) {
        self.lock().plan.fail_matching = Some(needle.to_owned());
    }

    /// `GET /logs` serves log `id` under a wrong hash (see [`FaultPlan::corrupt_log_hash`]).
    pub fn corrupt_log_hash(&self, id: u64) {
        self.lock().plan.corrupt_log_hash = Some(id);
    }

    /// `GET /logs` serves log `id` with altered data under its original hash (see
    /// [`FaultPlan::corrupt_log_data`]).
    pub fn corrupt_log_data(&self, id: u64) {
        self.lock().plan.corrupt_log_data = Some(id);
    }

    /// Which logs `GET /logs` serves corrupted.
    pub(crate) fn log_corruption(&self) -> crate::log_tamper::LogCorruption {
        let inner = self.lock();
        crate::log_tamper::LogCorruption {
            hash: inner.plan.corrupt_log_hash,
            data: inner.plan.corrupt_log_data,
        }
    }

    /// Turns the "no idempotency" misbehaviour on or off: keys are ignored, a replay
    /// runs again.
    pub fn ignore_idempotency_keys(&self, on: bool) {
        self.lock().plan.ignore_idempotency_key = on;
    }

    /// Turns the "no body hash" misbehaviour on or off: a stored key answers its
    /// stored result whatever the body.
    pub fn ignore_body_hash(&self, on: bool) {
        self.lock().plan.ignore_body_hash = on;
    }

    /// How writes honour their idempotency keys under the current plan.
    pub(crate) fn idempotency(&self) -> Honour {
        let inner = self.lock();
        Honour {
            key: !inner.plan.ignore_idempotency_key,
            hash: !inner.plan.ignore_body_hash,
        }
    }

    /// The texts the plan looks for in bodies: (hold, fail).
    fn needles(&self) -> (Option<String>, Option<String>) {
        let inner = self.lock();
        (
            inner.plan.hold_matching.clone(),
            inner.plan.fail_matching.clone(),
        )
    }

    /// How many answers were forced, failed or held so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn decide(&self, body_matches: bool) -> Decision {
        self.decide_body(body_matches, false)
    }

    /// `hold_body`: the body contains the hold needle; `fail_body`: the fail needle.
    fn decide_body(&self, hold_body: bool, fail_body: bool) -> Decision {
        let mut inner = self.lock();
        if fail_body {
            return Decision::Answer {
                status: inner.plan.error_status,
                retry_after_secs: None,
            };
        }
        let body_matches = hold_body && inner.plan.hold_matching_count != Some(0);
        if body_matches && let Some(left) = inner.plan.hold_matching_count.as_mut() {
            *left -= 1;
        }
        if let Some(front) = inner.queue.front_mut() {
            let decision = Decision::Answer {
                status: front.status,
                retry_after_secs: front.retry_after_secs,
            };
            front.count = front.count.saturating_sub(1);
            if front.count == 0 {
                inner.queue.pop_front();
            }
            return decision;
        }
        if inner.plan.error_ratio > 0.0 && inner.rng.next_unit() < inner.plan.error_ratio {
            return Decision::Answer {
                status: inner.plan.error_status,
                retry_after_secs: None,
            };
        }
        let delay = (inner.plan.delay_ms > 0).then(|| Duration::from_millis(inner.plan.delay_ms));
        let by_count = inner.plan.timeout_after_commit > 0;
        if by_count {
            inner.plan.timeout_after_commit -= 1;
        }
        let ratio = inner.plan.timeout_after_commit_ratio;
        let by_ratio = ratio > 0.0 && inner.rng.next_unit() < ratio;
        let hold = (by_count || by_ratio || body_matches)
            .then(|| Duration::from_millis(inner.plan.hold_ms));
        Decision::Proceed { delay, hold }
    }
}

/// The state the fault middleware needs: the plan, and the shutdown signal so a
/// held answer does not keep the server from stopping.
#[derive(Debug, Clone)]
pub(crate) struct FaultLayer {
    pub(crate) injector: FaultInjector,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// Sleeps `d`, or less if the server shuts down.
async fn pause(d: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
}

fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Axum middleware applied to the write routes.
pub(crate) async fn middleware(
    State(mut layer): State<FaultLayer>,
    request: Request,
    next: Next,
) -> Response {
    // The body is read only when a plan matches on it, so the usual path stays as it was.
    let (request, hold_body, fail_body) = match layer.injector.needles() {
        (None, None) => (request, false, false),
        (hold, fail) => {
            let (parts, body) = request.into_parts();
            let bytes = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_default();
            let has = |needle: &Option<String>| {
                needle
                    .as_ref()
                    .is_some_and(|n| contains_bytes(&bytes, n.as_bytes()))
            };
            let (hold_body, fail_body) = (has(&hold), has(&fail));
            (
                Request::from_parts(parts, Body::from(bytes)),
                hold_body,
                fail_body,
            )
        }
    };
    match layer.injector.decide_body(hold_body, fail_body) {
        Decision::Answer {
            status,
            retry_after_secs,
        } => {
            layer.injector.injected.fetch_add(1, Ordering::Relaxed);
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            tracing::debug!(%status, "fault injector: answering before commit");
            let mut response = ApiError::new(
                ErrorCode::Internal,
                format!("injected fault: {status} before commit (nothing was written)"),
            )
            .with_status(status)
            .into_response();
            if let Some(secs) = retry_after_secs {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            response
        }
        Decision::Proceed { delay, hold } => {
            if let Some(delay) = delay {
                layer.injector.injected.fetch_add(1, Ordering::Relaxed);
                pause(delay, &mut layer.shutdown).await;
            }
            let response = next.run(request).await;
            if let Some(hold) = hold {
                layer.injector.injected.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?hold, "fault injector: holding a committed answer");
                // Buffer the body first, so the hold is the only thing the client waits for.
                let (parts, body) = response.into_parts();
                let bytes = axum::body::to_bytes(body, usize::MAX)
                    .await
                    .unwrap_or_default();
                pause(hold, &mut layer.shutdown).await;
                return Response::from_parts(parts, Body::from(bytes));
            }
            response
        }
    }
}

/// SplitMix64: tiny, seedable, good enough to pick which requests fail.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_unit(&mut self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // 53 random bits fit an f64 mantissa exactly
        let x = (self.next_u64() >> 11) as f64;
        x / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_then_ratio_then_proceed() {
        let f = FaultInjector::default();
        f.push_status(
            StatusCode::TOO_MANY_REQUESTS,
            Some(Duration::from_secs(1)),
            2,
        );
        for _ in 0..2 {
            assert_eq!(
                f.decide(false),
                Decision::Answer {
                    status: 429,
                    retry_after_secs: Some(1)
                }
            );
        }
        assert_eq!(
            f.decide(false),
            Decision::Proceed {
                delay: None,
                hold: None
            }
        );
        f.fail_ratio(1.0, 7);
        assert!(matches!(
            f.decide(false),
            Decision::Answer { status: 503, .. }
        ));
        f.clear();
        f.timeout_after_commit(1, Duration::from_millis(5));
        assert_eq!(
            f.decide(false),
            Decision::Proceed {
                delay: None,
                hold: Some(Duration::from_millis(5))
            }
        );
        assert_eq!(
            f.decide(false),
            Decision::Proceed {
                delay: None,
                hold: None
            }
        );
    }

    #[test]
    fn seeded_ratio_is_repeatable() {
        let draws = |seed| {
            let f = FaultInjector::default();
            f.fail_ratio(0.3, seed);
            (0..200)
                .filter(|_| matches!(f.decide(false), Decision::Answer { .. }))
                .count()
        };
        let n = draws(42);
        assert_eq!(n, draws(42));
        assert!((30..=90).contains(&n), "{n} of 200 at 0.3");
    }

    #[test]
    fn plans_are_validated() {
        let f = FaultInjector::default();
        let bad = FaultPlan {
            error_ratio: 1.5,
            ..FaultPlan::default()
        };
        assert!(f.set_plan(bad).unwrap_err().contains("errorRatio"));
        let plan: FaultPlan = serde_json::from_str(
            r#"{"queue":[{"status":429,"retryAfterSecs":2,"count":3}],"delayMs":10}"#,
        )
        .unwrap();
        f.set_plan(plan).unwrap();
        assert_eq!(f.plan().queue[0].count, 3);
    }

    #[test]
    fn matching_bodies_fail_or_are_held_a_bounded_number_of_times() {
        let f = FaultInjector::default();
        f.set_plan(FaultPlan {
            hold_matching: Some("x".into()),
            hold_matching_count: Some(1),
            hold_ms: 4,
            ..FaultPlan::default()
        })
        .unwrap();
        let held = Decision::Proceed {
            delay: None,
            hold: Some(Duration::from_millis(4)),
        };
        let plain = Decision::Proceed {
            delay: None,
            hold: None,
        };
        assert_eq!(f.decide_body(true, false), held);
        assert_eq!(f.decide_body(true, false), plain, "held past its count");
        f.fail_matching("acct-9");
        assert_eq!(f.needles().1.as_deref(), Some("acct-9"));
        assert!(matches!(
            f.decide_body(false, true),
            Decision::Answer { status: 503, .. }
        ));
        assert_eq!(f.decide_body(false, false), plain);
    }

    #[test]
    fn idempotency_misbehaviours_are_part_of_the_plan() {
        let f = FaultInjector::default();
        assert_eq!(
            f.idempotency(),
            Honour {
                key: true,
                hash: true
            }
        );
        f.ignore_idempotency_keys(true);
        f.ignore_body_hash(true);
        assert_eq!(
            f.idempotency(),
            Honour {
                key: false,
                hash: false
            }
        );
        let plan: FaultPlan = serde_json::from_str(&serde_json::to_string(&f.plan()).unwrap())
            .expect("the plan round-trips through JSON");
        assert!(plan.ignore_idempotency_key && plan.ignore_body_hash);
        f.clear();
        assert!(f.idempotency().key && f.idempotency().hash);
    }

    #[test]
    fn a_matching_body_or_the_ratio_holds_the_answer() {
        let f = FaultInjector::default();
        f.hold_after_commit_matching("event-13", Duration::from_millis(7));
        assert_eq!(f.needles().0.as_deref(), Some("event-13"));
        assert_eq!(
            f.decide(false),
            Decision::Proceed {
                delay: None,
                hold: None
            }
        );
        assert_eq!(
            f.decide(true),
            Decision::Proceed {
                delay: None,
                hold: Some(Duration::from_millis(7))
            }
        );
        assert!(contains_bytes(b"{\"ik\":\"event-13\"}", b"event-13"));
        assert!(!contains_bytes(b"abc", b""));
        f.clear();
        f.set_plan(FaultPlan {
            timeout_after_commit_ratio: 1.0,
            hold_ms: 3,
            ..FaultPlan::default()
        })
        .unwrap();
        assert_eq!(
            f.decide(false),
            Decision::Proceed {
                delay: None,
                hold: Some(Duration::from_millis(3))
            }
        );
        assert!(
            f.set_plan(FaultPlan {
                timeout_after_commit_ratio: 1.5,
                ..FaultPlan::default()
            })
            .is_err()
        );
    }
}
