//! The relay dispatcher: reads a `Relay`, posts to a `Ledger`, records outcomes, moves
//! the cursor. Per-account order, accounts in parallel, retries that park only the
//! failing account, and an exact replay check for the events a crash left uncertain.

mod config;
pub mod notice;
mod queues;
mod send;
mod summary;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::sync::watch;

pub use config::{Backoff, DispatchConfig};
pub use summary::Summary;

pub use notice::OUTBOX_REJECTED_CODE_KEY;

use self::queues::{Pending, Queues, Refusal};
use self::send::Sent;
use crate::domain::{EventId, OutboxEvent, PayloadKind, Position};
use crate::error::{Error, ErrorKind, Result};
use crate::exception::{ExceptionKind, NewException};
use crate::ledger::{Ledger, PostOutcome};
use crate::metrics::{self, RelayOutcome};
use crate::relay::Relay;
use crate::retry::RetryPolicy;
use crate::store::{DeliveryOutcome, DeliveryRecord, DeliveryState, Store, attempted_cursor};

/// Retries a storage call on transient errors under [`RetryPolicy::STORE`]: an
/// outcome the ledger already gave must be recorded, not lost. A macro so the call
/// may borrow `self` mutably on each try.
macro_rules! retry_transient {
    ($call:expr) => {{
        let mut retries = RetryPolicy::STORE.start();
        loop {
            match $call.await {
                Err(e) => match retries.after(e) {
                    Ok(delay) => tokio::time::sleep(delay).await,
                    Err(e) => break Err(e),
                },
                ok => break ok,
            }
        }
    }};
}

/// Most records that wait behind a write in flight before the dispatcher waits for
/// it: a slow store slows the relay down instead of filling its memory.
const MAX_UNRECORDED: usize = 2_000;

/// Whether [`Dispatcher::run`] keeps waiting for new events or stops when drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// Run until shutdown is signalled.
    Daemon,
    /// Stop once every committed event has a terminal outcome (or its account is stopped).
    Drain,
}

/// Posts outbox events to the ledger. See the module docs.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    relay: Box<dyn Relay>,
    ledger: Arc<dyn Ledger>,
    config: DispatchConfig,
    queues: Queues,
    /// Durable high-water mark of positions read for sending; events up to it that have
    /// no terminal record may have reached the ledger before a crash.
    attempted: Option<Position>,
    uncertain_through: Option<Position>,
    drained: bool,
    /// The last read filled its batch: more events are likely waiting.
    backlog: bool,
    /// Drain mode ends only on an empty read that follows a wait: a CDC relay reads
    /// its replication stream in `wait`, so an empty buffer alone proves nothing.
    looked_again: bool,
    /// A frontier position not yet saved as the cursor, and when the cursor was last saved.
    unsaved_cursor: Option<Position>,
    cursor_saved_at: Instant,
    /// Records being written while the next rounds are sent.
    recording: Option<tokio::task::JoinHandle<Result<()>>>,
    /// Records of rounds answered while `recording` was still being written: they go
    /// in the next write (group commit), so a round costs no store write of its own.
    unrecorded: (Vec<DeliveryRecord>, Vec<NewException>),
    summary: Summary,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("relay", &self.relay.name())
            .field("config", &self.config)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// Prepares a run; loads the uncertain window left by an earlier run.
    pub async fn open(
        store: Arc<dyn Store>,
        relay: Box<dyn Relay>,
        ledger: Arc<dyn Ledger>,
        config: DispatchConfig,
    ) -> Result<Self> {
        let attempted = store.load_cursor(&attempted_cursor(relay.name())).await?;
        if relay.acknowledged().is_none() && attempted.is_none() && store.has_deliveries().await? {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "relay {:?} has no saved cursor, but this outbox already has delivery records: \
                     another relay name has been delivering it. Starting fresh would send every event \
                     again and re-evaluate the ones the ledger refused; run the relay under the name \
                     that delivered them (--name)",
                    relay.name()
                ),
            )
            .with("relay", relay.name()));
        }
        Ok(Self {
            store,
            relay,
            ledger,
            config,
            queues: Queues::default(),
            attempted,
            uncertain_through: attempted,
            drained: false,
            backlog: false,
            looked_again: false,
            unsaved_cursor: None,
            cursor_saved_at: Instant::now(),
            recording: None,
            unrecorded: (Vec::new(), Vec::new()),
            summary: Summary::default(),
        })
    }

    /// Runs until drained (`RunMode::Drain`) or until `shutdown` turns true. A shutdown
    /// lets the round in flight finish and be recorded; nothing is cut off mid-post.
    pub async fn run(
        mut self,
        mode: RunMode,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Summary> {
        metrics::relay_accounts(self.relay.name(), 0, 0);
        loop {
            if *shutdown.borrow() {
                break;
            }
            self.refill().await?;
            let max_run = send::max_run(self.ledger.as_ref(), &self.config);
            let runs = self.queues.ready_runs(Instant::now(), max_run);
            if runs.is_empty() {
                // Idle: make the cursor exact before waiting. Events read as already
                // terminal (a restart's uncertain window) end no round, so the
                // frontier is advanced here too, or the cursor would stay behind them.
                if let Some(position) = self.queues.advance_frontier() {
                    self.unsaved_cursor = Some(position);
                }
                self.save_cursor().await?;
                if mode == RunMode::Drain && self.drained && self.queues.only_stopped_left() {
                    if self.looked_again {
                        break;
                    }
                    self.looked_again = true;
                    self.relay.wait(self.config.poll_interval).await;
                    continue;
                }
                let unpark = self.queues.next_unpark();
                let interval = self.config.poll_interval;
                tokio::select! {
                    _ = shutdown.changed() => {}
                    () = wait(self.relay.as_mut(), interval, unpark, self.drained) => {}
                }
                continue;
            }
            // While a backlog lasts (the last read filled its batch), read the next
            // batch while this round is on the wire when the queue will run low once
            // it is answered: the read and its horizon write then cost no time of
            // their own. The batch is queued only after its horizon is durable, so
            // none of it is sent before. Without a backlog the read waits for the
            // round: reading ahead would only delay each round by a read and a
            // horizon write, and every event's latency with it.
            let in_round: usize = runs.iter().map(Vec::len).sum();
            let read_ahead = self.backlog
                && self.queues.active().saturating_sub(in_round) < self.config.batch_size;
            let relay_name = self.relay.name().to_owned();
            let sending = send::send_round(
                self.ledger.as_ref(),
                self.store.as_ref(),
                runs,
                &self.config,
                &relay_name,
            );
            let (outcomes, ahead) = if read_ahead {
                let plan = self.read_plan();
                let reading = read_batch(self.relay.as_mut(), self.store.as_ref(), plan);
                let (outcomes, ahead) = tokio::join!(sending, reading);
                (outcomes, Some(ahead))
            } else {
                (sending.await, None)
            };
            // The round's outcomes are applied (a refusal made durable) even when the
            // read failed.
            self.apply(outcomes).await?;
            if let Some(ahead) = ahead {
                self.admit_batch(ahead?);
            }
            let (parked, stopped) = self.queues.parked_and_stopped();
            metrics::relay_accounts(self.relay.name(), parked, stopped);
            if let Some(position) = self.queues.advance_frontier() {
                self.unsaved_cursor = Some(position);
            }
            if self.cursor_saved_at.elapsed() >= self.config.cursor_interval {
                self.save_cursor().await?;
            }
        }
        self.save_cursor().await?;
        self.summary.stopped = self.queues.stopped_accounts();
        Ok(self.summary)
    }

    /// Saves the cursor at the frontier, if it moved since the last save — only once
    /// the records up to it are durable.
    async fn save_cursor(&mut self) -> Result<()> {
        self.finish_recording().await?;
        if let Some(position) = self.unsaved_cursor.take() {
            retry_transient!(self.relay.acknowledge(position))?;
        }
        self.cursor_saved_at = Instant::now();
        Ok(())
    }

    /// Reads more events when the active queue runs low.
    async fn refill(&mut self) -> Result<()> {
        if self.queues.active() >= self.config.batch_size {
            return Ok(());
        }
        let plan = self.read_plan();
        let read = read_batch(self.relay.as_mut(), self.store.as_ref(), plan).await?;
        self.admit_batch(read);
        Ok(())
    }

    fn read_plan(&self) -> ReadPlan {
        ReadPlan {
            batch_size: self.config.batch_size,
            uncertain_through: self.uncertain_through,
            attempted: self.attempted,
        }
    }

    /// Queues a batch [`read_batch`] returned (its horizon is durable already).
    fn admit_batch(&mut self, read: ReadBatch) {
        self.drained = read.events.is_empty();
        self.backlog = read.events.len() >= self.config.batch_size;
        if !self.drained {
            self.looked_again = false;
        }
        self.attempted = read.attempted;
        for event in read.events {
            self.admit(event, &read.states);
        }
    }

    fn is_uncertain(&self, event: &OutboxEvent) -> bool {
        in_uncertain_window(self.uncertain_through, event)
    }

    /// Queues an event read from the relay. One from the uncertain window is checked
    /// against its records: terminal ones are not sent again, a recorded refusal only
    /// gets its notice (re-sent: a replay when it had been written), and one with no
    /// outcome is sent alone, after a look for its rejection notice on the ledger.
    fn admit(&mut self, event: OutboxEvent, states: &HashMap<EventId, DeliveryState>) {
        let uncertain = self.is_uncertain(&event);
        let post = matches!(event.payload.split(), Ok((PayloadKind::Post, _)));
        let state = states.get(&event.event_id);
        let attempts = state.map_or(0, |s| s.attempts);
        let mut refused = None;
        if let Some(terminal) = state.and_then(|s| s.terminal.as_ref()) {
            if terminal.outcome != DeliveryOutcome::Rejected {
                self.summary.already_done += 1;
                self.queues.push_done(&event);
                return;
            }
            refused = Some(Refusal {
                code: terminal
                    .error_code
                    .clone()
                    .unwrap_or_else(|| "REJECTED".to_owned()),
            });
        }
        self.queues.push(Pending {
            event,
            attempts,
            failures: 0,
            uncertain: uncertain && refused.is_none(),
            post,
            refused,
        });
    }

    /// Records a round's answers: delivery rows first, then exceptions; moves heads.
    ///
    /// Accepted and replayed outcomes are idempotent in the ledger, so their records
    /// are written while the next rounds are sent, rounds answered during one write
    /// going together in the next (group commit: a hot account's rounds come faster
    /// than a durable write). A crash before they are durable leaves the events in
    /// the uncertain window: re-sent alone, seen as replays. The cursor is saved only
    /// after them. A refusal is not idempotent: its record is durable before the
    /// round ends, and only then is its notice sent (the next round) and its account
    /// allowed to move on.
    async fn apply(&mut self, outcomes: Vec<(Pending, Result<Sent>)>) -> Result<()> {
        let mut records = Vec::with_capacity(outcomes.len());
        let mut exceptions = Vec::new();
        let mut refusals = false;
        for (head, sent) in outcomes {
            let account = head.event.account.clone();
            let attempt = head.attempts + 1;
            match sent {
                Ok(Sent::Posted(PostOutcome::Accepted { transaction_id })) => {
                    self.summary.accepted += 1;
                    metrics::relay_outcome(self.relay.name(), RelayOutcome::Posted);
                    records.push(record(
                        &head.event,
                        attempt,
                        DeliveryOutcome::Accepted,
                        Some(transaction_id),
                        None,
                        None,
                    ));
                    self.queues.complete_head(&account);
                }
                Ok(Sent::Posted(PostOutcome::Replayed { transaction_id })) => {
                    tracing::info!(event_id = %head.event.event_id, account = %account, transaction_id, "ledger replayed the original transaction (Idempotency-Hit)");
                    self.summary.replayed += 1;
                    metrics::relay_outcome(self.relay.name(), RelayOutcome::Replayed);
                    records.push(record(
                        &head.event,
                        attempt,
                        DeliveryOutcome::Replayed,
                        Some(transaction_id),
                        None,
                        None,
                    ));
                    self.queues.complete_head(&account);
                }
                Ok(Sent::Posted(PostOutcome::Rejected { code, message })) => {
                    tracing::warn!(event_id = %head.event.event_id, account = %account, sequence = head.event.sequence, code, "ledger rejected the event");
                    self.summary.rejected += 1;
                    metrics::relay_outcome(self.relay.name(), RelayOutcome::Rejected);
                    records.push(record(
                        &head.event,
                        attempt,
                        DeliveryOutcome::Rejected,
                        None,
                        Some(code.clone()),
                        Some(message),
                    ));
                    exceptions.push(exception(
                        &head.event,
                        ExceptionKind::Rejected,
                        code.clone(),
                    ));
                    refusals = true;
                    self.queues.refuse_head(&account, Refusal { code });
                }
                Ok(Sent::AlreadyRefused { code }) => {
                    tracing::warn!(event_id = %head.event.event_id, account = %account, sequence = head.event.sequence, code, "the ledger holds this event's rejection notice: refused before a crash, not posted again");
                    self.summary.rejected += 1;
                    metrics::relay_outcome(self.relay.name(), RelayOutcome::Rejected);
                    records.push(record(
                        &head.event,
                        attempt,
                        DeliveryOutcome::Rejected,
                        None,
                        Some(code.clone()),
                        Some("rejection notice found on the ledger after a restart; not posted again".to_owned()),
                    ));
                    exceptions.push(exception(&head.event, ExceptionKind::Rejected, code));
                    self.queues.complete_head(&account);
                }
                Ok(Sent::Notified) => self.queues.complete_head(&account),
                Ok(Sent::RolledBack { through, reason }) => {
                    tracing::info!(event_id = %head.event.event_id, account = %account, sequence = head.event.sequence, %reason, "the ledger rolled back a run of this account: its events go one by one through the one that failed");
                    self.queues.fall_back_to_singles(&account, through, false);
                }
                Ok(Sent::RunUnknown { through, error }) => {
                    tracing::warn!(event_id = %head.event.event_id, account = %account, sequence = head.event.sequence, error = %error, "a run of this account failed with its outcome unknown (all or none committed): its events go alone, a committed one answering as a replay");
                    metrics::relay_outcome(self.relay.name(), RelayOutcome::Failed);
                    let code = error_code(&error);
                    records.push(record(
                        &head.event,
                        attempt,
                        DeliveryOutcome::Failed,
                        None,
                        Some(code),
                        Some(error.to_string()),
                    ));
                    self.queues.fall_back_to_singles(&account, through, true);
                    match self.retry_delay(&head, &error) {
                        Some(delay) => {
                            self.summary.retried += 1;
                            self.queues.park(&account, Instant::now() + delay);
                        }
                        None => self.queues.count_attempt(&account),
                    }
                }
                Err(err) if head.refused.is_some() => {
                    if let Some(kind) = self.fail_notice(&head, &err) {
                        exceptions.push(exception(
                            &head.event,
                            kind,
                            format!("rejection notice: {err}"),
                        ));
                    }
                }
                Err(err) => {
                    metrics::relay_outcome(self.relay.name(), RelayOutcome::Failed);
                    let code = error_code(&err);
                    records.push(record(
                        &head.event,
                        attempt,
                        DeliveryOutcome::Failed,
                        None,
                        Some(code.clone()),
                        Some(err.to_string()),
                    ));
                    if let Some(kind) = self.fail(&head, &err) {
                        exceptions.push(exception(&head.event, kind, format!("{code}: {err}")));
                    }
                }
            }
        }
        self.unrecorded.0.extend(records);
        self.unrecorded.1.extend(exceptions);
        if refusals {
            return self.finish_recording().await;
        }
        let writing = self.recording.as_ref().is_some_and(|t| !t.is_finished());
        if writing && self.unrecorded.0.len() < MAX_UNRECORDED {
            // The write in flight is not durable yet: these wait to join the next one.
            return Ok(());
        }
        self.await_recording().await?;
        let (records, exceptions) = std::mem::take(&mut self.unrecorded);
        let store = Arc::clone(&self.store);
        self.recording = Some(tokio::spawn(async move {
            write_records(store.as_ref(), &records, &exceptions).await
        }));
        Ok(())
    }

    /// Makes every record so far durable: the write in flight, then what waited
    /// behind it.
    async fn finish_recording(&mut self) -> Result<()> {
        self.await_recording().await?;
        let (records, exceptions) = std::mem::take(&mut self.unrecorded);
        if records.is_empty() && exceptions.is_empty() {
            return Ok(());
        }
        write_records(self.store.as_ref(), &records, &exceptions).await
    }

    /// Waits for the write in flight, if any.
    async fn await_recording(&mut self) -> Result<()> {
        match self.recording.take() {
            Some(task) => task.await.map_err(|e| {
                Error::new(ErrorKind::Internal, format!("recording task failed: {e}"))
            })?,
            None => Ok(()),
        }
    }

    /// Parks or stops the account of a failed head; returns the exception to raise, if any.
    fn fail(&mut self, head: &Pending, err: &Error) -> Option<ExceptionKind> {
        let account = &head.event.account;
        let (event_id, sequence) = (head.event.event_id, head.event.sequence);
        if err.kind() == &ErrorKind::IdempotencyMismatch {
            tracing::error!(%event_id, %account, sequence, error = %err, "idempotency key reused with a different body: account stopped");
            self.queues.count_attempt(account);
            self.queues.stop(account);
            return Some(ExceptionKind::IdempotencyMismatch);
        }
        if let Some(delay) = self.retry_delay(head, err) {
            tracing::debug!(%event_id, %account, ?delay, error = %err, "transient failure: account parked");
            self.summary.retried += 1;
            self.queues.park(account, Instant::now() + delay);
            return None;
        }
        tracing::error!(%event_id, %account, sequence, error = %err, "permanent failure: account stopped");
        self.queues.count_attempt(account);
        self.queues.stop(account);
        Some(ExceptionKind::Stopped)
    }

    /// How long to wait before retrying `head` after `err`; `None` when it must not be
    /// retried (a permanent error, or the attempts are spent in drain mode).
    fn retry_delay(&self, head: &Pending, err: &Error) -> Option<Duration> {
        let policy = RetryPolicy {
            backoff: self.config.backoff,
            // `max_attempts` counts failures; the policy counts retries after the first.
            max_retries: self.config.max_attempts.map(|max| max.saturating_sub(1)),
        };
        policy.delay_after(head.failures + 1, err)
    }

    /// A refused head's notice failed: retry the notice (never the post) after a
    /// backoff, or stop the account when it cannot succeed.
    fn fail_notice(&mut self, head: &Pending, err: &Error) -> Option<ExceptionKind> {
        let account = &head.event.account;
        if let Some(delay) = self.retry_delay(head, err) {
            tracing::warn!(event_id = %head.event.event_id, %account, ?delay, error = %err, "rejection notice failed: the notice (not the post) is retried");
            self.summary.retried += 1;
            self.queues.park_notice(account, Instant::now() + delay);
            return None;
        }
        tracing::error!(event_id = %head.event.event_id, %account, sequence = head.event.sequence, error = %err, "rejection notice failed permanently: account stopped (the refusal is recorded)");
        self.queues.stop(account);
        Some(ExceptionKind::Stopped)
    }
}

/// A batch read for sending, with the delivery states of its events a crash may have
/// left uncertain and the read horizon that covers it.
struct ReadBatch {
    events: Vec<OutboxEvent>,
    states: HashMap<EventId, DeliveryState>,
    attempted: Option<Position>,
}

/// What a read needs from the dispatcher, copied so that it can run beside a round.
#[derive(Debug, Clone, Copy)]
struct ReadPlan {
    batch_size: usize,
    uncertain_through: Option<Position>,
    attempted: Option<Position>,
}

/// Reads up to `batch_size` events, looks up (in one call) the states of those at or
/// below `uncertain_through`, and records the read horizon past the batch before
/// returning, so that nothing of it can be sent before the horizon is durable.
async fn read_batch(relay: &mut dyn Relay, store: &dyn Store, plan: ReadPlan) -> Result<ReadBatch> {
    let ReadPlan {
        batch_size,
        uncertain_through,
        attempted,
    } = plan;
    let events = retry_transient!(relay.next_batch(batch_size))?;
    let uncertain: Vec<EventId> = events
        .iter()
        .filter(|e| in_uncertain_window(uncertain_through, e))
        .map(|e| e.event_id)
        .collect();
    let states = if uncertain.is_empty() {
        HashMap::new()
    } else {
        retry_transient!(store.delivery_states(&uncertain))?
    };
    let attempted = match events.last() {
        Some(last) if attempted.is_none_or(|a| a < last.position) => {
            let key = attempted_cursor(relay.name());
            retry_transient!(store.save_cursor(&key, last.position))?;
            Some(last.position)
        }
        _ => attempted,
    };
    Ok(ReadBatch {
        events,
        states,
        attempted,
    })
}

/// Whether `event` lies in the window a crash may have left uncertain (at or below
/// the horizon the previous run had read).
fn in_uncertain_window(uncertain_through: Option<Position>, event: &OutboxEvent) -> bool {
    uncertain_through.is_some_and(|u| event.position <= u)
}

/// Appends delivery records, then raises exceptions, retrying lock contention.
async fn write_records(
    store: &dyn Store,
    records: &[DeliveryRecord],
    exceptions: &[NewException],
) -> Result<()> {
    retry_transient!(store.append_deliveries(records))?;
    for exception in exceptions {
        retry_transient!(store.raise_exception(exception))?;
    }
    Ok(())
}

fn record(
    event: &OutboxEvent,
    attempt: u32,
    outcome: DeliveryOutcome,
    ledger_tx_id: Option<u64>,
    error_code: Option<String>,
    detail: Option<String>,
) -> DeliveryRecord {
    DeliveryRecord {
        event_id: event.event_id,
        attempt,
        outcome,
        ledger_tx_id,
        error_code,
        detail,
        at: Utc::now(),
    }
}

fn exception(event: &OutboxEvent, kind: ExceptionKind, detail: String) -> NewException {
    NewException::new("relay", kind, event.account.clone(), event.sequence, detail)
        .with_event_id(event.event_id.to_string())
}

/// The ledger's error code when the adapter kept one, else a code for the error kind.
fn error_code(err: &Error) -> String {
    if let Some(code) = err.code() {
        return code.to_owned();
    }
    match err.kind() {
        ErrorKind::IdempotencyMismatch => "IDEMPOTENCY_MISMATCH".to_owned(),
        ErrorKind::Transport => "TRANSPORT".to_owned(),
        other => format!("{other:?}").to_uppercase(),
    }
}

/// Waits for new events, a parked account's retry time, or the poll interval.
async fn wait(relay: &mut dyn Relay, interval: Duration, unpark: Option<Instant>, drained: bool) {
    match unpark {
        Some(at) if !drained => tokio::time::sleep_until(at.into()).await,
        Some(at) => {
            tokio::select! {
                () = tokio::time::sleep_until(at.into()) => {}
                () = relay.wait(interval) => {}
            }
        }
        None => relay.wait(interval).await,
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod run_tests;
#[cfg(test)]
mod tests;
