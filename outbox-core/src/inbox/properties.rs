//! Property: whatever a Hop 2 transport does to a valid per-account history
//! (duplicates, reorders across and within accounts, reversals before their postings,
//! rejection notices, deliveries that fail and come again), the consumer applies the
//! in-order history exactly once, and holds exactly what sits above a gap.
//!
//! `PROPTEST_CASES=10000 cargo test -p outbox-core --lib inbox::properties` runs it longer.

use std::time::Duration;

use proptest::prelude::*;

use super::{Accepted, InboxEngine, InboxMessage, MessageKind};
use crate::domain::Account;
use crate::error::{Error, ErrorKind, Result};
use crate::testing::{MemoryInbox, proptest_config};

const CONSUMER: &str = "treasury";

/// One entry of an account's history, at sequence = its index + 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Commit,
    /// The ledger refused the instruction: a rejection notice, no impact.
    Reject,
    /// The reversal of the posting at `target` (an earlier, unreverted commit).
    Revert {
        target: u64,
    },
}

/// A valid history of one account: a reversal always follows its posting.
fn history() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0u8..6, any::<prop::sample::Index>()), 1..=8).prop_map(|choices| {
        let mut steps = Vec::new();
        let mut revertible: Vec<u64> = Vec::new();
        for (choice, pick) in choices {
            let sequence = steps.len() as u64 + 1;
            let step = match choice {
                0..=2 => Step::Commit,
                3 => Step::Reject,
                _ if revertible.is_empty() => Step::Commit,
                _ => Step::Revert {
                    target: revertible.remove(pick.index(revertible.len())),
                },
            };
            if step == Step::Commit {
                revertible.push(sequence);
            }
            steps.push(step);
        }
        steps
    })
}

/// One transport's doing: which messages arrive how often and in which order; the
/// rest arrives later.
#[derive(Debug, Clone)]
struct Scenario {
    histories: Vec<Vec<Step>>,
    /// Per account and sequence: how many copies arrive in the first phase (0: not yet).
    copies: Vec<Vec<usize>>,
    /// The first phase's deliveries, (account, sequence), with the handler call that
    /// fails in that delivery, if one does (the delivery rolls back and comes again).
    first: Vec<((usize, u64), Option<usize>)>,
    /// The messages missing from the first phase, in their order of arrival.
    missing: Vec<(usize, u64)>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    prop::collection::vec(history(), 1..=3)
        .prop_flat_map(|histories| {
            let copies: Vec<_> = histories
                .iter()
                .map(|h| {
                    prop::collection::vec(prop_oneof![1 => Just(0usize), 4 => 1..=3usize], h.len())
                })
                .collect();
            (Just(histories), copies)
        })
        .prop_flat_map(|(histories, copies)| {
            let mut deliveries = Vec::new();
            let mut missing = Vec::new();
            for (account, counts) in copies.iter().enumerate() {
                for (index, count) in counts.iter().enumerate() {
                    let key = (account, index as u64 + 1);
                    if *count == 0 {
                        missing.push(key);
                    }
                    deliveries.extend(std::iter::repeat_n(key, *count));
                }
            }
            let failures =
                prop::collection::vec(prop::option::weighted(0.2, 0..3usize), deliveries.len());
            (
                Just(histories),
                Just(copies),
                Just(deliveries).prop_shuffle(),
                failures,
                Just(missing).prop_shuffle(),
            )
        })
        .prop_map(
            |(histories, copies, deliveries, failures, missing)| Scenario {
                histories,
                copies,
                first: deliveries.into_iter().zip(failures).collect(),
                missing,
            },
        )
}

fn account(index: usize) -> Account {
    Account::parse(&format!("merchants:{index}")).unwrap()
}

fn instruction_id(account: usize, sequence: u64) -> String {
    format!("merchants:{account}#{sequence}")
}

fn message(scenario: &Scenario, (index, sequence): (usize, u64)) -> InboxMessage {
    let step = scenario.histories[index][sequence as usize - 1];
    let (kind, payload) = match step {
        Step::Commit => (MessageKind::Committed, b"{}".to_vec()),
        Step::Reject => (MessageKind::Rejected, b"{}".to_vec()),
        Step::Revert { target } => (
            MessageKind::Reverted,
            instruction_id(index, target).into_bytes(),
        ),
    };
    InboxMessage {
        instruction_id: instruction_id(index, sequence),
        account: account(index),
        sequence,
        kind,
        payload,
    }
}

/// One delivery in its own transaction: the impact goes through the inbox, and a
/// failing handler rolls everything back. `Err` when it rolled back.
async fn deliver(
    engine: &InboxEngine,
    db: &mut MemoryInbox,
    message: InboxMessage,
    fail_on_call: Option<usize>,
) -> std::result::Result<Accepted, Error> {
    let before = db.clone();
    let mut calls = 0;
    let mut handler = |inbox: &mut MemoryInbox, m: &InboxMessage| -> Result<()> {
        calls += 1;
        if fail_on_call == Some(calls - 1) {
            return Err(Error::new(ErrorKind::Storage, "the treasury write failed"));
        }
        inbox.impacts.push(m.clone());
        Ok(())
    };
    let accepted = engine.accept(db, message, &mut handler).await;
    if accepted.is_err() {
        *db = before;
    }
    accepted
}

/// Delivers `deliveries` in order; a delivery that rolled back arrives again at the
/// end (the transport redelivers what was not acknowledged).
async fn deliver_all(
    engine: &InboxEngine,
    db: &mut MemoryInbox,
    scenario: &Scenario,
    deliveries: &[((usize, u64), Option<usize>)],
) -> std::result::Result<(), TestCaseError> {
    let mut queue: std::collections::VecDeque<_> = deliveries.iter().copied().collect();
    while let Some((key, fail_on_call)) = queue.pop_front() {
        match deliver(engine, db, message(scenario, key), fail_on_call).await {
            Ok(Accepted::Applied { .. } | Accepted::Held { .. } | Accepted::Duplicate) => {}
            Ok(other) => {
                return Err(TestCaseError::fail(format!(
                    "{key:?} of a valid history was taken as {other:?}"
                )));
            }
            Err(_) => queue.push_back((key, None)),
        }
    }
    Ok(())
}

/// Checks the consumer against the history of every account, up to each account's
/// first missing sequence (`delivered` says what arrived).
fn check(
    db: &MemoryInbox,
    scenario: &Scenario,
    delivered: impl Fn(usize, u64) -> bool,
) -> std::result::Result<(), TestCaseError> {
    prop_assert!(db.exceptions.is_empty(), "{:?}", db.exceptions);
    for (index, history) in scenario.histories.iter().enumerate() {
        let account = account(index);
        let n = history.len() as u64;
        let gap = (1..=n).find(|s| !delivered(index, *s)).unwrap_or(n + 1);
        let expected: Vec<InboxMessage> = (1..gap)
            .map(|s| message(scenario, (index, s)))
            .filter(|m| m.kind != MessageKind::Rejected)
            .collect();
        let applied: Vec<InboxMessage> = db
            .impacts
            .iter()
            .filter(|m| m.account == account)
            .cloned()
            .collect();
        prop_assert_eq!(&applied, &expected, "impacts of {}", account);
        // A reversal's posting was applied before it.
        for (at, m) in applied.iter().enumerate() {
            if m.kind == MessageKind::Reverted {
                let target = String::from_utf8(m.payload.clone()).unwrap();
                prop_assert!(applied[..at].iter().any(|p| p.instruction_id == target));
            }
        }
        let last = db
            .last_applied
            .get(&(CONSUMER.to_owned(), account.clone()))
            .copied()
            .unwrap_or(0);
        prop_assert_eq!(last, gap - 1, "high-water mark of {}", account);
        for s in 1..=n {
            let marker = db
                .processed
                .get(&(CONSUMER.to_owned(), instruction_id(index, s)))
                .copied();
            let kind = (s < gap).then(|| message(scenario, (index, s)).kind);
            prop_assert_eq!(marker, kind, "processed marker of {}#{}", account, s);
        }
        let above_gap: Vec<u64> = (gap + 1..=n).filter(|s| delivered(index, *s)).collect();
        prop_assert_eq!(
            db.held_of(CONSUMER, &account),
            above_gap,
            "held of {}",
            account
        );
    }
    Ok(())
}

async fn run(scenario: &Scenario) -> std::result::Result<(), TestCaseError> {
    let engine = InboxEngine::new(CONSUMER).gap_alarm_after(Duration::ZERO);
    let mut db = MemoryInbox::default();
    deliver_all(&engine, &mut db, scenario, &scenario.first).await?;
    check(&db, scenario, |a, s| scenario.copies[a][s as usize - 1] > 0)?;

    // Every open gap alarms (it is never skipped), naming its missing sequence.
    let mut alarmed = db.clone();
    let alarms = engine.check_gaps(&mut alarmed).await.unwrap();
    let mut gaps: Vec<(Account, u64, u64)> = alarms
        .into_iter()
        .map(|a| (a.account, a.missing, a.held))
        .collect();
    gaps.sort();
    let mut expected = Vec::new();
    for index in 0..scenario.histories.len() {
        let held = db.held_of(CONSUMER, &account(index));
        if let Some(lowest) = held.first() {
            let last = db
                .last_applied
                .get(&(CONSUMER.to_owned(), account(index)))
                .copied()
                .unwrap_or(0);
            expected.push((account(index), last + 1, *lowest));
        }
    }
    prop_assert_eq!(gaps, expected);

    // The missing messages arrive (and some of the first phase's again).
    let late: Vec<_> = scenario
        .missing
        .iter()
        .copied()
        .chain(scenario.first.iter().map(|(key, _)| *key).take(3))
        .map(|key| (key, None))
        .collect();
    deliver_all(&engine, &mut db, scenario, &late).await?;
    check(&db, scenario, |_, _| true)?;
    prop_assert!(db.held.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn any_interleaving_applies_the_in_order_history_exactly_once(scenario in scenario()) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(run(&scenario))?;
    }
}
