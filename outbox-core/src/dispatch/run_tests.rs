//! Ordered runs (a hot account): an account's consecutive posts go out as one
//! atomic call, and any failure of a run sends its events one by one, so refusals,
//! replays and retries behave as for single posts (docs/ARCHITECTURE.md#hot-accounts).

use std::collections::HashMap;

use super::tests::{config, drain, payout};
use super::*;
use crate::testing::{FakeLedger, MemoryStore};

fn ledger_with_runs() -> FakeLedger {
    let ledger = FakeLedger::default();
    ledger.0.lock().unwrap().ordered_runs = true;
    ledger
}

/// The ledger transaction id of each event, which must grow with the sequence.
fn assert_ledger_order(ledger: &FakeLedger, events: &[OutboxEvent]) {
    let by_key: HashMap<EventId, u64> = ledger
        .0
        .lock()
        .unwrap()
        .by_key
        .iter()
        .map(|(k, (id, _))| (*k, *id))
        .collect();
    let ids: Vec<u64> = events
        .iter()
        .filter_map(|e| by_key.get(&e.event_id).copied())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ledger order is not sequence order: {ids:?}"
    );
}

fn rejected(code: &str) -> Result<PostOutcome> {
    Ok(PostOutcome::Rejected {
        code: code.into(),
        message: "not enough funds".into(),
    })
}

#[tokio::test]
async fn a_hot_account_goes_out_in_ordered_runs_of_the_bulk_size() {
    let (store, ledger) = (MemoryStore::default(), ledger_with_runs());
    let hot: Vec<_> = (0..250).map(|i| store.add(&payout("hot", 1 + i))).collect();
    let quiet = store.add(&payout("quiet", 7));
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(
        (summary.accepted, summary.replayed, summary.rejected),
        (251, 0, 0)
    );
    let runs = ledger.0.lock().unwrap().runs.clone();
    assert_eq!(
        runs.iter().sum::<usize>(),
        250,
        "the hot account's events went in runs: {runs:?}"
    );
    assert!(runs.iter().all(|len| (2..=100).contains(len)), "{runs:?}");
    assert!(
        runs.len() <= 4,
        "{} calls for 250 events: {runs:?}",
        runs.len()
    );
    // The quiet account's lone head went on its own, not as a run.
    assert!(
        ledger
            .calls()
            .iter()
            .any(|(kind, id)| *id == quiet.event_id && *kind != "run")
    );
    assert_ledger_order(&ledger, &hot);
    for e in &hot {
        assert_eq!(store.outcomes(e.event_id), vec![DeliveryOutcome::Accepted]);
    }
    assert_eq!(
        store.load_cursor("relay").await.unwrap(),
        Some(quiet.position)
    );
}

#[tokio::test]
async fn without_bulk_or_without_the_capability_a_hot_account_posts_one_by_one() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let hot: Vec<_> = (0..20).map(|i| store.add(&payout("hot", 1 + i))).collect();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.accepted, 20);
    assert!(ledger.0.lock().unwrap().runs.is_empty());
    assert_ledger_order(&ledger, &hot);
}

#[tokio::test]
async fn a_refusal_inside_a_run_sends_the_run_one_by_one_through_the_refused_event() {
    let (store, ledger) = (MemoryStore::default(), ledger_with_runs());
    let events: Vec<_> = (0..10).map(|i| store.add(&payout("hot", 1 + i))).collect();
    // The ledger refuses event 4 each time it is evaluated.
    ledger.script(
        events[4].event_id,
        vec![rejected("INSUFFICIENT_FUND"), rejected("INSUFFICIENT_FUND")],
    );
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.accepted, summary.rejected), (9, 1), "{summary:?}");
    for (n, e) in events.iter().enumerate() {
        let expected = if n == 4 {
            DeliveryOutcome::Rejected
        } else {
            DeliveryOutcome::Accepted
        };
        assert_eq!(store.outcomes(e.event_id), vec![expected], "event {n}");
    }
    let calls = ledger.calls();
    let kinds = |e: &OutboxEvent| -> Vec<&str> {
        calls
            .iter()
            .filter(|(_, id)| *id == e.event_id)
            .map(|(k, _)| *k)
            .collect()
    };
    // Rolled back with the run, then sent one by one (as lone heads, in the
    // cross-account bulk: nothing of the run committed, so no replay is to be seen).
    for e in &events[..=4] {
        assert_eq!(kinds(e), vec!["run", "bulk"], "{}", e.sequence);
    }
    // The first run stopped at the refusal; after it, the account is back to runs.
    for e in &events[5..] {
        assert_eq!(kinds(e), vec!["run"], "{}", e.sequence);
    }
    assert_ledger_order(&ledger, &events);
    assert_eq!(ledger.0.lock().unwrap().runs, vec![10, 5]);
}

#[tokio::test]
async fn a_run_whose_answer_is_lost_is_sent_again_one_by_one_and_answers_as_replays() {
    let (store, ledger) = (MemoryStore::default(), ledger_with_runs());
    let events: Vec<_> = (0..6).map(|i| store.add(&payout("hot", 1 + i))).collect();
    ledger.0.lock().unwrap().run_answers_lost = 1;
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.accepted, summary.replayed), (0, 6), "{summary:?}");
    for e in &events {
        let outcomes = store.outcomes(e.event_id);
        assert_eq!(
            outcomes.last(),
            Some(&DeliveryOutcome::Replayed),
            "{}",
            e.sequence
        );
    }
    // Sent alone (a lone post answers with its hit flag, a bulk would not).
    for e in &events {
        let kinds: Vec<_> = ledger
            .calls()
            .into_iter()
            .filter(|(_, id)| *id == e.event_id)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kinds, vec!["run", "post"], "{}", e.sequence);
    }
    // The head's record shows the failed run; nothing was committed twice.
    assert_eq!(
        store.outcomes(events[0].event_id),
        vec![DeliveryOutcome::Failed, DeliveryOutcome::Replayed]
    );
    assert_eq!(ledger.0.lock().unwrap().by_key.len(), 6);
    assert_ledger_order(&ledger, &events);
}
