//! Property: for any schedule of confirmations, transient failures, lost
//! confirmations and permanent refusals from the publisher (and brief store outages),
//! with the fan-out process crashing at any store call and restarting, the saved
//! cursor never passes a message that is neither confirmed nor dead-lettered, per
//! account nothing reaches the wire before everything ahead of it did, and the last
//! run drains with every message confirmed or dead-lettered.
//!
//! `PROPTEST_CASES=5000 cargo test -p outbox-core --lib fanout::tests::properties` runs it longer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use proptest::prelude::*;

use super::*;
use crate::testing::proptest_config;

const DESTINATION: &str = "scheduled";

/// What the destination does with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Confirm,
    /// Not delivered; a transient error (broker down, Nack).
    Unavailable,
    /// Delivered, but the confirmation was lost: a transient error.
    ConfirmationLost,
    /// Not delivered; a permanent refusal (unroutable, 4xx).
    Refused,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => Just(Fate::Confirm),
        2 => Just(Fate::Unavailable),
        1 => Just(Fate::ConfirmationLost),
        1 => Just(Fate::Refused),
    ]
}

/// A publisher that keeps the `Publisher` contract and follows a schedule: once a
/// message of an account fails, none of that account's later messages is delivered
/// until the failed one is sent again (what an order-keeping pipeline guarantees).
struct ScheduledPublisher {
    pipeline: bool,
    fates: Mutex<VecDeque<Fate>>,
    /// Account → the sequence of its last failed message, while it is not re-sent.
    failed: Mutex<HashMap<Account, u64>>,
    /// Everything that reached the destination, in order (duplicates included).
    wire: Mutex<Vec<(Account, u64)>>,
    /// Everything reported `Ok`.
    confirmed: Mutex<HashSet<(Account, u64)>>,
}

impl ScheduledPublisher {
    fn deliver(&self, message: &FanoutMessage) -> Result<()> {
        let key = (message.account.clone(), message.sequence);
        let mut failed = self.failed.lock().unwrap();
        if failed
            .get(&message.account)
            .is_some_and(|s| message.sequence > *s)
        {
            return Err(Error::new(ErrorKind::Transport, "behind a failed message").transient(None));
        }
        failed.remove(&message.account);
        let fate = self
            .fates
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fate::Confirm);
        if matches!(fate, Fate::Confirm | Fate::ConfirmationLost) {
            self.wire.lock().unwrap().push(key.clone());
        }
        let answer = match fate {
            Fate::Confirm => {
                self.confirmed.lock().unwrap().insert(key);
                return Ok(());
            }
            Fate::Unavailable => {
                Error::new(ErrorKind::Transport, "broker unavailable").transient(None)
            }
            Fate::ConfirmationLost => {
                Error::new(ErrorKind::Transport, "confirmation timed out").transient(None)
            }
            Fate::Refused => Error::new(ErrorKind::Transport, "unroutable"),
        };
        failed.insert(message.account.clone(), message.sequence);
        Err(answer)
    }
}

#[async_trait]
impl Publisher for ScheduledPublisher {
    fn name(&self) -> &str {
        DESTINATION
    }

    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::new(self.pipeline)
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        messages.iter().map(|m| self.deliver(m)).collect()
    }
}

/// The publisher as one fan-out process sees it: once the process is dead, a round
/// it had launched delivers nothing (it died with the process).
struct ProcessPublisher {
    shared: Arc<ScheduledPublisher>,
    dead: Arc<AtomicBool>,
}

#[async_trait]
impl Publisher for ProcessPublisher {
    fn name(&self) -> &str {
        self.shared.name()
    }

    fn capabilities(&self) -> PublisherCapabilities {
        self.shared.capabilities()
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        if self.dead.load(Ordering::SeqCst) {
            let crashed = Error::new(ErrorKind::Transport, "the fan-out process crashed");
            return vec![Err(crashed); messages.len()];
        }
        self.shared.publish(messages).await
    }
}

/// The memory store as one fan-out process sees it: every save of the destination's
/// cursor is checked against what the publisher confirmed and what is dead-lettered
/// at that moment, and the process dies at its `crash_at`-th store call (that call
/// and every later one fail for good, so the run ends with the error).
struct WatchedStore {
    inner: Arc<MemoryFanoutStore>,
    publisher: Arc<ScheduledPublisher>,
    violations: Arc<Mutex<Vec<String>>>,
    crash_at: Option<usize>,
    calls: AtomicUsize,
    dead: Arc<AtomicBool>,
}

impl WatchedStore {
    fn call(&self) -> Result<()> {
        let count = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.crash_at.is_some_and(|at| count >= at) {
            self.dead.store(true, Ordering::SeqCst);
        }
        if self.dead.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::Storage,
                "the fan-out process crashed",
            ));
        }
        Ok(())
    }

    fn check(&self, cursor: u64) {
        let confirmed = self.publisher.confirmed.lock().unwrap();
        let letters: HashSet<u64> = self
            .inner
            .dead_letters
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.destination == DESTINATION)
            .map(|l| l.position)
            .collect();
        for stored in self.inner.messages.lock().unwrap().iter() {
            let key = (stored.message.account.clone(), stored.message.sequence);
            if stored.position <= cursor
                && !confirmed.contains(&key)
                && !letters.contains(&stored.position)
            {
                self.violations.lock().unwrap().push(format!(
                    "cursor {cursor} saved past {} {} (position {}), neither confirmed nor dead-lettered",
                    key.0, key.1, stored.position
                ));
            }
        }
    }
}

#[async_trait]
impl FanoutStore for WatchedStore {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        self.inner.append(delivery_id, messages).await
    }
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        self.call()?;
        self.inner.read_after(after, limit).await
    }
    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        self.call()?;
        self.inner.load_cursor(transport).await
    }
    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        self.call()?;
        if transport == DESTINATION {
            self.check(position);
        }
        self.inner.save_cursor(transport, position).await
    }
    async fn append_dead_letters(&self, letters: &[NewDeadLetter]) -> Result<Vec<u64>> {
        self.call()?;
        self.inner.append_dead_letters(letters).await
    }
    async fn read_dead_letters(&self, query: &DeadLetterQuery<'_>) -> Result<Vec<DeadLetter>> {
        self.call()?;
        self.inner.read_dead_letters(query).await
    }
    async fn read_set_aside(
        &self,
        destination: &str,
        account: &Account,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        self.call()?;
        self.inner
            .read_set_aside(destination, account, after, limit)
            .await
    }
    async fn request_replay(&self, destination: &str, account: &Account) -> Result<ReplayRequest> {
        self.inner.request_replay(destination, account).await
    }
    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> Result<Vec<ReplayRequest>> {
        self.call()?;
        self.inner.read_replay_requests(destination, after).await
    }
}

#[derive(Debug, Clone)]
struct Scenario {
    /// The stored stream: accounts in arrival order (sequences follow per account).
    stream: Vec<usize>,
    fates: Vec<Fate>,
    /// Transient failures of the store's reads, cursor saves and dead-letter appends.
    store_outages: (usize, usize, usize),
    /// Each run but the last crashes at this store call (if it gets that far).
    crashes: Vec<usize>,
    pipeline: bool,
    config: FanoutConfig,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(0usize..4, 1..40),
        prop::collection::vec(fate(), 0..60),
        (0usize..3, 0usize..3, 0usize..3),
        prop::collection::vec(1usize..40, 0..=2),
        any::<bool>(),
        (1usize..=4, 1usize..=4, 1usize..=3, 1usize..=3),
    )
        .prop_map(
            |(
                stream,
                fates,
                store_outages,
                crashes,
                pipeline,
                (batch, look_ahead, per_account, rounds),
            )| {
                Scenario {
                    stream,
                    fates,
                    store_outages,
                    crashes,
                    pipeline,
                    config: FanoutConfig {
                        batch_size: batch,
                        pipelined_batch_size: batch,
                        look_ahead,
                        max_per_account: per_account,
                        rounds_in_flight: rounds,
                        ..quick()
                    },
                }
            },
        )
}

async fn run(scenario: &Scenario) -> std::result::Result<(), TestCaseError> {
    let mut next: HashMap<usize, u64> = HashMap::new();
    let names: Vec<(String, u64)> = scenario
        .stream
        .iter()
        .map(|a| {
            let sequence = next.entry(*a).or_default();
            *sequence += 1;
            (format!("merchants:{a}"), *sequence)
        })
        .collect();
    let pairs: Vec<(&str, u64)> = names.iter().map(|(a, s)| (a.as_str(), *s)).collect();
    let inner = MemoryFanoutStore::with(&pairs);
    let publisher = Arc::new(ScheduledPublisher {
        pipeline: scenario.pipeline,
        fates: Mutex::new(scenario.fates.iter().copied().collect()),
        failed: Mutex::default(),
        wire: Mutex::default(),
        confirmed: Mutex::default(),
    });
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (reads, saves, letters) = scenario.store_outages;
    inner.fail("read_after", reads);
    inner.fail("save_cursor", saves);
    inner.fail("append_dead_letters", letters);
    let runs = scenario.crashes.iter().map(|at| Some(*at)).chain([None]);
    for crash_at in runs {
        let dead = Arc::new(AtomicBool::new(false));
        let process = Arc::new(ProcessPublisher {
            shared: Arc::clone(&publisher),
            dead: Arc::clone(&dead),
        });
        let store = Arc::new(WatchedStore {
            inner: Arc::clone(&inner),
            publisher: Arc::clone(&publisher),
            violations: Arc::clone(&violations),
            crash_at,
            calls: AtomicUsize::new(0),
            dead,
        });
        // A new process: a new producer, with no failure remembered.
        publisher.failed.lock().unwrap().clear();
        let (_stop, shutdown) = watch::channel(false);
        let ended = async {
            let fanout = FanoutLoop::open(store.clone(), process, scenario.config.clone()).await?;
            fanout.run(RunMode::Drain, shutdown).await
        };
        let ended = tokio::time::timeout(Duration::from_secs(10), ended)
            .await
            .map_err(|_| TestCaseError::fail("the drain did not end"))?;
        if crash_at.is_none() {
            ended.map_err(|e| TestCaseError::fail(format!("final run: {e}")))?;
        }
    }

    let violations = violations.lock().unwrap().clone();
    prop_assert!(violations.is_empty(), "{:?}", violations);

    // Per account, each delivery comes after a delivery of everything ahead of it.
    let wire = publisher.wire.lock().unwrap().clone();
    let mut delivered: HashMap<&Account, u64> = HashMap::new();
    for (account, sequence) in &wire {
        let through = delivered.entry(account).or_default();
        prop_assert!(
            *sequence <= *through + 1,
            "{} {} delivered before {}: {:?}",
            account,
            sequence,
            *through + 1,
            wire
        );
        *through = (*through).max(*sequence);
    }

    // The end of a drain: each account delivered up to its refusal, if any; the
    // refused message and everything after it dead-lettered, in order; the cursor at
    // the end.
    let confirmed = publisher.confirmed.lock().unwrap().clone();
    let dead: Vec<(Account, u64, DeadLetterReason)> = inner
        .dead_letters
        .lock()
        .unwrap()
        .iter()
        .map(|l| (l.account.clone(), l.sequence, l.reason))
        .collect();
    for (account, count) in &next {
        let account = Account::parse(&format!("merchants:{account}")).unwrap();
        let mine: Vec<(u64, DeadLetterReason)> = dead
            .iter()
            .filter(|(a, _, _)| *a == account)
            .map(|(_, s, r)| (*s, *r))
            .collect();
        let refused_at = mine.first().map_or(count + 1, |(s, _)| *s);
        for sequence in 1..refused_at {
            prop_assert!(
                confirmed.contains(&(account.clone(), sequence)),
                "{} {} never confirmed",
                account,
                sequence
            );
        }
        let expected: Vec<(u64, DeadLetterReason)> = (refused_at..=*count)
            .map(|s| {
                let reason = if s == refused_at {
                    DeadLetterReason::Refused
                } else {
                    DeadLetterReason::SetAside
                };
                (s, reason)
            })
            .collect();
        prop_assert_eq!(mine, expected, "dead letters of {}", account);
    }
    let last = inner.messages.lock().unwrap().last().map(|m| m.position);
    prop_assert_eq!(Some(inner.cursor(DESTINATION)), last);
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn the_cursor_passes_only_confirmed_or_dead_lettered_messages_and_order_holds(
        scenario in scenario()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(run(&scenario))?;
    }
}
