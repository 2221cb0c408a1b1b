//! Property: against a ledger that fails, throttles and loses answers after it
//! committed, with the relay process crashing at any step and restarting (a new
//! `Dispatcher` over the same store), for any schedule: per account the ledger's
//! writes (commits, and the rejection notices of refusals) follow sequence order,
//! nothing is posted twice (an `Idempotency-Hit` replay is not a post), a refusal the
//! relay recorded is never posted again, and in the end every event has exactly one
//! outcome that matches the ledger.
//!
//! `PROPTEST_CASES=2000 cargo test -p outbox-core --lib dispatch::properties` runs it longer.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use proptest::prelude::*;
use tokio::sync::watch;

use super::*;
use crate::domain::{
    Account, Amount, Asset, LedgerCommand, Metadata, NewEvent, OUTBOX_EVENT_ID_KEY, PostBody,
    PostCommand, Posting, RevertCommand,
};
use crate::exception::Exception;
use crate::ledger::{Balances, BulkItem, LedgerCapabilities, LedgerTransaction, RunOutcome};
use crate::relay::PollingRelay;
use crate::store::{Lag, StoreCapabilities};
use crate::testing::{FakeLedger, MemoryStore, proptest_config};

/// What happens to one ledger call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// It reaches the ledger and its answer comes back.
    Answer,
    /// 503 before the ledger did anything.
    Unavailable,
    /// 429 with a `Retry-After`, before the ledger did anything.
    Throttled,
    /// The ledger did it (committed, refused, wrote the notice) and the answer was
    /// lost: the client timed out or the connection reset.
    AnswerLost,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        5 => Just(Fault::Answer),
        2 => Just(Fault::Unavailable),
        1 => Just(Fault::Throttled),
        2 => Just(Fault::AnswerLost),
    ]
}

/// The relay process, which dies right after its `at`-th effect (a store write or a
/// ledger call that reached the ledger): that effect took place, its answer and
/// everything after it do not. Each run gets its own, so a task the dead process left
/// behind stays dead.
#[derive(Debug)]
struct Process {
    crash_after: Option<usize>,
    effects: AtomicUsize,
    dead: AtomicBool,
}

impl Process {
    fn new(crash_after: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            crash_after,
            effects: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
        })
    }

    fn alive(&self) -> Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Error::new(ErrorKind::Internal, "the relay process crashed"));
        }
        Ok(())
    }

    /// Counts an effect that took place; an error when the process died right after it.
    fn took_effect(&self) -> Result<()> {
        let count = self.effects.fetch_add(1, Ordering::SeqCst) + 1;
        if self.crash_after == Some(count) {
            self.dead.store(true, Ordering::SeqCst);
        }
        self.alive()
    }
}

/// The memory store as a dying process sees it.
#[derive(Clone)]
struct CrashingStore {
    inner: MemoryStore,
    process: Arc<Process>,
}

#[async_trait]
impl Store for CrashingStore {
    fn capabilities(&self) -> StoreCapabilities {
        self.inner.capabilities()
    }
    async fn read_committed(
        &self,
        after: Option<Position>,
        limit: usize,
    ) -> Result<Vec<OutboxEvent>> {
        self.process.alive()?;
        self.inner.read_committed(after, limit).await
    }
    async fn load_cursor(&self, relay: &str) -> Result<Option<Position>> {
        self.process.alive()?;
        self.inner.load_cursor(relay).await
    }
    async fn save_cursor(&self, relay: &str, position: Position) -> Result<()> {
        self.process.alive()?;
        self.inner.save_cursor(relay, position).await?;
        self.process.took_effect()
    }
    async fn append_deliveries(&self, records: &[DeliveryRecord]) -> Result<()> {
        self.process.alive()?;
        self.inner.append_deliveries(records).await?;
        self.process.took_effect()
    }
    async fn deliveries(&self, event_id: EventId) -> Result<Vec<DeliveryRecord>> {
        self.process.alive()?;
        self.inner.deliveries(event_id).await
    }
    async fn delivery_states(
        &self,
        event_ids: &[EventId],
    ) -> Result<HashMap<EventId, DeliveryState>> {
        self.process.alive()?;
        self.inner.delivery_states(event_ids).await
    }
    async fn has_deliveries(&self) -> Result<bool> {
        self.process.alive()?;
        self.inner.has_deliveries().await
    }
    async fn raise_exception(&self, exception: &NewException) -> Result<bool> {
        self.process.alive()?;
        let new = self.inner.raise_exception(exception).await?;
        self.process.took_effect()?;
        Ok(new)
    }
    async fn exceptions(&self) -> Result<Vec<Exception>> {
        self.inner.exceptions().await
    }
    async fn lag(&self, relay: &str) -> Result<Lag> {
        self.inner.lag(relay).await
    }
}

/// A ledger write as the ledger saw it, in the order they took place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Committed(EventId),
    Notice(EventId),
}

/// The fake ledger (keys kept like Formance) behind a network that follows the
/// fault schedule, called by a process that may die.
struct FaultyLedger {
    inner: FakeLedger,
    faults: Arc<Mutex<VecDeque<Fault>>>,
    process: Arc<Process>,
    written: Arc<Mutex<Vec<Written>>>,
}

impl FaultyLedger {
    fn next_fault(&self) -> Fault {
        self.faults
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fault::Answer)
    }

    /// A call that may change the ledger: `effect` runs unless the fault stops the
    /// call before it, and its answer is lost when the fault or a crash says so.
    async fn write<T>(&self, effect: impl Future<Output = Result<T>>) -> Result<T> {
        self.process.alive()?;
        let fault = self.next_fault();
        if let Some(err) = refused_before(fault) {
            return Err(err);
        }
        let answer = effect.await;
        self.process.took_effect()?;
        if fault == Fault::AnswerLost {
            return Err(
                Error::new(ErrorKind::Transport, "timed out waiting for the ledger")
                    .transient(None),
            );
        }
        answer
    }

    /// A read: the faults that lose an answer lose it, nothing changes.
    async fn read<T>(&self, read: impl Future<Output = Result<T>>) -> Result<T> {
        self.process.alive()?;
        match self.next_fault() {
            Fault::Answer => read.await,
            Fault::AnswerLost => {
                Err(Error::new(ErrorKind::Transport, "connection reset").transient(None))
            }
            other => Err(refused_before(other).expect("a refusing fault")),
        }
    }

    fn note(&self, key: EventId, answer: &Result<PostOutcome>) {
        if let Ok(PostOutcome::Accepted { .. }) = answer {
            self.written.lock().unwrap().push(Written::Committed(key));
        }
    }
}

/// The error of a fault that stops a call before the ledger does anything.
fn refused_before(fault: Fault) -> Option<Error> {
    match fault {
        Fault::Unavailable => {
            Some(Error::new(ErrorKind::Ledger, "503 service unavailable").transient(None))
        }
        Fault::Throttled => Some(
            Error::new(ErrorKind::Ledger, "429 too many requests")
                .transient(Some(Duration::from_millis(2))),
        ),
        Fault::Answer | Fault::AnswerLost => None,
    }
}

#[async_trait]
impl Ledger for FaultyLedger {
    fn capabilities(&self) -> LedgerCapabilities {
        self.inner.capabilities()
    }
    async fn post(&self, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        self.write(async {
            let answer = self.inner.post(key, body).await;
            self.note(key, &answer);
            answer
        })
        .await
    }
    async fn post_bulk(&self, items: &[BulkItem<'_>]) -> Result<Vec<Result<PostOutcome>>> {
        self.write(async {
            let answers = self.inner.post_bulk(items).await?;
            for (item, answer) in items.iter().zip(&answers) {
                self.note(item.key, answer);
            }
            Ok(answers)
        })
        .await
    }
    async fn post_run(&self, items: &[BulkItem<'_>]) -> Result<RunOutcome> {
        self.write(async {
            let fresh: Vec<EventId> = {
                let state = self.inner.0.lock().unwrap();
                items
                    .iter()
                    .map(|i| i.key)
                    .filter(|key| !state.by_key.contains_key(key))
                    .collect()
            };
            let outcome = self.inner.post_run(items).await?;
            if let RunOutcome::Committed(_) = outcome {
                let mut written = self.written.lock().unwrap();
                written.extend(fresh.into_iter().map(Written::Committed));
            }
            Ok(outcome)
        })
        .await
    }
    async fn revert(
        &self,
        key: EventId,
        transaction_id: u64,
        metadata: &Metadata,
    ) -> Result<PostOutcome> {
        self.write(async {
            let answer = self.inner.revert(key, transaction_id, metadata).await;
            self.note(key, &answer);
            answer
        })
        .await
    }
    async fn transaction_by_event_id(
        &self,
        event_id: EventId,
    ) -> Result<Option<LedgerTransaction>> {
        self.read(self.inner.transaction_by_event_id(event_id))
            .await
    }
    async fn save_account_metadata(
        &self,
        key: &str,
        account: &Account,
        metadata: &Metadata,
    ) -> Result<()> {
        self.write(async {
            self.inner
                .save_account_metadata(key, account, metadata)
                .await?;
            let id = EventId::parse(&metadata[OUTBOX_EVENT_ID_KEY])?;
            self.written.lock().unwrap().push(Written::Notice(id));
            Ok(())
        })
        .await
    }
    async fn rejection_notice(
        &self,
        account: &Account,
        event_id: EventId,
    ) -> Result<Option<String>> {
        self.read(self.inner.rejection_notice(account, event_id))
            .await
    }
    async fn aggregate_balances(&self, address: &str) -> Result<Balances> {
        self.inner.aggregate_balances(address).await
    }
}

/// One outbox event of an account's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// A payout; `refused`: the ledger refuses its first evaluation (and would commit
    /// a second one, as a refused body re-sent once the account is funded does).
    Post { refused: bool },
    /// The reversal of the account's event at index `target` (an earlier post).
    Revert { target: usize },
}

fn history() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec((0u8..8, any::<prop::sample::Index>()), 1..=5).prop_map(|choices| {
        let mut ops = Vec::new();
        let mut revertible: Vec<usize> = Vec::new();
        for (choice, pick) in choices {
            let op = match choice {
                0..=4 => Op::Post { refused: false },
                5 => Op::Post { refused: true },
                _ if revertible.is_empty() => Op::Post { refused: false },
                _ => Op::Revert {
                    target: revertible.remove(pick.index(revertible.len())),
                },
            };
            if matches!(op, Op::Post { .. }) {
                revertible.push(ops.len());
            }
            ops.push(op);
        }
        ops
    })
}

#[derive(Debug, Clone)]
struct Scenario {
    histories: Vec<Vec<Op>>,
    /// The accounts in enqueue order (each account's events keep their order).
    enqueue: Vec<usize>,
    /// The ledger calls' fate, in call order; past its end every call is answered.
    faults: Vec<Fault>,
    /// Each run but the last crashes after this many effects (if it gets that far).
    crashes: Vec<usize>,
    config: DispatchConfig,
    /// Whether the ledger posts an account's consecutive events as one ordered run.
    ordered_runs: bool,
}

fn dispatch_config() -> impl Strategy<Value = DispatchConfig> {
    (
        1usize..=5,
        any::<bool>(),
        1usize..=3,
        1usize..=3,
        any::<bool>(),
    )
        .prop_map(
            |(batch_size, bulk, max_bulk, parallel_requests, save_each_round)| DispatchConfig {
                batch_size,
                bulk,
                max_bulk,
                parallel_requests,
                poll_interval: Duration::from_millis(1),
                backoff: Backoff {
                    initial: Duration::from_millis(1),
                    max: Duration::from_millis(2),
                },
                max_attempts: None,
                cursor_interval: if save_each_round {
                    Duration::ZERO
                } else {
                    Duration::from_millis(200)
                },
            },
        )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    prop::collection::vec(history(), 1..=3)
        .prop_flat_map(|histories| {
            let enqueue: Vec<usize> = histories
                .iter()
                .enumerate()
                .flat_map(|(account, ops)| std::iter::repeat_n(account, ops.len()))
                .collect();
            (
                Just(histories),
                Just(enqueue).prop_shuffle(),
                prop::collection::vec(fault(), 0..40),
                prop::collection::vec(1usize..30, 0..=3),
                dispatch_config(),
                any::<bool>(),
            )
        })
        .prop_map(
            |(histories, enqueue, faults, crashes, config, ordered_runs)| Scenario {
                histories,
                enqueue,
                faults,
                crashes,
                config,
                ordered_runs,
            },
        )
}

fn payout(account: &Account, amount: u64) -> NewEvent {
    NewEvent::new(
        account.clone(),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: Account::parse("world").unwrap(),
                destination: Account::parse(&format!("{account}:available")).unwrap(),
                amount: Amount::new(amount),
                asset: Asset::parse("USD/2").unwrap(),
            }]),
            reference: None,
            metadata: Metadata::new(),
        }),
    )
}

/// Enqueues the scenario's events; returns them with their op.
fn enqueue(
    scenario: &Scenario,
    store: &MemoryStore,
    ledger: &FakeLedger,
) -> Vec<(OutboxEvent, Op)> {
    let mut per_account: Vec<Vec<OutboxEvent>> = vec![Vec::new(); scenario.histories.len()];
    let mut events = Vec::new();
    for &index in &scenario.enqueue {
        let account = Account::parse(&format!("merchants:{index}")).unwrap();
        let op = scenario.histories[index][per_account[index].len()];
        let new = match op {
            Op::Post { .. } => payout(&account, 100 + per_account[index].len() as u64),
            Op::Revert { target } => NewEvent::new(
                account,
                LedgerCommand::Revert(RevertCommand {
                    event_id: per_account[index][target].event_id,
                    metadata: Metadata::new(),
                }),
            ),
        };
        let event = store.add(&new);
        if op == (Op::Post { refused: true }) {
            ledger.script(
                event.event_id,
                vec![Ok(PostOutcome::Rejected {
                    code: "INSUFFICIENT_FUND".into(),
                    message: "not enough funds".into(),
                })],
            );
        }
        per_account[index].push(event.clone());
        events.push((event, op));
    }
    events
}

/// Runs the dispatcher once per crash point, then once more without a crash.
async fn run_with_crashes(
    scenario: &Scenario,
    store: &MemoryStore,
    ledger: &FakeLedger,
    written: &Arc<Mutex<Vec<Written>>>,
) -> std::result::Result<(), TestCaseError> {
    let faults = Arc::new(Mutex::new(scenario.faults.iter().copied().collect()));
    let runs = scenario.crashes.iter().map(|at| Some(*at)).chain([None]);
    for crash_after in runs {
        let process = Process::new(crash_after);
        let view = CrashingStore {
            inner: store.clone(),
            process: Arc::clone(&process),
        };
        let faulty = FaultyLedger {
            inner: ledger.clone(),
            faults: Arc::clone(&faults),
            process,
            written: Arc::clone(written),
        };
        let relay = PollingRelay::open(view.clone(), "relay", None)
            .await
            .map_err(|e| TestCaseError::fail(format!("relay open: {e}")))?;
        let dispatcher = Dispatcher::open(
            Arc::new(view),
            Box::new(relay),
            Arc::new(faulty),
            scenario.config.clone(),
        )
        .await
        .map_err(|e| TestCaseError::fail(format!("restart refused: {e}")))?;
        let (_shutdown, rx) = watch::channel(false);
        let ended =
            tokio::time::timeout(Duration::from_secs(30), dispatcher.run(RunMode::Drain, rx))
                .await
                .map_err(|_| TestCaseError::fail("the dispatcher did not drain"))?;
        if crash_after.is_none() {
            let summary = ended.map_err(|e| TestCaseError::fail(format!("final run: {e}")))?;
            prop_assert!(summary.stopped.is_empty(), "{:?}", summary);
        }
        // A crashed run ends one way or another; what it left is checked below.
    }
    Ok(())
}

async fn run(scenario: &Scenario) -> std::result::Result<(), TestCaseError> {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    ledger.0.lock().unwrap().ordered_runs = scenario.ordered_runs;
    let events = enqueue(scenario, &store, &ledger);
    let written = Arc::new(Mutex::new(Vec::new()));
    run_with_crashes(scenario, &store, &ledger, &written).await?;

    let written = written.lock().unwrap().clone();
    let (by_key, reverts) = {
        let state = ledger.0.lock().unwrap();
        (state.by_key.clone(), state.reverts.clone())
    };
    let records = store.0.lock().unwrap().deliveries.clone();
    let mut decisive: HashMap<EventId, usize> = HashMap::new();
    for (event, op) in &events {
        let id = event.event_id;
        let outcomes: Vec<DeliveryOutcome> = records
            .iter()
            .filter(|r| r.event_id == id && r.outcome.is_terminal())
            .map(|r| r.outcome)
            .collect();
        prop_assert!(
            !outcomes.is_empty(),
            "{} {} has no outcome",
            event.account,
            event.sequence
        );
        let rejected = outcomes[0] == DeliveryOutcome::Rejected;
        prop_assert!(
            outcomes
                .iter()
                .all(|o| (*o == DeliveryOutcome::Rejected) == rejected),
            "{} {}: two outcomes {:?}",
            event.account,
            event.sequence,
            outcomes
        );
        let commits = written
            .iter()
            .filter(|w| **w == Written::Committed(id))
            .count();
        if rejected {
            prop_assert!(
                *op != (Op::Post { refused: false }),
                "{} {}: a fundable payout was refused",
                event.account,
                event.sequence
            );
            prop_assert!(
                !by_key.contains_key(&id) && commits == 0,
                "{} {}: refused and recorded, then posted again",
                event.account,
                event.sequence
            );
            let notice = written.iter().position(|w| *w == Written::Notice(id));
            prop_assert!(notice.is_some(), "refusal without its notice");
            decisive.insert(id, notice.unwrap_or_default());
        } else {
            prop_assert_eq!(
                commits,
                1,
                "{} {}: committed {} times",
                event.account,
                event.sequence,
                commits
            );
            let recorded = records
                .iter()
                .find(|r| r.event_id == id && r.outcome.is_terminal())
                .and_then(|r| r.ledger_tx_id);
            prop_assert_eq!(recorded, by_key.get(&id).map(|(tx, _)| *tx));
            prop_assert!(
                !written.contains(&Written::Notice(id)),
                "{} {}: committed, and announced as refused",
                event.account,
                event.sequence
            );
            let commit = written.iter().position(|w| *w == Written::Committed(id));
            decisive.insert(id, commit.unwrap_or_default());
        }
        if let Op::Revert { .. } = op {
            let LedgerCommand::Revert(revert) = event.payload.command().unwrap() else {
                unreachable!("a revert event")
            };
            let target_tx = by_key.get(&revert.event_id).map(|(tx, _)| *tx);
            prop_assert_eq!(
                rejected,
                target_tx.is_none(),
                "revert of {}",
                revert.event_id
            );
            for (key, tx, _) in &reverts {
                if *key == id {
                    prop_assert_eq!(Some(*tx), target_tx, "reverted the wrong transaction");
                }
            }
        }
    }
    // Per account, the ledger's writes follow sequence order.
    let mut by_account: HashMap<&Account, Vec<(u64, usize)>> = HashMap::new();
    for (event, _) in &events {
        by_account
            .entry(&event.account)
            .or_default()
            .push((event.sequence, decisive[&event.event_id]));
    }
    for (account, mut writes) in by_account {
        writes.sort();
        prop_assert!(
            writes.windows(2).all(|w| w[0].1 < w[1].1),
            "{} reached the ledger out of order: {:?}",
            account,
            writes
        );
    }
    let exceptions = store.0.lock().unwrap().exceptions.clone();
    prop_assert!(
        exceptions.iter().all(|e| e.kind == ExceptionKind::Rejected),
        "{:?}",
        exceptions
    );
    let last = events.iter().map(|(e, _)| e.position).max();
    prop_assert_eq!(store.load_cursor("relay").await.unwrap(), last);
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(128))]

    #[test]
    fn per_account_ledger_order_and_one_post_per_event_survive_faults_and_restarts(
        scenario in scenario()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(run(&scenario))?;
    }
}
