//! Unit tests of the dispatcher's logic with in-memory fakes (the real store and the
//! real HTTP ledger are exercised in the `tests` crate).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::domain::Account;
use crate::domain::{
    Amount, Asset, EventId, LedgerCommand, NewEvent, PostBody, PostCommand, Posting, RevertCommand,
};
use crate::relay::PollingRelay;
use crate::testing::{FakeLedger, MemoryStore};

fn payout(merchant: &str, amount: u64) -> NewEvent {
    NewEvent::new(
        Account::parse(&format!("merchants:{merchant}")).unwrap(),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: Account::parse("world").unwrap(),
                destination: Account::parse(&format!("merchants:{merchant}:available")).unwrap(),
                amount: Amount::new(amount),
                asset: Asset::parse("USD/2").unwrap(),
            }]),
            reference: None,
            metadata: Metadata::new(),
        }),
    )
}

fn config() -> DispatchConfig {
    DispatchConfig {
        backoff: Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(20),
        },
        poll_interval: Duration::from_millis(10),
        max_attempts: Some(50),
        ..DispatchConfig::default()
    }
}

async fn drain(store: &MemoryStore, ledger: &FakeLedger, config: DispatchConfig) -> Summary {
    let relay = PollingRelay::open(store.clone(), "relay", None)
        .await
        .unwrap();
    let dispatcher = Dispatcher::open(
        Arc::new(store.clone()),
        Box::new(relay),
        Arc::new(ledger.clone()),
        config,
    )
    .await
    .unwrap();
    let (_tx, rx) = watch::channel(false);
    tokio::time::timeout(Duration::from_secs(20), dispatcher.run(RunMode::Drain, rx))
        .await
        .expect("drain finished")
        .unwrap()
}

fn transient() -> Result<PostOutcome> {
    Err(Error::new(ErrorKind::Ledger, "503").transient(None))
}

#[tokio::test]
async fn transient_failure_parks_only_its_account_and_keeps_order() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let a: Vec<_> = (0..3).map(|i| store.add(&payout("a", 10 + i))).collect();
    let b: Vec<_> = (0..3).map(|i| store.add(&payout("b", 20 + i))).collect();
    ledger.script(a[0].event_id, vec![transient(), transient(), transient()]);
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.accepted, summary.retried), (6, 3));
    let calls = ledger.calls();
    let pos = |id: EventId| calls.iter().rposition(|(_, c)| *c == id).unwrap();
    // Per account: each event is sent only after the previous one finished.
    assert!(pos(a[0].event_id) < calls.iter().position(|(_, c)| *c == a[1].event_id).unwrap());
    assert!(pos(a[1].event_id) < pos(a[2].event_id));
    // B was not held back by A's failures.
    assert!(pos(b[2].event_id) < pos(a[1].event_id), "{calls:?}");
    assert_eq!(
        store
            .outcomes(a[0].event_id)
            .iter()
            .filter(|o| **o == DeliveryOutcome::Failed)
            .count(),
        3
    );
    assert_eq!(
        store.load_cursor("relay").await.unwrap(),
        Some(b[2].position)
    );
}

#[tokio::test]
async fn rejection_is_recorded_notified_and_the_account_continues() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let first = store.add(&payout("a", 1));
    let second = store.add(&payout("a", 2));
    ledger.script(
        first.event_id,
        vec![Ok(PostOutcome::Rejected {
            code: "INSUFFICIENT_FUND".into(),
            message: "no".into(),
        })],
    );
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.rejected, summary.accepted), (1, 1));
    assert_eq!(
        store.outcomes(first.event_id),
        vec![DeliveryOutcome::Rejected]
    );
    assert_eq!(
        store.outcomes(second.event_id),
        vec![DeliveryOutcome::Accepted]
    );
    let notices = ledger.0.lock().unwrap().notices.clone();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].0, format!("{}:rejected", first.event_id));
    assert_eq!(notices[0].1[OUTBOX_SEQUENCE_KEY], "1");
    assert_eq!(notices[0].1[OUTBOX_REJECTED_CODE_KEY], "INSUFFICIENT_FUND");
    let exceptions = store.0.lock().unwrap().exceptions.clone();
    assert_eq!(
        (exceptions[0].kind, exceptions[0].sequence),
        (ExceptionKind::Rejected, 1)
    );
}

#[tokio::test]
async fn mismatch_stops_the_account_and_the_cursor_waits_for_it() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let a1 = store.add(&payout("a", 1));
    let a2 = store.add(&payout("a", 2));
    let b1 = store.add(&payout("b", 1));
    ledger.script(
        a1.event_id,
        vec![Err(Error::new(
            ErrorKind::IdempotencyMismatch,
            "invalid idempotency hash",
        ))],
    );
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.stopped, vec![a1.account.clone()]);
    assert_eq!(summary.accepted, 1);
    assert!(
        !ledger.calls().iter().any(|(_, id)| *id == a2.event_id),
        "a stopped account kept sending"
    );
    assert_eq!(store.outcomes(b1.event_id), vec![DeliveryOutcome::Accepted]);
    // The cursor never passes the stopped event, so a restart retries it.
    assert_eq!(store.load_cursor("relay").await.unwrap(), None);
    let exceptions = store.0.lock().unwrap().exceptions.clone();
    assert_eq!(exceptions[0].kind, ExceptionKind::IdempotencyMismatch);
}

#[tokio::test]
async fn after_a_crash_the_uncertain_window_is_resent_alone_and_seen_as_replay() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let events: Vec<_> = (0..4)
        .map(|i| store.add(&payout(&i.to_string(), 100)))
        .collect();
    // A previous run read all four, the ledger accepted the first two, then it died
    // before recording anything or moving the cursor.
    store
        .save_cursor("relay@attempted", events[3].position)
        .await
        .unwrap();
    for e in &events[..2] {
        let (_, body) = e.payload.split().unwrap();
        ledger.answer("post", e.event_id, body).unwrap();
    }
    let before = ledger.calls().len();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.replayed, summary.accepted), (2, 2));
    let calls = &ledger.calls()[before..];
    assert!(
        calls.iter().all(|(kind, _)| *kind == "post"),
        "uncertain events went in a bulk: {calls:?}"
    );
    assert_eq!(
        store.outcomes(events[0].event_id),
        vec![DeliveryOutcome::Replayed]
    );
    assert_eq!(
        store.outcomes(events[3].event_id),
        vec![DeliveryOutcome::Accepted]
    );
    // A second restart finds every event terminal and sends nothing.
    store.save_cursor("relay", Position::Row(0)).await.unwrap();
    let calls_before = ledger.calls().len();
    let again = drain(&store, &ledger, config()).await;
    assert_eq!(
        (again.already_done, ledger.calls().len()),
        (4, calls_before)
    );
}

#[tokio::test]
async fn steady_state_uses_bulk_and_reversal_reverts_its_target() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let payouts: Vec<_> = (0..5)
        .map(|i| store.add(&payout(&i.to_string(), 100)))
        .collect();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.accepted, 5);
    assert!(ledger.calls().iter().all(|(kind, _)| *kind == "bulk"));
    let reversal = store.add(&NewEvent::new(
        payouts[0].account.clone(),
        LedgerCommand::Revert(RevertCommand {
            event_id: payouts[0].event_id,
            metadata: Metadata::from([("event_type".to_owned(), "payout.reversed".to_owned())]),
        }),
    ));
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.accepted, 1);
    let reverts = ledger.0.lock().unwrap().reverts.clone();
    assert_eq!(reverts.len(), 1);
    assert_eq!((reverts[0].0, reverts[0].1), (reversal.event_id, 1));
    assert_eq!(
        reverts[0].2[OUTBOX_EVENT_ID_KEY],
        reversal.event_id.to_string()
    );
    assert_eq!(reverts[0].2["event_type"], "payout.reversed");
}

#[tokio::test]
async fn shutdown_stops_a_daemon_cleanly() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let e = store.add(&payout("a", 1));
    let relay = PollingRelay::open(store.clone(), "relay", None)
        .await
        .unwrap();
    let dispatcher = Dispatcher::open(
        Arc::new(store.clone()),
        Box::new(relay),
        Arc::new(ledger.clone()),
        config(),
    )
    .await
    .unwrap();
    let (tx, rx) = watch::channel(false);
    let run = tokio::spawn(dispatcher.run(RunMode::Daemon, rx));
    tokio::time::timeout(Duration::from_secs(10), async {
        while store.outcomes(e.event_id).is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("event delivered");
    tx.send(true).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("stopped")
        .unwrap()
        .unwrap();
    assert_eq!(summary.accepted, 1);
    assert_eq!(store.load_cursor("relay").await.unwrap(), Some(e.position));
}
