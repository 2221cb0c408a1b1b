//! `FanoutLoop`: publishes the fan-out store to one transport, in per-account order, at
//! least once, keeping that transport's cursor.
//!
//! Each round reads the messages after the cursor and sends, per account, the head
//! (or, when the publisher pipelines in order, a run of up to `max_per_account`). An
//! account whose message failed is parked (transient: backoff; permanent: a long
//! retry and a loud log) and none of its later messages go out before that one is
//! confirmed: a failing account never reorders, never blocks its neighbours and is
//! never skipped. Other accounts' confirmations past a parked message are kept in
//! memory; the durable cursor moves only over a contiguous confirmed prefix, so a
//! crash re-sends at most what was past it (consumers dedupe on the instruction id).
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

use super::{FanoutConfig, FanoutStore, FanoutSummary, Publisher, StoredMessage};
use crate::dispatch::{Backoff, RunMode};
use crate::domain::Account;
use crate::error::{Error, Result, Retry};
use crate::relay::Wakeup;

/// How often a streaming loop writes its cursor.
const CURSOR_SAVE_EVERY: Duration = Duration::from_millis(200);

/// Why an account is not sent to until `until`.
#[derive(Debug, Clone, Copy)]
struct Park {
    until: Instant,
    failures: u32,
    permanent: bool,
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
    /// The highest position read into the buffer.
    read_through: u64,
    /// The next window, being read while the oldest round settles.
    prefetch: Option<JoinHandle<Result<Vec<StoredMessage>>>>,
    /// Whether the last read filled its window (more is likely waiting).
    last_read_full: bool,
    cursor_saved_at: Instant,
    summary: FanoutSummary,
}

/// One published round awaiting its confirmations.
struct InFlight {
    id: u64,
    send: Vec<StoredMessage>,
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
    send: Vec<StoredMessage>,
    /// When the earliest parked account may be retried (nothing sendable before).
    next_retry: Option<Instant>,
    /// Messages read that wait only behind permanently blocked accounts.
    blocked_only: bool,
}

impl FanoutLoop {
    /// Resumes after the publisher's saved cursor.
    pub async fn open(
        store: Arc<dyn FanoutStore>,
        publisher: Arc<dyn Publisher>,
        config: FanoutConfig,
    ) -> Result<Self> {
        let cursor = store.load_cursor(publisher.name()).await?;
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
            read_through: cursor,
            prefetch: None,
            last_read_full: false,
            cursor_saved_at: Instant::now(),
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
    /// confirmed or waits behind a permanently blocked account (`Drain`). A shutdown
    /// lets the round in flight finish and saves the cursor.
    ///
    /// # Errors
    /// A permanent store error (the cursor cannot be kept); transport errors never end
    /// the run, they park their account.
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
        loop {
            let stopping = *shutdown.borrow();
            let mut nothing_to_send = None;
            while !stopping && self.in_flight.len() < depth {
                let round = self.select().await?;
                if round.send.is_empty() {
                    nothing_to_send = Some(round);
                    break;
                }
                self.launch(round.send);
            }
            if let Some(oldest) = self.in_flight.pop_front() {
                self.prefetch();
                self.settle(oldest).await;
                self.advance();
                self.save_cursor_now_and_then().await?;
                continue;
            }
            let Some(round) = nothing_to_send.filter(|_| !stopping) else {
                break;
            };
            self.save_cursor().await?;
            if self.buffer.is_empty() || round.blocked_only {
                if mode == RunMode::Drain {
                    break;
                }
                self.idle(None, &mut shutdown).await;
            } else {
                self.idle(round.next_retry, &mut shutdown).await;
            }
        }
        self.save_cursor().await?;
        self.summary.blocked = self.blocked_accounts();
        Ok(self.summary)
    }

    /// Reads windows after the cursor and picks what may be sent now.
    async fn select(&mut self) -> Result<Round> {
        let now = Instant::now();
        let per_account = if self.publisher.capabilities().ordered_pipeline {
            self.config.max_per_account.max(1)
        } else {
            1
        };
        let batch = self.round_size();
        // Room for every round in flight plus the look-ahead past blocked accounts.
        let bound = batch * self.config.look_ahead.max(self.config.rounds_in_flight + 1);
        let mut round = Round {
            send: Vec::new(),
            next_retry: None,
            blocked_only: true,
        };
        let oldest_in_flight = self.in_flight.front().map(|r| r.id);
        // A taint lasts while rounds sent before it are still in flight.
        self.tainted
            .retain(|_, until| oldest_in_flight.is_some_and(|id| id < *until));
        let mut held: HashSet<Account> = self.tainted.keys().cloned().collect();
        let mut taken: HashMap<Account, usize> = HashMap::new();
        // After a short read, look again only once the rounds in flight have settled
        // (or the loop idled): re-reading an empty tail per round costs a store trip.
        let mut store_exhausted = !self.last_read_full && !self.in_flight.is_empty();
        let mut index = 0;
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
            index += 1;
            if self.confirmed.contains(&stored.position)
                || self.in_flight_positions.contains(&stored.position)
            {
                continue;
            }
            let account = &stored.message.account;
            if let Some(park) = self.parked.get(account).filter(|p| p.until > now) {
                round.next_retry = Some(round.next_retry.map_or(park.until, |t| t.min(park.until)));
                round.blocked_only &= park.permanent;
                held.insert(account.clone());
                continue;
            }
            round.blocked_only = false;
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
            round.send.push(stored.clone());
        }
        Ok(round)
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
        let backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(5),
        };
        let mut failures = 0;
        loop {
            match self.store.read_after(after, self.round_size()).await {
                Err(e) if e.is_transient() && failures < 20 => {
                    failures += 1;
                    tracing::warn!(error = %e, "fan-out store read failed; retrying");
                    tokio::time::sleep(backoff.delay(failures, None)).await;
                }
                other => return other,
            }
        }
    }

    /// Publishes a round in the background.
    fn launch(&mut self, send: Vec<StoredMessage>) {
        let messages: Vec<_> = send.iter().map(|s| s.message.clone()).collect();
        self.in_flight_positions
            .extend(send.iter().map(|s| s.position));
        let publisher = Arc::clone(&self.publisher);
        let task = tokio::spawn(async move { publisher.publish(&messages).await });
        self.in_flight.push_back(InFlight {
            id: self.next_round,
            send,
            task,
        });
        self.next_round += 1;
    }

    /// Takes a round's confirmations: confirmed positions, parked accounts.
    async fn settle(&mut self, round: InFlight) {
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
        for (index, stored) in round.send.iter().enumerate() {
            self.in_flight_positions.remove(&stored.position);
            let account = &stored.message.account;
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
                    self.confirmed.insert(stored.position);
                    self.summary.published += 1;
                    self.parked.remove(account);
                }
                Err(error) => {
                    failed.insert(account.clone());
                    self.tainted.insert(account.clone(), self.next_round);
                    self.park(stored, &error, now);
                }
            }
        }
    }

    fn park(&mut self, stored: &StoredMessage, error: &Error, now: Instant) {
        let message = &stored.message;
        let failures = self.parked.get(&message.account).map_or(0, |p| p.failures) + 1;
        let (delay, permanent) = match error.retry() {
            Retry::Transient { after } => {
                self.summary.retried += 1;
                tracing::warn!(
                    publisher = self.publisher.name(), account = %message.account.as_str(),
                    sequence = message.sequence, failures, error = %error,
                    "publish failed; the account waits and retries"
                );
                (self.config.backoff.delay(failures, after), false)
            }
            Retry::Permanent | Retry::Exhausted => {
                self.summary.permanent_failures += 1;
                tracing::error!(
                    publisher = self.publisher.name(), account = %message.account.as_str(),
                    sequence = message.sequence, instruction_id = %message.instruction_id,
                    error = %error,
                    "publish refused permanently; the account is blocked until this succeeds"
                );
                (self.config.permanent_retry, true)
            }
        };
        self.parked.insert(
            message.account.clone(),
            Park {
                until: now + delay,
                failures,
                permanent,
            },
        );
    }

    /// Moves the cursor over the contiguous confirmed prefix of the buffer.
    fn advance(&mut self) {
        while let Some(front) = self.buffer.front() {
            if !self.confirmed.remove(&front.position) {
                break;
            }
            self.cursor = front.position;
            self.buffer.pop_front();
        }
    }

    async fn save_cursor(&mut self) -> Result<()> {
        if self.cursor == self.saved_cursor {
            return Ok(());
        }
        self.store
            .save_cursor(self.publisher.name(), self.cursor)
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

    fn blocked_accounts(&self) -> Vec<Account> {
        let mut blocked: Vec<_> = self
            .parked
            .iter()
            .filter(|(_, p)| p.permanent)
            .map(|(a, _)| a.clone())
            .collect();
        blocked.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        blocked
    }
}
