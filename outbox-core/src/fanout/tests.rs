//! Fan-out loop behaviour against in-memory fakes (the real stores and transports
//! pass the testkit suites).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use tokio::sync::watch;

use super::*;
use crate::dispatch::{Backoff, RunMode};
use crate::domain::Account;
use crate::error::{Error, ErrorKind, Result};
use crate::inbox::MessageKind;

#[derive(Default)]
struct MemoryFanoutStore {
    messages: Mutex<Vec<StoredMessage>>,
    cursors: Mutex<std::collections::HashMap<String, u64>>,
}

impl MemoryFanoutStore {
    fn with(messages: &[(&str, u64)]) -> Arc<Self> {
        let store = Self::default();
        for (i, (account, sequence)) in messages.iter().enumerate() {
            store.messages.lock().unwrap().push(StoredMessage {
                // Gaps in positions, as a Postgres identity may leave them.
                position: (i as u64 + 1) * 3,
                message: message(account, *sequence),
                received_at: Utc::now(),
            });
        }
        Arc::new(store)
    }

    fn cursor(&self, name: &str) -> u64 {
        self.cursors.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

#[async_trait]
impl FanoutStore for MemoryFanoutStore {
    async fn append(&self, _: &str, _: &[FanoutMessage]) -> Result<AppendOutcome> {
        unreachable!("the loop never appends")
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        let messages = self.messages.lock().unwrap();
        Ok(messages
            .iter()
            .filter(|m| m.position > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        Ok(self.cursor(transport))
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        let mut cursors = self.cursors.lock().unwrap();
        let cursor = cursors.entry(transport.to_owned()).or_default();
        *cursor = (*cursor).max(position);
        Ok(())
    }
}

fn message(account: &str, sequence: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: format!("{account}#{sequence}"),
        account: Account::parse(account).unwrap(),
        sequence,
        kind: MessageKind::Committed,
        ledger: "payouts".into(),
        ledger_tx_id: Some(sequence),
        traceparent: None,
        tracestate: None,
        payload: b"{}".to_vec(),
    }
}

/// Records every call; fails scripted (account, sequence) pairs a number of times.
struct ScriptedPublisher {
    pipeline: bool,
    calls: Mutex<Vec<Vec<(String, u64)>>>,
    confirmed: Mutex<Vec<(String, u64)>>,
    failures: Mutex<Vec<((String, u64), Error)>>,
}

impl ScriptedPublisher {
    fn new(pipeline: bool) -> Arc<Self> {
        Arc::new(Self {
            pipeline,
            calls: Mutex::default(),
            confirmed: Mutex::default(),
            failures: Mutex::default(),
        })
    }

    fn fail(&self, account: &str, sequence: u64, times: usize, error: Error) {
        for _ in 0..times {
            self.failures
                .lock()
                .unwrap()
                .push(((account.to_owned(), sequence), error.clone()));
        }
    }

    fn confirmed_of(&self, account: &str) -> Vec<u64> {
        let confirmed = self.confirmed.lock().unwrap();
        confirmed
            .iter()
            .filter(|(a, _)| a == account)
            .map(|(_, s)| *s)
            .collect()
    }
}

#[async_trait]
impl Publisher for ScriptedPublisher {
    fn name(&self) -> &str {
        "scripted"
    }

    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::new(self.pipeline)
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        let keys: Vec<_> = messages
            .iter()
            .map(|m| (m.account.as_str().to_owned(), m.sequence))
            .collect();
        self.calls.lock().unwrap().push(keys.clone());
        keys.into_iter()
            .map(|key| {
                let mut failures = self.failures.lock().unwrap();
                if let Some(i) = failures.iter().position(|(k, _)| *k == key) {
                    return Err(failures.remove(i).1);
                }
                self.confirmed.lock().unwrap().push(key);
                Ok(())
            })
            .collect()
    }
}

fn quick() -> FanoutConfig {
    FanoutConfig {
        batch_size: 4,
        pipelined_batch_size: 4,
        look_ahead: 10,
        max_per_account: 3,
        rounds_in_flight: 3,
        poll_interval: Duration::from_millis(5),
        backoff: Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(5),
        },
        permanent_retry: Duration::from_secs(3600),
    }
}

async fn drain(
    store: &Arc<MemoryFanoutStore>,
    publisher: &Arc<ScriptedPublisher>,
    config: FanoutConfig,
) -> FanoutSummary {
    let (_stop, shutdown) = watch::channel(false);
    let run = FanoutLoop::open(store.clone(), publisher.clone(), config)
        .await
        .unwrap()
        .run(RunMode::Drain, shutdown);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("drain ends by itself")
        .unwrap()
}

fn interleaved() -> Vec<(&'static str, u64)> {
    let mut messages = Vec::new();
    for sequence in 1..=5 {
        for account in ["merchants:1", "merchants:2", "merchants:3"] {
            messages.push((account, sequence));
        }
    }
    messages
}

#[tokio::test]
async fn publishes_everything_in_account_order_and_saves_the_cursor() {
    let store = MemoryFanoutStore::with(&interleaved());
    let publisher = ScriptedPublisher::new(false);
    let summary = drain(&store, &publisher, quick()).await;
    assert_eq!(summary.published, 15);
    for account in ["merchants:1", "merchants:2", "merchants:3"] {
        assert_eq!(publisher.confirmed_of(account), vec![1, 2, 3, 4, 5]);
    }
    assert_eq!(store.cursor("scripted"), 45, "the last position");
    for call in publisher.calls.lock().unwrap().iter() {
        let mut accounts: Vec<_> = call.iter().map(|(a, _)| a).collect();
        let n = accounts.len();
        accounts.dedup();
        accounts.sort();
        accounts.dedup();
        assert_eq!(
            accounts.len(),
            n,
            "one message per account per call: {call:?}"
        );
    }
}

#[tokio::test]
async fn an_ordered_pipeline_sends_runs_of_one_account() {
    let store = MemoryFanoutStore::with(&[
        ("merchants:1", 1),
        ("merchants:1", 2),
        ("merchants:1", 3),
        ("merchants:1", 4),
    ]);
    let publisher = ScriptedPublisher::new(true);
    drain(&store, &publisher, quick()).await;
    let calls = publisher.calls.lock().unwrap().clone();
    assert_eq!(calls[0].len(), 3, "max_per_account in one call: {calls:?}");
    assert_eq!(publisher.confirmed_of("merchants:1"), vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn a_transient_failure_retries_without_reordering_or_blocking_neighbours() {
    let store = MemoryFanoutStore::with(&interleaved());
    let publisher = ScriptedPublisher::new(false);
    let unavailable = Error::new(ErrorKind::Transport, "broker down").transient(None);
    publisher.fail("merchants:2", 2, 3, unavailable);
    let summary = drain(&store, &publisher, quick()).await;
    assert_eq!(summary.retried, 3);
    assert_eq!(publisher.confirmed_of("merchants:2"), vec![1, 2, 3, 4, 5]);
    assert_eq!(publisher.confirmed_of("merchants:1"), vec![1, 2, 3, 4, 5]);
    // merchants:1 and :3 finished while :2 was still failing: not blocked by it.
    let confirmed = publisher.confirmed.lock().unwrap().clone();
    let two_of_2 = confirmed
        .iter()
        .position(|k| *k == ("merchants:2".into(), 2))
        .unwrap();
    let five_of_1 = confirmed
        .iter()
        .position(|k| *k == ("merchants:1".into(), 5))
        .unwrap();
    assert!(five_of_1 < two_of_2, "neighbours went on: {confirmed:?}");
    assert_eq!(store.cursor("scripted"), 45);
}

#[tokio::test]
async fn messages_after_a_failure_in_the_same_call_are_sent_again_after_it() {
    // The pipeline sends 2:1..3 in one call; 2:1 fails, 2:2 and 2:3 "succeed": they
    // are not counted as confirmed and go again after 2:1, in order.
    let store =
        MemoryFanoutStore::with(&[("merchants:2", 1), ("merchants:2", 2), ("merchants:2", 3)]);
    let publisher = ScriptedPublisher::new(true);
    publisher.fail(
        "merchants:2",
        1,
        1,
        Error::new(ErrorKind::Transport, "nack").transient(None),
    );
    let summary = drain(&store, &publisher, quick()).await;
    assert_eq!(publisher.confirmed_of("merchants:2"), vec![2, 3, 1, 2, 3]);
    assert_eq!(summary.published, 3, "only confirmations in order count");
}

#[tokio::test]
async fn a_permanent_failure_blocks_its_account_only_and_holds_the_cursor() {
    let store = MemoryFanoutStore::with(&interleaved());
    let publisher = ScriptedPublisher::new(false);
    publisher.fail(
        "merchants:3",
        2,
        1,
        Error::new(ErrorKind::Transport, "unroutable"),
    );
    let summary = drain(&store, &publisher, quick()).await;
    assert_eq!(summary.permanent_failures, 1);
    assert_eq!(
        summary.blocked,
        vec![Account::parse("merchants:3").unwrap()]
    );
    assert_eq!(
        publisher.confirmed_of("merchants:3"),
        vec![1],
        "never skipped"
    );
    assert_eq!(publisher.confirmed_of("merchants:1"), vec![1, 2, 3, 4, 5]);
    // merchants:3's sequence 2 is the 6th message (position 18): the cursor stops before it.
    assert_eq!(store.cursor("scripted"), 15);

    // A new run (say, after the operator fixed the route) resumes from the cursor:
    // the blocked message goes first, nothing before it is sent again.
    let fixed = ScriptedPublisher::new(false);
    drain(&store, &fixed, quick()).await;
    assert_eq!(fixed.confirmed_of("merchants:3"), vec![2, 3, 4, 5]);
    assert_eq!(
        fixed.confirmed_of("merchants:1"),
        vec![3, 4, 5],
        "re-sent past the old cursor: at least once"
    );
    assert_eq!(store.cursor("scripted"), 45);
}

#[tokio::test]
async fn look_ahead_finds_other_accounts_behind_a_blocked_one() {
    let mut messages: Vec<_> = (1..=10).map(|s| ("merchants:1", s)).collect();
    messages.push(("merchants:2", 1));
    let store = MemoryFanoutStore::with(&messages);
    let publisher = ScriptedPublisher::new(false);
    publisher.fail(
        "merchants:1",
        1,
        1,
        Error::new(ErrorKind::Transport, "refused"),
    );
    let summary = drain(&store, &publisher, quick()).await;
    assert_eq!(publisher.confirmed_of("merchants:2"), vec![1]);
    assert_eq!(summary.blocked.len(), 1);
    assert_eq!(store.cursor("scripted"), 0);
}

#[tokio::test]
async fn shutdown_ends_a_daemon_and_keeps_the_cursor() {
    let store = MemoryFanoutStore::with(&interleaved());
    let publisher = ScriptedPublisher::new(false);
    let (stop, shutdown) = watch::channel(false);
    let run = tokio::spawn(
        FanoutLoop::open(store.clone(), publisher.clone(), quick())
            .await
            .unwrap()
            .run(RunMode::Daemon, shutdown),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.cursor("scripted") < 45 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(summary.published, 15);
    assert_eq!(store.cursor("scripted"), 45);
}

/// Counts publish calls running at once.
struct SlowPublisher {
    pipeline: bool,
    running: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    confirmed: Mutex<Vec<(String, u64)>>,
}

#[async_trait]
impl Publisher for SlowPublisher {
    fn name(&self) -> &str {
        "slow"
    }

    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::new(self.pipeline)
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.running.fetch_sub(1, SeqCst);
        let mut confirmed = self.confirmed.lock().unwrap();
        confirmed.extend(
            messages
                .iter()
                .map(|m| (m.account.as_str().to_owned(), m.sequence)),
        );
        messages.iter().map(|_| Ok(())).collect()
    }
}

#[tokio::test]
async fn an_ordered_pipeline_keeps_several_rounds_in_flight_and_others_one() {
    for (pipeline, most) in [(true, 3), (false, 1)] {
        let store = MemoryFanoutStore::with(&interleaved());
        let publisher = Arc::new(SlowPublisher {
            pipeline,
            running: Default::default(),
            most: Default::default(),
            confirmed: Mutex::default(),
        });
        let (_stop, shutdown) = watch::channel(false);
        let summary = FanoutLoop::open(store.clone(), publisher.clone(), quick())
            .await
            .unwrap()
            .run(RunMode::Drain, shutdown)
            .await
            .unwrap();
        assert_eq!(summary.published, 15);
        assert_eq!(store.cursor("slow"), 45);
        assert_eq!(
            publisher.most.load(std::sync::atomic::Ordering::SeqCst),
            most,
            "rounds in flight at once (pipeline: {pipeline})"
        );
        for account in ["merchants:1", "merchants:2", "merchants:3"] {
            let sequences: Vec<u64> = publisher
                .confirmed
                .lock()
                .unwrap()
                .iter()
                .filter(|(a, _)| a == account)
                .map(|(_, s)| *s)
                .collect();
            assert_eq!(sequences, vec![1, 2, 3, 4, 5], "{account} in order");
        }
    }
}

#[tokio::test]
async fn a_failure_with_rounds_in_flight_resends_everything_after_it_in_order() {
    let messages: Vec<_> = (1..=12).map(|s| ("merchants:1", s)).collect();
    let store = MemoryFanoutStore::with(&messages);
    let publisher = ScriptedPublisher::new(true);
    publisher.fail(
        "merchants:1",
        2,
        1,
        Error::new(ErrorKind::Transport, "delivery timed out").transient(None),
    );
    let summary = drain(&store, &publisher, quick()).await;
    let confirmed = publisher.confirmed_of("merchants:1");
    // Rounds of 3 were already in flight behind the failure; their "confirmations"
    // are not trusted: everything from sequence 2 on is sent again, in order.
    let resent_from = confirmed.iter().rposition(|s| *s == 2).expect("2 re-sent");
    assert_eq!(
        confirmed[resent_from..],
        (2..=12).collect::<Vec<_>>()[..],
        "{confirmed:?}"
    );
    assert!(
        confirmed[..resent_from].contains(&3),
        "later rounds were in flight: {confirmed:?}"
    );
    assert_eq!(
        summary.published, 12,
        "each sequence counted once, in order"
    );
    assert_eq!(store.cursor("scripted"), 36);
}
