//! Unit tests of the dispatcher's logic with in-memory fakes (the real store and the
//! real HTTP ledger are exercised in the `tests` crate).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::domain::{
    Account, Amount, Asset, EventId, LedgerCommand, Metadata, NewEvent, OUTBOX_EVENT_ID_KEY,
    OUTBOX_SEQUENCE_KEY, PostBody, PostCommand, Posting, RevertCommand,
};
use crate::exception::ExceptionKind;
use crate::relay::PollingRelay;
use crate::testing::{FakeLedger, MemoryStore};

pub(super) fn payout(merchant: &str, amount: u64) -> NewEvent {
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

pub(super) fn config() -> DispatchConfig {
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

pub(super) async fn drain(
    store: &MemoryStore,
    ledger: &FakeLedger,
    config: DispatchConfig,
) -> Summary {
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
    // A second restart (from an earlier cursor) finds every event terminal and sends nothing.
    store.0.lock().unwrap().cursors.remove("relay");
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

fn rejected() -> Result<PostOutcome> {
    Ok(PostOutcome::Rejected {
        code: "INSUFFICIENT_FUND".into(),
        message: "no".into(),
    })
}

fn posts_of(ledger: &FakeLedger, id: EventId) -> usize {
    ledger
        .calls()
        .iter()
        .filter(|(kind, c)| *c == id && *kind != "revert")
        .count()
}

/// A refusal is not idempotent in the ledger: re-posting it after a lost notice
/// answer would commit it once the account is funded. Only the notice is retried.
#[tokio::test]
async fn a_lost_notice_answer_retries_the_notice_never_the_payout() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let refused = store.add(&payout("a", 1));
    let next = store.add(&payout("a", 2));
    ledger.script(refused.event_id, vec![rejected()]);
    ledger.0.lock().unwrap().notice_answers_lost = 2;
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(
        posts_of(&ledger, refused.event_id),
        1,
        "the refused payout was posted again: {:?}",
        ledger.calls()
    );
    assert_eq!((summary.rejected, summary.accepted), (1, 1), "{summary:?}");
    assert_eq!(
        store.outcomes(refused.event_id),
        vec![DeliveryOutcome::Rejected]
    );
    let notices = ledger.0.lock().unwrap().notices.clone();
    assert_eq!(notices.len(), 3, "one notice and two retries of it");
    assert!(
        notices
            .iter()
            .all(|(key, m)| *key == format!("{}:rejected", refused.event_id) && m == &notices[0].1),
        "every retry is the same notice (a replay for the ledger): {notices:?}"
    );
    assert_eq!(
        store.outcomes(next.event_id),
        vec![DeliveryOutcome::Accepted]
    );
}

/// The refusal is durable in the store before anyone hears of it.
#[tokio::test]
async fn a_refusal_is_recorded_before_its_notice_is_sent() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let refused: Vec<_> = (0..5)
        .map(|i| store.add(&payout(&i.to_string(), 1)))
        .collect();
    for e in &refused {
        ledger.script(e.event_id, vec![rejected()]);
    }
    ledger.0.lock().unwrap().observed = Some(store.clone());
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.rejected, 5);
    let seen = ledger.0.lock().unwrap().notice_after_record.clone();
    assert_eq!(
        seen,
        vec![true; 5],
        "a notice went out before its Rejected record"
    );
}

/// After a crash an event without records may have been refused and announced: the
/// relay finds its notice on the ledger and does not post it again.
#[tokio::test]
async fn an_uncertain_event_with_a_notice_on_the_ledger_is_not_posted_again() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let refused = store.add(&payout("a", 1));
    let next = store.add(&payout("a", 2));
    store
        .save_cursor("relay@attempted", next.position)
        .await
        .unwrap();
    // The previous run's notice reached the ledger; its records did not reach the store.
    crate::dispatch::notice::notify_rejection(&ledger, &refused, "INSUFFICIENT_FUND")
        .await
        .unwrap();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(
        posts_of(&ledger, refused.event_id),
        0,
        "an announced refusal was posted again"
    );
    assert_eq!(summary.rejected, 1);
    let records = store.0.lock().unwrap().deliveries.clone();
    let first = records
        .iter()
        .find(|r| r.event_id == refused.event_id)
        .unwrap();
    assert_eq!(
        (first.outcome, first.error_code.as_deref()),
        (DeliveryOutcome::Rejected, Some("INSUFFICIENT_FUND"))
    );
    assert_eq!(
        store.outcomes(next.event_id),
        vec![DeliveryOutcome::Accepted]
    );
}

/// A refusal recorded just before a crash may not have been announced: after the
/// restart its notice is sent (a replay if it was), and the payout is not.
#[tokio::test]
async fn a_recorded_refusal_gets_its_notice_after_a_restart() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let refused = store.add(&payout("a", 1));
    store
        .save_cursor("relay@attempted", refused.position)
        .await
        .unwrap();
    let mut record = super::record(
        &refused,
        1,
        DeliveryOutcome::Rejected,
        None,
        Some("INSUFFICIENT_FUND".into()),
        None,
    );
    record.detail = Some("no".into());
    store.append_deliveries(&[record]).await.unwrap();
    drain(&store, &ledger, config()).await;
    assert_eq!(posts_of(&ledger, refused.event_id), 0);
    let notices = ledger.0.lock().unwrap().notices.clone();
    assert_eq!(
        notices.len(),
        1,
        "the notice was not sent after the restart"
    );
    assert_eq!(notices[0].1[OUTBOX_REJECTED_CODE_KEY], "INSUFFICIENT_FUND");
    assert_eq!(
        store.load_cursor("relay").await.unwrap(),
        Some(refused.position)
    );
}

/// A revert whose target has no outcome yet waits for it (parked), instead of
/// being refused for good.
#[tokio::test]
async fn a_revert_waits_for_its_target() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let target = store.add(&payout("a", 100));
    // Written before enqueue checked the account (data from an older version).
    let revert = store.add(&NewEvent::new(
        Account::parse("merchants:b").unwrap(),
        LedgerCommand::Revert(RevertCommand {
            event_id: target.event_id,
            metadata: Metadata::new(),
        }),
    ));
    ledger.script(target.event_id, vec![transient(), transient(), transient()]);
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(
        store.outcomes(revert.event_id).last(),
        Some(&DeliveryOutcome::Accepted),
        "{summary:?}"
    );
    let reverts = ledger.0.lock().unwrap().reverts.clone();
    assert_eq!(reverts.len(), 1);
    assert_eq!(reverts[0].0, revert.event_id);
    assert_eq!(summary.rejected, 0);
}

/// A revert of a refused target is refused too: there is nothing to revert.
#[tokio::test]
async fn a_revert_of_a_refused_target_is_refused() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let target = store.add(&payout("a", 100));
    let revert = store.add(&NewEvent::new(
        target.account.clone(),
        LedgerCommand::Revert(RevertCommand {
            event_id: target.event_id,
            metadata: Metadata::new(),
        }),
    ));
    ledger.script(target.event_id, vec![rejected()]);
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!(summary.rejected, 2);
    let records = store.0.lock().unwrap().deliveries.clone();
    let refusal = records
        .iter()
        .find(|r| r.event_id == revert.event_id)
        .unwrap();
    assert_eq!(refusal.error_code.as_deref(), Some("REVERT_TARGET_MISSING"));
    assert!(ledger.0.lock().unwrap().reverts.is_empty());
}

/// After a restart the uncertain window is looked up a batch at a time.
#[tokio::test]
async fn the_uncertain_window_is_looked_up_in_batches() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let events: Vec<_> = (0..1200)
        .map(|i| store.add(&payout(&(i % 50).to_string(), 1)))
        .collect();
    store
        .save_cursor("relay@attempted", events[1199].position)
        .await
        .unwrap();
    drain(&store, &ledger, config()).await;
    let (single, batch) = {
        let s = store.0.lock().unwrap();
        (s.single_lookups, s.batch_lookups)
    };
    assert_eq!(single, 0, "events were looked up one by one");
    assert!(batch <= 3, "{batch} batch lookups for 1,200 events");
}

/// A relay name with no cursor on an outbox that already has records would re-send
/// everything: it refuses to start.
#[tokio::test]
async fn a_relay_without_a_cursor_on_a_delivered_outbox_refuses_to_start() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    store.add(&payout("a", 1));
    drain(&store, &ledger, config()).await;
    let relay = PollingRelay::open(store.clone(), "another-name", None)
        .await
        .unwrap();
    let err = Dispatcher::open(
        Arc::new(store.clone()),
        Box::new(relay),
        Arc::new(ledger.clone()),
        config(),
    )
    .await
    .expect_err("a fresh relay name started on a delivered outbox");
    assert_eq!(err.kind(), &ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("another-name"), "{err}");
}

/// Found by the dispatcher property (`dispatch::properties`): a restart whose
/// uncertain window was all recorded before the crash sends nothing, and must still
/// move the cursor over it (it stayed where the crash left it).
#[tokio::test]
async fn a_restart_moves_the_cursor_over_events_already_terminal() {
    let (store, ledger) = (MemoryStore::default(), FakeLedger::default());
    let events: Vec<_> = (0..3)
        .map(|i| store.add(&payout(&i.to_string(), 100)))
        .collect();
    drain(&store, &ledger, config()).await;
    // The previous run recorded every outcome, then crashed before saving its cursor.
    store.0.lock().unwrap().cursors.remove("relay");
    let calls = ledger.calls().len();
    let summary = drain(&store, &ledger, config()).await;
    assert_eq!((summary.already_done, ledger.calls().len()), (3, calls));
    assert_eq!(
        store.load_cursor("relay").await.unwrap(),
        Some(events[2].position),
        "the cursor stayed behind events that were all terminal"
    );
}
