//! `FanoutLoop`: publishes the fan-out store to one transport, in per-account order, at
//! least once, keeping that transport's cursor.
//!
//! Each round reads the messages after the cursor and sends, per account, the head
//! (or, when the publisher pipelines in order, a run of up to `max_per_account`). An
//! account whose message failed transiently is parked with backoff and none of its
//! later messages go out before that one is confirmed: a failing account never
//! reorders, never blocks its neighbours and is never skipped. Other accounts'
//! confirmations past a parked message are kept in memory; the durable cursor moves
//! only over a contiguous confirmed prefix, so a crash re-sends at most what was past
//! it (consumers dedupe on the instruction id).
//!
//! A message the destination refuses permanently is dead-lettered
//! ([`super::dead_letter`]): its account is parked and its later messages are recorded
//! behind it, in order, so the cursor passes them and the look-ahead buffer never
//! fills up behind one poisoned account. A replay request releases the account; the
//! loop then re-publishes its recorded messages in order before anything newer of it.
//! Every store call retries transient errors ([`crate::RetryPolicy::STORE`]); a loop whose store
//! stays unusable ends with the error, and the process running it should stop.
//!
//! A publisher that keeps order on the wire (`ordered_pipeline`: Kafka's idempotent
//! producer) gets up to `rounds_in_flight` rounds at once; waiting for each round's
//! confirmations before sending the next would cap throughput at one broker round
//! trip per round. Rounds are settled in the order they were sent. When a message
//! fails, the account's messages in rounds already in flight are not trusted even if
//! confirmed (they may have overtaken the failure): they are sent again after it, and
//! the account gets no new messages until those rounds have settled.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::dead_letter::{DeadLetterReason, NewDeadLetter};
use super::set_aside::{Disposition, SetAside};
use super::{FanoutConfig, FanoutStore, FanoutSummary, Publisher, StoredMessage};
use crate::dispatch::RunMode;
use crate::domain::Account;
use crate::error::{Error, Result, Retry};
use crate::metrics;
use crate::relay::Wakeup;

/// How often a streaming loop writes its cursor.
const CURSOR_SAVE_EVERY: Duration = Duration::from_millis(200);
/// How often a streaming loop looks for replay requests (an idle one looks each time
/// it wakes up).
const REPLAY_REQUESTS_EVERY: Duration = Duration::from_secs(1);

/// Why an account is not sent to until `until`: a transient failure.
#[derive(Debug, Clone, Copy)]
struct Park {
    until: Instant,
    failures: u32,
}

/// A message of a round, and whether it is a replay of a dead letter (behind the
/// cursor, tracked by the set-aside bookkeeping instead of the buffer).
#[derive(Debug, Clone)]
struct Outgoing {
    stored: StoredMessage,
    replay: bool,
}

/// Publishes a [`FanoutStore`] to one [`Publisher`]. See the module docs.
pub struct FanoutLoop {
    store: Arc<dyn FanoutStore>,
    publisher: Arc<dyn Publisher>,
    config: FanoutConfig,
    wakeup: Option<Wakeup>,
    cursor: u64,
    saved_cursor: u64,
    /// Confirmed positions above the cursor (past a parked account's message).
    confirmed: BTreeSet<u64>,
    parked: HashMap<Account, Park>,
    /// Rounds sent and not yet settled, oldest first, and their positions.
    in_flight: VecDeque<InFlight>,
    in_flight_positions: HashSet<u64>,
    next_round: u64,
    /// Account → the first round sent after one of its messages failed: its results
    /// in earlier rounds are not trusted.
    tainted: HashMap<Account, u64>,
    /// Messages read after the cursor and not yet behind it, ascending; read once
    /// from the store, kept until the cursor passes them (a failed one is re-sent
    /// from here).
    buffer: VecDeque<StoredMessage>,
    /// How many leading buffer entries are in flight or confirmed: while no account
    /// is set aside a round's selection starts after them. With 16 rounds of 5,000
    /// in flight, walking them again for every round cost more than the store reads.
    settled_prefix: usize,
    /// The highest position read into the buffer.
    read_through: u64,
    /// The next window, being read while the oldest round settles.
    prefetch: Option<JoinHandle<Result<Vec<StoredMessage>>>>,
    /// Whether the last read filled its window (more is likely waiting).
    last_read_full: bool,
    cursor_saved_at: Instant,
    /// Dead-lettered accounts: parked, being replayed, or recorded past the cursor.
    set_aside: SetAside,
    requests_checked_at: Instant,
    summary: FanoutSummary,
}

/// One published round awaiting its confirmations.
struct InFlight {
    id: u64,
    send: Vec<Outgoing>,
    task: JoinHandle<Vec<Result<()>>>,
}

impl std::fmt::Debug for FanoutLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanoutLoop")
            .field("publisher", &self.publisher.name())
            .field("cursor", &self.cursor)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One round's selection: the messages to send and every window message read.
struct Round {
    send: Vec<Outgoing>,
    /// When the earliest parked account may be retried (nothing sendable before).
    next_retry: Option<Instant>,
    /// Messages were passed or set aside: the buffer moved even if nothing is sent.
    progressed: bool,
}

impl FanoutLoop {
    /// Resumes after the publisher's saved cursor, with the destination's dead
    /// letters as the last run left them (parked accounts stay parked).
    ///
    /// # Errors
    /// A store error that outlasted the retries.
    pub async fn open(
        store: Arc<dyn FanoutStore>,
        publisher: Arc<dyn Publisher>,
        config: FanoutConfig,
    ) -> Result<Self> {
        let retry = config.store_retry;
        let name = publisher.name().to_owned();
        let cursor = retry
            .run("load_cursor", || store.load_cursor(&name))
            .await?;
        let set_aside = SetAside::load(&store, &name, cursor, &retry).await?;
        Ok(Self {
            store,
            publisher,
            config,
            wakeup: None,
            cursor,
            saved_cursor: cursor,
            confirmed: BTreeSet::new(),
            parked: HashMap::new(),
            in_flight: VecDeque::new(),
            in_flight_positions: HashSet::new(),
            next_round: 0,
            tainted: HashMap::new(),
            buffer: VecDeque::new(),
            settled_prefix: 0,
            read_through: cursor,
            prefetch: None,
            last_read_full: false,
            cursor_saved_at: Instant::now(),
            set_aside,
            requests_checked_at: Instant::now(),
            summary: FanoutSummary::default(),
        })
    }

    /// Wakes the loop as soon as the intake stored something (instead of polling).
    pub fn with_wakeup(mut self, wakeup: Wakeup) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    /// The durable position: everything up to it was confirmed.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Runs until `shutdown` turns true (`Daemon`) or until every stored message is
    /// confirmed or dead-lettered and no replay is left (`Drain`). A shutdown lets the
    /// round in flight finish and saves the cursor.
    ///
    /// # Errors
    /// A store error that outlasted the retries (the cursor or the dead letters cannot
    /// be kept): the destination is no longer served, and whoever runs the loop should
    /// stop. Transport errors never end the run: they park or dead-letter their account.
    pub async fn run(
        mut self,
        mode: RunMode,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<FanoutSummary> {
        let depth = if self.publisher.capabilities().ordered_pipeline {
            self.config.rounds_in_flight.max(1)
        } else {
            1
        };
        // Alive until this returns, however it returns (an error included).
        let _alive = LoopAlive::new(self.publisher.name());
        loop {
            let stopping = *shutdown.borrow();
            let mut nothing_to_send = None;
            while !stopping && self.in_flight.len() < depth {
                let round = self.select().await?;
                if !round.send.is_empty() {
                    self.launch(round.send);
                } else if !round.progressed {
                    nothing_to_send = Some(round);
                    break;
                }
            }
            if let Some(oldest) = self.in_flight.pop_front() {
                self.prefetch();
                self.settle(oldest).await?;
                self.record_parked();
                self.advance();
                self.save_cursor_now_and_then().await?;
                if self.requests_checked_at.elapsed() >= REPLAY_REQUESTS_EVERY {
                    self.check_replay_requests().await?;
                }
                continue;
            }
            let Some(round) = nothing_to_send.filter(|_| !stopping) else {
                break;
            };
            self.save_cursor().await?;
            self.record_parked();
            if self.check_replay_requests().await? > 0 {
                continue;
            }
            if self.buffer.is_empty() && !self.set_aside.replay_pending() {
                if mode == RunMode::Drain {
                    break;
                }
                self.idle(None, &mut shutdown).await;
            } else {
                self.idle(round.next_retry, &mut shutdown).await;
            }
        }
        self.save_cursor().await?;
        self.summary.blocked = self.set_aside.parked();
        Ok(self.summary)
    }

    /// Sets the destination's parked-accounts gauges: retrying after a transient
    /// failure, and parked behind a dead letter.
    fn record_parked(&self) {
        let now = Instant::now();
        let retrying = self.parked.values().filter(|p| p.until > now).count();
        metrics::fanout_parked(
            self.publisher.name(),
            retrying,
            self.set_aside.parked().len(),
        );
    }

    /// Acts on the operators' replay requests; returns how many accounts they released.
    async fn check_replay_requests(&mut self) -> Result<usize> {
        self.requests_checked_at = Instant::now();
        self.set_aside
            .poll_requests(&self.store, &self.config.store_retry)
            .await
    }

    /// Reads windows after the cursor and picks what may be sent now: replays of
    /// released accounts first, then the buffer. Messages of dead-lettered accounts
    /// are recorded behind their refusal (or passed when already recorded).
    async fn select(&mut self) -> Result<Round> {
        let now = Instant::now();
        let per_account = if self.publisher.capabilities().ordered_pipeline {
            self.config.max_per_account.max(1)
        } else {
            1
        };
        let batch = self.round_size();
        // Room for every round in flight plus the look-ahead past parked accounts.
        let bound = batch * self.config.look_ahead.max(self.config.rounds_in_flight + 1);
        let mut round = Round {
            send: Vec::new(),
            next_retry: None,
            progressed: false,
        };
        let oldest_in_flight = self.in_flight.front().map(|r| r.id);
        // A taint lasts while rounds sent before it are still in flight.
        self.tainted
            .retain(|_, until| oldest_in_flight.is_some_and(|id| id < *until));
        let mut held: HashSet<Account> = self.tainted.keys().cloned().collect();
        self.select_replays(now, per_account, batch, &held, &mut round)
            .await?;
        let mut taken: HashMap<Account, usize> = HashMap::new();
        let mut passed = Vec::new();
        let mut to_set_aside = Vec::new();
        // After a short read, look again only once the rounds in flight have settled
        // (or the loop idled): re-reading an empty tail per round costs a store trip.
        let mut store_exhausted = !self.last_read_full && !self.in_flight.is_empty();
        // Skipping the prefix changes nothing: its entries are in flight (an in-flight
        // entry matters only for a set-aside account) or confirmed.
        let mut index = if self.set_aside.is_empty() {
            self.settled_prefix.min(self.buffer.len())
        } else {
            0
        };
        // Where the prefix ends so far: it grows only while every entry is skipped or sent.
        let mut prefix_end = index;
        loop {
            if index == self.buffer.len() {
                // Read on only while the round has room and the buffer its bound.
                if store_exhausted || round.send.len() >= batch || self.buffer.len() >= bound {
                    break;
                }
                let prefetched = match self.prefetch.take() {
                    Some(task) => task.await.ok().and_then(|read| read.ok()),
                    None => None,
                };
                // A failed or lost prefetch is read again, with the usual retries.
                let window = match prefetched {
                    Some(window) => window,
                    None => self.read_window(self.read_through).await?,
                };
                store_exhausted = window.len() < batch;
                self.last_read_full = !store_exhausted;
                let Some(last) = window.last() else { break };
                self.read_through = last.position;
                self.buffer.extend(window);
            }
            let stored = &self.buffer[index];
            let entry = index;
            index += 1;
            let account = &stored.message.account;
            if self.confirmed.contains(&stored.position) {
                if prefix_end == entry {
                    prefix_end = index;
                }
                continue;
            }
            let disposition = self.set_aside.disposition(account, stored.position);
            if self.in_flight_positions.contains(&stored.position) {
                if disposition == Disposition::SetAside {
                    // Recorded in order only: nothing later of it before this settles.
                    held.insert(account.clone());
                }
                if prefix_end == entry {
                    prefix_end = index;
                }
                continue;
            }
            match disposition {
                Disposition::Recorded => {
                    passed.push(stored.position);
                    continue;
                }
                Disposition::SetAside => {
                    if !held.contains(account) {
                        to_set_aside.push(stored.clone());
                    }
                    continue;
                }
                Disposition::Send => {}
            }
            if let Some(park) = self.parked.get(account).filter(|p| p.until > now) {
                round.next_retry = Some(round.next_retry.map_or(park.until, |t| t.min(park.until)));
                held.insert(account.clone());
                continue;
            }
            if held.contains(account) || round.send.len() >= batch {
                held.insert(account.clone());
                continue;
            }
            let count = taken.entry(account.clone()).or_default();
            if *count >= per_account {
                held.insert(account.clone());
                continue;
            }
            *count += 1;
            round.send.push(Outgoing {
                stored: stored.clone(),
                replay: false,
            });
            // In flight once the round is launched (a round with messages always is).
            if prefix_end == entry {
                prefix_end = index;
            }
        }
        self.settled_prefix = prefix_end;
        round.progressed = !passed.is_empty() || !to_set_aside.is_empty();
        self.confirmed.extend(passed);
        self.record_set_aside(to_set_aside).await?;
        if round.progressed {
            self.advance();
        }
        Ok(round)
    }

    /// Adds the next recorded messages of released accounts to the round.
    async fn select_replays(
        &mut self,
        now: Instant,
        per_account: usize,
        batch: usize,
        held: &HashSet<Account>,
        round: &mut Round,
    ) -> Result<()> {
        for account in self.set_aside.replay_ready() {
            if round.send.len() >= batch {
                break;
            }
            if held.contains(&account) {
                continue;
            }
            if let Some(park) = self.parked.get(&account).filter(|p| p.until > now) {
                round.next_retry = Some(round.next_retry.map_or(park.until, |t| t.min(park.until)));
                continue;
            }
            let limit = per_account.min(batch - round.send.len());
            let replays = self
                .set_aside
                .take_replay(
                    &self.store,
                    &self.config.store_retry,
                    &account,
                    limit,
                    batch,
                )
                .await?;
            round
                .send
                .extend(replays.into_iter().map(|stored| Outgoing {
                    stored,
                    replay: true,
                }));
        }
        Ok(())
    }

    /// Records messages of dead-lettered accounts behind their refusal, durably,
    /// before the cursor may pass them.
    async fn record_set_aside(&mut self, messages: Vec<StoredMessage>) -> Result<()> {
        if messages.is_empty() {
            return Ok(());
        }
        let letters: Vec<NewDeadLetter> = messages
            .iter()
            .map(|stored| {
                let error = self.set_aside.behind(&stored.message.account);
                self.dead_letter(stored, DeadLetterReason::SetAside, error)
            })
            .collect();
        let store = &self.store;
        self.config
            .store_retry
            .run("append_dead_letters", || {
                store.append_dead_letters(&letters)
            })
            .await?;
        for stored in &messages {
            self.set_aside
                .recorded(&stored.message.account, stored.position);
            self.confirmed.insert(stored.position);
            tracing::debug!(
                publisher = self.publisher.name(), account = %stored.message.account.as_str(),
                sequence = stored.message.sequence, "message set aside behind a dead letter"
            );
        }
        self.summary.set_aside += messages.len() as u64;
        Ok(())
    }

    fn dead_letter(
        &self,
        stored: &StoredMessage,
        reason: DeadLetterReason,
        error: String,
    ) -> NewDeadLetter {
        NewDeadLetter {
            destination: self.publisher.name().to_owned(),
            position: stored.position,
            account: stored.message.account.clone(),
            sequence: stored.message.sequence,
            instruction_id: stored.message.instruction_id.clone(),
            reason,
            error,
        }
    }

    /// Messages per window and per round: an order-keeping publisher takes bigger
    /// rounds (a Kafka producer batches per partition; with idempotence it has at
    /// most 5 requests in flight per broker, so small rounds starve it).
    fn round_size(&self) -> usize {
        let size = if self.publisher.capabilities().ordered_pipeline {
            self.config.pipelined_batch_size
        } else {
            self.config.batch_size
        };
        size.max(1)
    }

    /// Starts reading the next window while the oldest round settles, so the
    /// store read is not on the critical path of a streaming loop. Only after a
    /// full read (a drained store is not polled in the background).
    fn prefetch(&mut self) {
        let bound =
            self.round_size() * self.config.look_ahead.max(self.config.rounds_in_flight + 1);
        if self.prefetch.is_some() || !self.last_read_full || self.buffer.len() >= bound {
            return;
        }
        let store = Arc::clone(&self.store);
        let (after, limit) = (self.read_through, self.round_size());
        self.prefetch = Some(tokio::spawn(
            async move { store.read_after(after, limit).await },
        ));
    }

    async fn read_window(&self, after: u64) -> Result<Vec<StoredMessage>> {
        let (store, limit) = (&self.store, self.round_size());
        self.config
            .store_retry
            .run("read_after", || store.read_after(after, limit))
            .await
    }

    /// Publishes a round in the background.
    fn launch(&mut self, send: Vec<Outgoing>) {
        let messages: Vec<_> = send.iter().map(|o| o.stored.message.clone()).collect();
        self.in_flight_positions
            .extend(send.iter().filter(|o| !o.replay).map(|o| o.stored.position));
        let publisher = Arc::clone(&self.publisher);
        // One span per message, in its event's trace, open until the round is confirmed.
        let spans: Vec<_> = messages
            .iter()
            .map(|m| crate::trace::fanout_publish_span(m, publisher.name()))
            .collect();
        let task = tokio::spawn(async move {
            let results = publisher.publish(&messages).await;
            drop(spans);
            results
        });
        self.in_flight.push_back(InFlight {
            id: self.next_round,
            send,
            task,
        });
        self.next_round += 1;
    }

    /// Takes a round's confirmations: confirmed positions, parked accounts, dead
    /// letters for permanent refusals.
    async fn settle(&mut self, round: InFlight) -> Result<()> {
        let results = round.task.await.unwrap_or_else(|e| {
            let error = Error::new(
                crate::ErrorKind::Internal,
                format!("the publisher task failed: {e}"),
            )
            .transient(None);
            vec![Err(error); round.send.len()]
        });
        let now = Instant::now();
        let mut failed: HashSet<Account> = HashSet::new();
        let mut refused: Vec<(StoredMessage, Error, bool)> = Vec::new();
        let mut replayed: HashSet<Account> = HashSet::new();
        let mut confirmed_now = 0;
        for (index, outgoing) in round.send.iter().enumerate() {
            let stored = &outgoing.stored;
            let account = &stored.message.account;
            if outgoing.replay {
                replayed.insert(account.clone());
            } else {
                self.in_flight_positions.remove(&stored.position);
            }
            let untrusted = self
                .tainted
                .get(account)
                .is_some_and(|until| round.id < *until);
            if failed.contains(account) || untrusted {
                // An earlier message of this account failed: this one goes again after it.
                continue;
            }
            let result = results.get(index).cloned().unwrap_or_else(|| {
                Err(Error::new(
                    crate::ErrorKind::Internal,
                    "publisher returned fewer results than messages",
                ))
            });
            match result {
                Ok(()) => {
                    self.summary.published += 1;
                    metrics::fanout_published(self.publisher.name(), 1);
                    self.parked.remove(account);
                    if outgoing.replay {
                        self.summary.replayed += 1;
                        self.set_aside.replay_confirmed(account, stored.position);
                    } else {
                        self.confirmed.insert(stored.position);
                        confirmed_now += 1;
                    }
                }
                Err(error) => {
                    failed.insert(account.clone());
                    self.tainted.insert(account.clone(), self.next_round);
                    if outgoing.replay {
                        self.set_aside.replay_failed(account);
                    }
                    if error.is_transient() {
                        self.park(stored, &error, now);
                    } else {
                        refused.push((stored.clone(), error, outgoing.replay));
                    }
                }
            }
        }
        let sent_from_buffer = round.send.iter().filter(|o| !o.replay).count();
        if confirmed_now < sent_from_buffer {
            // A message is out of flight unconfirmed: select must see it again.
            self.settled_prefix = 0;
        }
        for account in &replayed {
            self.set_aside.replay_settled(account);
        }
        self.refuse(refused).await?;
        if !replayed.is_empty() {
            self.set_aside
                .save_progress(&self.store, &self.config.store_retry)
                .await?;
        }
        Ok(())
    }

    /// Transient failure: the account waits with backoff and retries.
    fn park(&mut self, stored: &StoredMessage, error: &Error, now: Instant) {
        let message = &stored.message;
        let failures = self.parked.get(&message.account).map_or(0, |p| p.failures) + 1;
        let after = match error.retry() {
            Retry::Transient { after } => after,
            Retry::Permanent | Retry::Exhausted => None,
        };
        self.summary.retried += 1;
        tracing::warn!(
            publisher = self.publisher.name(), account = %message.account.as_str(),
            sequence = message.sequence, failures, error = %error,
            "publish failed; the account waits and retries"
        );
        self.parked.insert(
            message.account.clone(),
            Park {
                until: now + self.config.backoff.delay(failures, after),
                failures,
            },
        );
    }

    /// Permanent refusals: each message becomes a dead letter (durably, before the
    /// cursor may pass it) and parks its account; the account's later messages are
    /// set aside behind it as the loop meets them.
    async fn refuse(&mut self, refused: Vec<(StoredMessage, Error, bool)>) -> Result<()> {
        if refused.is_empty() {
            return Ok(());
        }
        let letters: Vec<NewDeadLetter> = refused
            .iter()
            .map(|(stored, error, _)| {
                self.dead_letter(stored, DeadLetterReason::Refused, error.to_string())
            })
            .collect();
        let store = &self.store;
        let ids = self
            .config
            .store_retry
            .run("append_dead_letters", || {
                store.append_dead_letters(&letters)
            })
            .await?;
        for ((stored, error, replay), id) in refused.iter().zip(ids) {
            let message = &stored.message;
            self.summary.permanent_failures += 1;
            metrics::fanout_dead_lettered(self.publisher.name(), 1);
            tracing::error!(
                publisher = self.publisher.name(), account = %message.account.as_str(),
                sequence = message.sequence, instruction_id = %message.instruction_id,
                position = stored.position, dead_letter = id, replay, error = %error,
                "publish refused permanently: dead-lettered; the account's later messages are set aside until `outbox fanout replay`"
            );
            self.parked.remove(&message.account);
            self.set_aside
                .refused(&message.account, message.sequence, stored.position, id);
            if !replay {
                self.confirmed.insert(stored.position);
            }
        }
        Ok(())
    }

    /// Moves the cursor over the contiguous confirmed prefix of the buffer.
    fn advance(&mut self) {
        while let Some(front) = self.buffer.front() {
            if !self.confirmed.remove(&front.position) {
                break;
            }
            self.cursor = front.position;
            self.buffer.pop_front();
            self.settled_prefix = self.settled_prefix.saturating_sub(1);
        }
    }

    async fn save_cursor(&mut self) -> Result<()> {
        if self.cursor == self.saved_cursor {
            return Ok(());
        }
        let (store, name, cursor) = (&self.store, self.publisher.name(), self.cursor);
        self.config
            .store_retry
            .run("save_cursor", || store.save_cursor(name, cursor))
            .await?;
        self.saved_cursor = self.cursor;
        self.cursor_saved_at = Instant::now();
        Ok(())
    }

    /// While rounds stream, the cursor is written at most every `CURSOR_SAVE_EVERY`
    /// (a durable write per round would sit on the critical path); it is always
    /// written when the loop idles or stops. A crash re-sends what the saved cursor
    /// had not passed: at least once, as always.
    async fn save_cursor_now_and_then(&mut self) -> Result<()> {
        if self.cursor_saved_at.elapsed() >= CURSOR_SAVE_EVERY {
            self.save_cursor().await?;
        }
        Ok(())
    }

    async fn idle(&self, until: Option<Instant>, shutdown: &mut watch::Receiver<bool>) {
        let wait = until.map_or(self.config.poll_interval, |t| {
            t.saturating_duration_since(Instant::now())
                .min(self.config.poll_interval)
        });
        let wakeup = async {
            match &self.wakeup {
                Some(w) => w.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = wakeup => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Holds a destination's `outbox_fanout_loop_alive` at 1 while its loop runs.
struct LoopAlive(String);

impl LoopAlive {
    fn new(destination: &str) -> Self {
        metrics::set_fanout_loop_alive(destination, true);
        Self(destination.to_owned())
    }
}

impl Drop for LoopAlive {
    fn drop(&mut self) {
        metrics::set_fanout_loop_alive(&self.0, false);
    }
}
