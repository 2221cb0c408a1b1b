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
use crate::fanout::dead_letter::replay_progress_key;
use crate::inbox::MessageKind;
use crate::retry::RetryPolicy;

mod properties;

#[derive(Default)]
struct MemoryFanoutStore {
    messages: Mutex<Vec<StoredMessage>>,
    cursors: Mutex<std::collections::HashMap<String, u64>>,
    /// Method name → how many of its next calls fail transiently.
    fail_next: Mutex<std::collections::HashMap<&'static str, usize>>,
    dead_letters: Mutex<Vec<DeadLetter>>,
    requests: Mutex<Vec<ReplayRequest>>,
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

    /// Makes the next `times` calls of `method` fail as a store that is briefly
    /// unreachable does (transient).
    fn fail(&self, method: &'static str, times: usize) {
        self.fail_next.lock().unwrap().insert(method, times);
    }

    fn injected(&self, method: &'static str) -> Result<()> {
        let mut fail_next = self.fail_next.lock().unwrap();
        match fail_next.get_mut(method) {
            Some(left) if *left > 0 => {
                *left -= 1;
                Err(
                    Error::new(ErrorKind::Storage, format!("{method}: connection reset"))
                        .transient(None),
                )
            }
            _ => Ok(()),
        }
    }

    fn push(&self, account: &str, sequence: u64) {
        let mut messages = self.messages.lock().unwrap();
        let position = messages.last().map_or(0, |m| m.position) + 3;
        messages.push(StoredMessage {
            position,
            message: message(account, sequence),
            received_at: Utc::now(),
        });
    }
}

#[async_trait]
impl FanoutStore for MemoryFanoutStore {
    async fn append(&self, _: &str, _: &[FanoutMessage]) -> Result<AppendOutcome> {
        unreachable!("the loop never appends")
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        self.injected("read_after")?;
        let messages = self.messages.lock().unwrap();
        Ok(messages
            .iter()
            .filter(|m| m.position > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        self.injected("load_cursor")?;
        Ok(self.cursor(transport))
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        self.injected("save_cursor")?;
        let mut cursors = self.cursors.lock().unwrap();
        let cursor = cursors.entry(transport.to_owned()).or_default();
        *cursor = (*cursor).max(position);
        Ok(())
    }

    async fn append_dead_letters(&self, letters: &[NewDeadLetter]) -> Result<Vec<u64>> {
        self.injected("append_dead_letters")?;
        let mut stored = self.dead_letters.lock().unwrap();
        let mut ids = Vec::new();
        for letter in letters {
            let id = stored.last().map_or(0, |l| l.id) + 1;
            ids.push(id);
            stored.push(DeadLetter {
                id,
                destination: letter.destination.clone(),
                position: letter.position,
                account: letter.account.clone(),
                sequence: letter.sequence,
                instruction_id: letter.instruction_id.clone(),
                reason: letter.reason,
                error: letter.error.clone(),
                dead_lettered_at: Utc::now(),
            });
        }
        Ok(ids)
    }

    async fn read_dead_letters(&self, query: &DeadLetterQuery<'_>) -> Result<Vec<DeadLetter>> {
        self.injected("read_dead_letters")?;
        Ok(self
            .dead_letters
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.id > query.after_id)
            .filter(|l| query.destination.is_none_or(|d| d == l.destination))
            .filter(|l| query.account.is_none_or(|a| *a == l.account))
            .take(query.limit)
            .cloned()
            .collect())
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &Account,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        self.injected("read_set_aside")?;
        let positions: std::collections::BTreeSet<u64> = self
            .dead_letters
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.destination == destination && l.account == *account && l.position > after)
            .map(|l| l.position)
            .collect();
        let messages = self.messages.lock().unwrap();
        Ok(messages
            .iter()
            .filter(|m| positions.contains(&m.position))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn request_replay(&self, destination: &str, account: &Account) -> Result<ReplayRequest> {
        let refusal_id = self
            .dead_letters
            .lock()
            .unwrap()
            .iter()
            .filter(|l| {
                l.destination == destination
                    && l.account == *account
                    && l.reason == DeadLetterReason::Refused
            })
            .map(|l| l.id)
            .max()
            .ok_or_else(|| Error::new(ErrorKind::NotFound, "no refused message"))?;
        let mut requests = self.requests.lock().unwrap();
        let request = ReplayRequest {
            id: requests.len() as u64 + 1,
            destination: destination.to_owned(),
            account: account.clone(),
            refusal_id,
            requested_at: Utc::now(),
        };
        requests.push(request.clone());
        Ok(request)
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> Result<Vec<ReplayRequest>> {
        self.injected("read_replay_requests")?;
        Ok(self
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.destination == destination && r.id > after)
            .cloned()
            .collect())
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
        store_retry: RetryPolicy {
            max_retries: Some(20),
            backoff: Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(2),
            },
        },
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
async fn a_permanent_failure_dead_letters_the_message_and_parks_its_account_across_restarts() {
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
    assert_eq!(summary.set_aside, 3);
    assert_eq!(
        summary.blocked,
        vec![Account::parse("merchants:3").unwrap()]
    );
    assert_eq!(
        publisher.confirmed_of("merchants:3"),
        vec![1],
        "nothing of the account past its refusal"
    );
    assert_eq!(publisher.confirmed_of("merchants:1"), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        store.cursor("scripted"),
        45,
        "the cursor passes the dead letters"
    );
    assert_eq!(
        letters(&store),
        vec![
            ("merchants:3".into(), 2, DeadLetterReason::Refused),
            ("merchants:3".into(), 3, DeadLetterReason::SetAside),
            ("merchants:3".into(), 4, DeadLetterReason::SetAside),
            ("merchants:3".into(), 5, DeadLetterReason::SetAside),
        ]
    );
    let refusal = store.dead_letters.lock().unwrap()[0].clone();
    assert_eq!(
        (
            refusal.destination.as_str(),
            refusal.position,
            refusal.instruction_id.as_str()
        ),
        ("scripted", 18, "merchants:3#2")
    );
    assert!(refusal.error.contains("unroutable"), "{}", refusal.error);

    // A restart keeps the account parked, and sets aside what arrives for it.
    store.push("merchants:3", 6);
    store.push("merchants:1", 6);
    let restarted = ScriptedPublisher::new(false);
    let summary = drain(&store, &restarted, quick()).await;
    assert_eq!(restarted.confirmed_of("merchants:3"), Vec::<u64>::new());
    assert_eq!(restarted.confirmed_of("merchants:1"), vec![6]);
    assert_eq!(summary.blocked.len(), 1);
    assert_eq!(letters(&store).last().unwrap().1, 6);

    // The operator fixed the route and asks for a replay: the account's recorded
    // messages go out in order, nothing else is sent again.
    store
        .request_replay("scripted", &Account::parse("merchants:3").unwrap())
        .await
        .unwrap();
    let fixed = ScriptedPublisher::new(false);
    let summary = drain(&store, &fixed, quick()).await;
    assert_eq!(fixed.confirmed_of("merchants:3"), vec![2, 3, 4, 5, 6]);
    assert_eq!(fixed.confirmed_of("merchants:1"), Vec::<u64>::new());
    assert_eq!(summary.replayed, 5);
    assert!(summary.blocked.is_empty(), "{:?}", summary.blocked);
    let last = store.messages.lock().unwrap().last().unwrap().position;
    assert_eq!(
        store.cursor(&replay_progress_key(
            "scripted",
            &Account::parse("merchants:3").unwrap()
        )),
        last - 3
    );

    // The account flows normally again.
    store.push("merchants:3", 7);
    let after = ScriptedPublisher::new(false);
    drain(&store, &after, quick()).await;
    assert_eq!(after.confirmed_of("merchants:3"), vec![7]);
}

/// The dead letters as (account, sequence, reason), in record order.
fn letters(store: &MemoryFanoutStore) -> Vec<(String, u64, DeadLetterReason)> {
    store
        .dead_letters
        .lock()
        .unwrap()
        .iter()
        .map(|l| (l.account.as_str().to_owned(), l.sequence, l.reason))
        .collect()
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
    assert_eq!(summary.set_aside, 9);
    assert_eq!(store.cursor("scripted"), 33);
}

#[tokio::test]
async fn a_replay_refused_again_parks_the_account_again_until_a_new_request() {
    let store = MemoryFanoutStore::with(&interleaved());
    let refusing = ScriptedPublisher::new(false);
    let refused = || Error::new(ErrorKind::Transport, "422 unprocessable");
    refusing.fail("merchants:2", 3, 1, refused());
    drain(&store, &refusing, quick()).await;
    let account = Account::parse("merchants:2").unwrap();
    store.request_replay("scripted", &account).await.unwrap();

    // Still broken: the replay's head is refused again, recorded again, parked again.
    let still = ScriptedPublisher::new(false);
    still.fail("merchants:2", 3, 1, refused());
    let summary = drain(&store, &still, quick()).await;
    assert_eq!(still.confirmed_of("merchants:2"), Vec::<u64>::new());
    assert_eq!(summary.blocked, vec![account.clone()]);
    let refusals: Vec<_> = letters(&store)
        .into_iter()
        .filter(|l| l.2 == DeadLetterReason::Refused)
        .collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");

    // The old request does not cover the new refusal; a new one does.
    let idle = ScriptedPublisher::new(false);
    drain(&store, &idle, quick()).await;
    assert_eq!(idle.confirmed_of("merchants:2"), Vec::<u64>::new());
    store.request_replay("scripted", &account).await.unwrap();
    let fixed = ScriptedPublisher::new(false);
    drain(&store, &fixed, quick()).await;
    assert_eq!(fixed.confirmed_of("merchants:2"), vec![3, 4, 5]);
}

#[tokio::test]
async fn a_running_loop_picks_up_a_replay_request_and_replays_before_newer_messages() {
    for pipeline in [false, true] {
        let store = MemoryFanoutStore::with(&interleaved());
        let publisher = ScriptedPublisher::new(pipeline);
        publisher.fail(
            "merchants:1",
            2,
            1,
            Error::new(ErrorKind::Transport, "413 too large"),
        );
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
        assert_eq!(store.cursor("scripted"), 45);
        store.push("merchants:1", 6);
        store
            .request_replay("scripted", &Account::parse("merchants:1").unwrap())
            .await
            .unwrap();
        store.push("merchants:1", 7);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while publisher.confirmed_of("merchants:1").len() < 7
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.send(true).unwrap();
        let summary = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let confirmed = publisher.confirmed_of("merchants:1");
        // A pipeline may have had 3 and 4 on the wire behind the refused 2: they are
        // not trusted and go again after it (at least once, never reordered for good).
        let from = confirmed.iter().rposition(|s| *s == 2).expect("2 replayed");
        assert_eq!(
            confirmed[from..],
            [2, 3, 4, 5, 6, 7],
            "pipeline: {pipeline}"
        );
        if !pipeline {
            assert_eq!(confirmed, vec![1, 2, 3, 4, 5, 6, 7]);
        }
        assert!(summary.blocked.is_empty());
    }
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

#[tokio::test]
async fn transient_failures_loading_the_cursor_are_retried() {
    let store = MemoryFanoutStore::with(&interleaved());
    store.fail("load_cursor", 3);
    let publisher = ScriptedPublisher::new(false);
    FanoutLoop::open(store.clone(), publisher, quick())
        .await
        .expect("open retries a store that is briefly unreachable");
}

#[tokio::test]
async fn transient_read_and_cursor_save_failures_are_retried_and_everything_is_delivered() {
    let store = MemoryFanoutStore::with(&interleaved());
    let publisher = ScriptedPublisher::new(false);
    let (_stop, shutdown) = watch::channel(false);
    let fanout = FanoutLoop::open(store.clone(), publisher.clone(), quick())
        .await
        .unwrap();
    store.fail("read_after", 3);
    store.fail("save_cursor", 3);
    let run = fanout.run(RunMode::Drain, shutdown);
    let summary = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("drain ends by itself")
        .expect("the loop survives transient cursor-save and read failures");
    assert_eq!(summary.published, 15);
    for account in ["merchants:1", "merchants:2", "merchants:3"] {
        assert_eq!(publisher.confirmed_of(account), vec![1, 2, 3, 4, 5]);
    }
    assert_eq!(store.cursor("scripted"), 45);
}

#[tokio::test]
async fn a_store_that_stays_down_ends_the_run_with_its_error() {
    let store = MemoryFanoutStore::with(&interleaved());
    let publisher = ScriptedPublisher::new(false);
    let (_stop, shutdown) = watch::channel(false);
    let fanout = FanoutLoop::open(store.clone(), publisher.clone(), quick())
        .await
        .unwrap();
    store.fail("save_cursor", usize::MAX);
    let err = tokio::time::timeout(
        Duration::from_secs(120),
        fanout.run(RunMode::Drain, shutdown),
    )
    .await
    .expect("the retries are bounded")
    .expect_err("a cursor that can never be saved ends the run");
    assert!(err.to_string().contains("save_cursor"), "{err}");
}

/// Item 10: one account's message refused for good, thousands of other accounts'
/// messages behind it, a look-ahead far smaller than that.
fn poisoned_stream() -> Vec<(String, u64)> {
    let mut messages = vec![("merchants:0".to_owned(), 1), ("merchants:0".to_owned(), 2)];
    for sequence in 1..=3 {
        for account in 1..=1000 {
            messages.push((format!("merchants:{account}"), sequence));
        }
        messages.push(("merchants:0".to_owned(), sequence + 2));
    }
    messages
}

#[tokio::test]
async fn a_refused_message_does_not_stall_the_rest_of_the_destination() {
    for pipeline in [false, true] {
        let stream = poisoned_stream();
        let pairs: Vec<(&str, u64)> = stream.iter().map(|(a, s)| (a.as_str(), *s)).collect();
        let store = MemoryFanoutStore::with(&pairs);
        let publisher = ScriptedPublisher::new(pipeline);
        publisher.fail(
            "merchants:0",
            2,
            1,
            Error::new(ErrorKind::Transport, "422 unprocessable"),
        );
        let config = FanoutConfig {
            look_ahead: 2,
            ..quick()
        };
        let summary = drain(&store, &publisher, config).await;
        for account in [1, 500, 1000] {
            assert_eq!(
                publisher.confirmed_of(&format!("merchants:{account}")),
                vec![1, 2, 3],
                "merchants:{account} stalled behind merchants:0 (pipeline: {pipeline})"
            );
        }
        let delivered = publisher.confirmed.lock().unwrap().len();
        assert_eq!(
            delivered, 3001,
            "every other account's message, and merchants:0's first (pipeline: {pipeline})"
        );
        assert_eq!(
            publisher.confirmed_of("merchants:0"),
            vec![1],
            "never out of order"
        );
        assert_eq!(
            summary.blocked,
            vec![Account::parse("merchants:0").unwrap()]
        );
        let last = store.messages.lock().unwrap().last().unwrap().position;
        assert_eq!(
            store.cursor("scripted"),
            last,
            "the cursor passes the set-aside messages"
        );
    }
}
