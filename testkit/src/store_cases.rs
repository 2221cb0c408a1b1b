//! The store suite: what every `Store` + enqueue + default relay must guarantee.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use outbox_core::store::attempted_cursor;
use outbox_core::{
    DeliveryOutcome, DeliveryRecord, DispatchConfig, Dispatcher, ErrorKind, EventId, ExceptionKind,
    LedgerCommand, Metadata, NewEvent, NewException, OutboxEvent, Position, PostBody, Relay,
    RevertCommand, RunMode, Store, Summary,
};
use tokio::sync::watch;

use crate::accepting_ledger::AcceptingLedger;
use crate::fixtures::{account, payout};
use crate::harness::StoreHarness;
use crate::tamper::{self, StoreTamper};

pub use crate::exception_cases::*;

/// Reads everything the relay has to give right now.
async fn drain(relay: &mut dyn Relay) -> Vec<OutboxEvent> {
    let mut all = Vec::new();
    loop {
        let batch = relay.next_batch(100).await.expect("relay batch");
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

fn ids(events: &[OutboxEvent]) -> Vec<EventId> {
    events.iter().map(|e| e.event_id).collect()
}

pub async fn row_visible_only_after_commit<H: StoreHarness>(h: &H) {
    let store = h.store();
    let mut relay = h.relay(&store, "visibility").await;
    let mut tx = h.begin().await;
    let enqueued = h
        .enqueue(&mut tx, &payout("1", 100))
        .await
        .expect("enqueue");
    assert!(
        drain(relay.as_mut()).await.is_empty(),
        "an uncommitted row was visible to the relay"
    );
    h.commit(tx).await.expect("commit");
    let seen = drain(relay.as_mut()).await;
    assert_eq!(ids(&seen), vec![enqueued.event_id]);
    assert_eq!(seen[0].sequence, 1);
}

pub async fn rollback_leaves_no_row_and_no_gap<H: StoreHarness>(h: &H) {
    let store = h.store();
    let mut tx = h.begin().await;
    let rolled_back = h
        .enqueue(&mut tx, &payout("2", 100))
        .await
        .expect("enqueue");
    assert_eq!(rolled_back.sequence, 1);
    h.rollback(tx).await.expect("rollback");
    let kept = h
        .enqueue_committed(vec![payout("2", 200)])
        .await
        .expect("enqueue committed");
    assert_eq!(
        kept[0].sequence, 1,
        "a rolled-back enqueue left a sequence gap"
    );
    let mut relay = h.relay(&store, "rollback").await;
    let seen = drain(relay.as_mut()).await;
    assert_eq!(
        ids(&seen),
        vec![kept[0].event_id],
        "a rolled-back row reached the relay"
    );
}

pub async fn concurrent_writers_get_gapless_unique_sequences<H: StoreHarness>(h: &H) {
    const WRITERS: usize = 8;
    const PER_WRITER: usize = 125;
    const ACCOUNTS: usize = 10;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            let mut sequences = Vec::new();
            for i in 0..PER_WRITER {
                let merchant = ((writer * PER_WRITER + i) % ACCOUNTS).to_string();
                let stored = h
                    .enqueue_committed(vec![payout(&merchant, 1 + i as u64)])
                    .await;
                let stored = stored.expect("concurrent enqueue");
                sequences.push((stored[0].account.to_string(), stored[0].sequence));
            }
            sequences
        }));
    }
    let mut per_account: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for task in tasks {
        for (acct, seq) in task.await.expect("writer task") {
            per_account.entry(acct).or_default().push(seq);
        }
    }
    let store = h.store();
    let mut relay = h.relay(&store, "concurrency").await;
    let seen = drain(relay.as_mut()).await;
    assert_eq!(seen.len(), WRITERS * PER_WRITER);
    let mut seen_per_account: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &seen {
        seen_per_account
            .entry(e.account.to_string())
            .or_default()
            .push(e.sequence);
    }
    assert_eq!(seen_per_account.len(), ACCOUNTS);
    for (acct, mut sequences) in per_account {
        sequences.sort_unstable();
        let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
        assert_eq!(
            sequences, expected,
            "sequences of {acct} are not gapless and unique"
        );
        // Commit order per account equals sequence order.
        assert_eq!(
            seen_per_account[&acct], expected,
            "relay order of {acct} differs from sequence order"
        );
    }
}

pub async fn outbox_rows_and_deliveries_refuse_update_and_delete<H: StoreHarness>(h: &H) {
    let store = h.store();
    let stored = h
        .enqueue_committed(vec![payout("3", 100)])
        .await
        .expect("enqueue");
    store
        .append_deliveries(&[now_delivery(
            stored[0].event_id,
            1,
            DeliveryOutcome::Accepted,
            Some(1),
        )])
        .await
        .expect("delivery");
    for (i, tamper) in StoreTamper::OUTBOX.into_iter().enumerate() {
        let answer = h.tamper(tamper).await;
        // Only the first may be unsupported: a harness tries every tamper or none.
        if i == 0
            && tamper::skipped(
                "outbox_rows_and_deliveries_refuse_update_and_delete",
                &answer,
            )
        {
            return;
        }
        let Err(err) = answer else {
            panic!("{tamper:?} was not refused: {answer:?}");
        };
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{tamper:?}: {err}");
    }
    let mut relay = h.relay(&store, "immutability").await;
    let seen = drain(relay.as_mut()).await;
    assert_eq!(seen, stored, "the outbox row changed");
    let deliveries = store
        .deliveries(stored[0].event_id)
        .await
        .expect("deliveries");
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].outcome, DeliveryOutcome::Accepted);
}

pub async fn payload_bytes_round_trip_exactly<H: StoreHarness>(h: &H) {
    let mut event = payout("4", 48_500_000);
    if let LedgerCommand::Post(post) = &mut event.command {
        post.reference = Some("payout:settlement-2026-10-07:4471".into());
        post.metadata = Metadata::from([
            (
                "note".into(),
                "Zahlung für Händler — \"quoted\" <tag> & \u{2028} 💸".into(),
            ),
            (
                "payout_id".into(),
                "payout:settlement-2026-10-07:4471".into(),
            ),
        ]);
    }
    let stored = h
        .enqueue_committed(vec![event.clone()])
        .await
        .expect("enqueue");
    let store = h.store();
    let mut relay = h.relay(&store, "payload").await;
    let seen = drain(relay.as_mut()).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].payload.as_bytes(),
        stored[0].payload.as_bytes(),
        "stored bytes differ from enqueued bytes"
    );
    let decoded = seen[0].payload.command().expect("decode");
    let LedgerCommand::Post(post) = decoded else {
        panic!("not a post")
    };
    assert_eq!(
        post.metadata["note"],
        "Zahlung für Händler — \"quoted\" <tag> & \u{2028} 💸"
    );
    assert_eq!(post.metadata["outbox_sequence"], "1");
    assert_eq!(
        post.metadata["outbox_event_id"],
        stored[0].event_id.to_string()
    );
    // Encoding is deterministic: the same event, id and sequence give the same bytes.
    let expected = event
        .with_event_id(stored[0].event_id)
        .encode(1)
        .map(|(_, p)| p)
        .expect("encode");
    assert_eq!(seen[0].payload.as_bytes(), expected.as_bytes());
    assert!(
        matches!(post.body, PostBody::Postings(ref p) if p[0].amount.minor_units() == 48_500_000)
    );
}

pub async fn cursor_survives_reopening<H: StoreHarness>(h: &H) {
    let store = h.store();
    let stored = h
        .enqueue_committed(vec![payout("5", 1), payout("5", 2), payout("5", 3)])
        .await
        .expect("enqueue");
    {
        let mut relay = h.relay(&store, "durable").await;
        let batch = relay.next_batch(2).await.expect("batch");
        assert_eq!(ids(&batch), ids(&stored[..2]));
        relay
            .acknowledge(batch[1].position)
            .await
            .expect("acknowledge");
    }
    let reopened = h.reopen().await;
    assert_eq!(
        reopened.load_cursor("durable").await.expect("cursor"),
        Some(stored[1].position)
    );
    let mut relay = h.relay(&reopened, "durable").await;
    assert_eq!(relay.acknowledged(), Some(stored[1].position));
    assert_eq!(ids(&drain(relay.as_mut()).await), ids(&stored[2..]));
    // Another relay name has its own cursor.
    let mut other = h.relay(&reopened, "other").await;
    assert_eq!(drain(other.as_mut()).await.len(), 3);
}

pub async fn late_commit_is_still_delivered<H: StoreHarness>(h: &H) {
    let store = h.store();
    let mut relay = h.relay(&store, "late").await;
    let mut tx_a = h.begin().await;
    let a = h
        .enqueue(&mut tx_a, &payout("6", 1))
        .await
        .expect("enqueue A");
    let writer = {
        let shared = h.clone();
        tokio::spawn(async move { shared.enqueue_committed(vec![payout("7", 2)]).await })
    };
    let mut delivered = Vec::new();
    // Where writers can overlap, B commits while A is still open and gets a higher position.
    if store.capabilities().concurrent_writers {
        let finished = tokio::time::timeout(Duration::from_secs(30), async {
            while !writer.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(finished.is_ok(), "B did not commit while A was open");
        delivered.extend(drain(relay.as_mut()).await);
    }
    h.commit(tx_a).await.expect("commit A");
    let b = writer.await.expect("writer").expect("enqueue B");
    delivered.extend(drain(relay.as_mut()).await);
    let got: BTreeSet<EventId> = ids(&delivered).into_iter().collect();
    assert_eq!(
        got,
        BTreeSet::from([a.event_id, b[0].event_id]),
        "an event was skipped or repeated"
    );
    assert_eq!(delivered.len(), 2);
}

pub async fn invalid_event_names_field_and_keeps_transaction_usable<H: StoreHarness>(h: &H) {
    let mut tx = h.begin().await;
    let mut bad = payout("8", 100);
    if let LedgerCommand::Post(post) = &mut bad.command {
        post.body = PostBody::Postings(Vec::new());
    }
    let err = h
        .enqueue(&mut tx, &bad)
        .await
        .expect_err("empty postings accepted");
    assert_eq!(err.field(), Some("postings"), "{err}");
    let mut reserved = payout("8", 100);
    if let LedgerCommand::Post(post) = &mut reserved.command {
        post.metadata
            .insert("outbox_event_id".into(), "forged".into());
    }
    let err = h
        .enqueue(&mut tx, &reserved)
        .await
        .expect_err("reserved key accepted");
    assert_eq!(err.field(), Some("metadata.outbox_event_id"), "{err}");
    let good = h
        .enqueue(&mut tx, &payout("8", 100))
        .await
        .expect("the transaction is no longer usable");
    assert_eq!(good.sequence, 1, "a refused event consumed a sequence");
    let duplicate = payout("8", 5).with_event_id(good.event_id);
    let err = h
        .enqueue(&mut tx, &duplicate)
        .await
        .expect_err("duplicate event id accepted");
    assert_eq!(err.field(), Some("event_id"), "{err}");
    let second = h
        .enqueue(&mut tx, &payout("8", 100))
        .await
        .expect("usable after duplicate");
    assert_eq!(second.sequence, 2);
    h.commit(tx).await.expect("commit");
    let store = h.store();
    let mut relay = h.relay(&store, "invalid").await;
    assert_eq!(
        ids(&drain(relay.as_mut()).await),
        vec![good.event_id, second.event_id]
    );
}

pub async fn deliveries_are_recorded_in_order<H: StoreHarness>(h: &H) {
    let store = h.store();
    let id = EventId::new();
    let mut failed = now_delivery(id, 1, DeliveryOutcome::Failed, None);
    failed.error_code = Some("INTERNAL".into());
    failed.detail = Some("503 from ledger".into());
    let replayed = now_delivery(id, 2, DeliveryOutcome::Replayed, Some(42));
    store
        .append_deliveries(&[failed.clone(), replayed.clone()])
        .await
        .expect("append");
    let got = store.deliveries(id).await.expect("read");
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].attempt, got[0].outcome, got[0].error_code.as_deref()),
        (1, DeliveryOutcome::Failed, Some("INTERNAL"))
    );
    assert_eq!(got[0].detail.as_deref(), Some("503 from ledger"));
    assert_eq!(
        (got[1].attempt, got[1].outcome, got[1].ledger_tx_id),
        (2, DeliveryOutcome::Replayed, Some(42))
    );
    assert_eq!(got[1].at.timestamp_micros(), replayed.at.timestamp_micros());
    assert!(
        store
            .deliveries(EventId::new())
            .await
            .expect("read")
            .is_empty()
    );
}

pub async fn exceptions_are_recorded_once<H: StoreHarness>(h: &H) {
    let store = h.store();
    let exception = NewException::new(
        "relay",
        ExceptionKind::Rejected,
        account("merchants:9"),
        4,
        "INSUFFICIENT_FUND",
    );
    assert!(store.raise_exception(&exception).await.expect("raise"));
    assert!(
        !store
            .raise_exception(&exception)
            .await
            .expect("raise again")
    );
    let other = NewException {
        sequence: 5,
        ..exception.clone()
    };
    assert!(store.raise_exception(&other).await.expect("raise other"));
    let all = store.exceptions().await.expect("list");
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].kind, all[0].account.as_str(), all[0].sequence),
        (ExceptionKind::Rejected, "merchants:9", 4)
    );
    assert_eq!(all[0].detail, "INSUFFICIENT_FUND");
}

pub async fn lag_reports_pending_and_age<H: StoreHarness>(h: &H) {
    let store = h.store();
    assert_eq!(store.lag("lagging").await.expect("lag").pending, 0);
    let stored = h
        .enqueue_committed(vec![payout("10", 1), payout("10", 2)])
        .await
        .expect("enqueue");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let lag = store.lag("lagging").await.expect("lag");
    assert_eq!(lag.pending, 2);
    assert!(
        lag.oldest_pending_age.expect("age") >= Duration::from_millis(20),
        "{lag:?}"
    );
    let mut relay = h.relay(&store, "lagging").await;
    let batch = relay.next_batch(1).await.expect("batch");
    relay.acknowledge(batch[0].position).await.expect("ack");
    assert_eq!(store.lag("lagging").await.expect("lag").pending, 1);
    relay.acknowledge(stored[1].position).await.expect("ack");
    let lag = store.lag("lagging").await.expect("lag");
    assert_eq!((lag.pending, lag.oldest_pending_age), (0, None));
}

pub async fn relay_wakes_up_on_enqueue<H: StoreHarness>(h: &H) {
    let store = h.store();
    let mut relay = h.relay(&store, "wakeup").await;
    assert!(drain(relay.as_mut()).await.is_empty());
    let writer = {
        let shared = h.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            shared.enqueue_committed(vec![payout("11", 1)]).await
        })
    };
    // With an hour-long interval, only a wake-up can bring the event within the bound.
    let woke = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            relay.wait(Duration::from_secs(3600)).await;
            let batch = relay.next_batch(10).await.expect("batch");
            if !batch.is_empty() {
                return batch;
            }
        }
    })
    .await;
    let stored = writer.await.expect("writer").expect("enqueue");
    let batch = woke.expect("the relay was not woken by the enqueue");
    assert_eq!(ids(&batch), ids(&stored));
}

pub async fn works_through_dyn_store<H: StoreHarness>(h: &H) {
    let store = h.dyn_store();
    let stored = h
        .enqueue_committed(vec![payout("12", 1), payout("12", 2)])
        .await
        .expect("enqueue");
    let read = store.read_committed(None, 10).await.expect("read");
    assert_eq!(ids(&read), ids(&stored));
    let after_first = store
        .read_committed(Some(read[0].position), 10)
        .await
        .expect("read after");
    assert_eq!(ids(&after_first), ids(&stored[1..]));
    store
        .save_cursor("dyn", read[0].position)
        .await
        .expect("save");
    assert_eq!(
        store.load_cursor("dyn").await.expect("load"),
        Some(read[0].position)
    );
    assert_eq!(store.lag("dyn").await.expect("lag").pending, 1);
}

/// A delivery record stamped now, truncated to the microseconds stores keep.
/// Two writers of one cursor (a stale instance, a rolling deploy) can never move it
/// back: a lower save leaves the higher position in place.
pub async fn cursor_never_moves_back<H: StoreHarness>(h: &H) {
    let store = h.store();
    let stored = h
        .enqueue_committed(vec![payout("6", 1), payout("6", 2), payout("6", 3)])
        .await
        .expect("enqueue");
    store
        .save_cursor("forward", stored[2].position)
        .await
        .expect("save");
    store
        .save_cursor("forward", stored[0].position)
        .await
        .expect("a lower save is not an error");
    assert_eq!(
        store.load_cursor("forward").await.expect("cursor"),
        Some(stored[2].position),
        "a lower save moved the cursor back"
    );
    // Through a relay, as a second instance that read less would acknowledge.
    let mut behind = h.relay(&store, "forward").await;
    behind
        .acknowledge(stored[1].position)
        .await
        .expect("acknowledge");
    assert_eq!(
        h.reopen()
            .await
            .load_cursor("forward")
            .await
            .expect("cursor"),
        Some(stored[2].position)
    );
}

/// The cursor rule holds for every kind of cursor name the relays use (a relay, a
/// fleet partition, the "@attempted" horizon of either, any odd text): a save moves a
/// cursor only forward, equal and lower saves succeed and change nothing, it is
/// durable across a reopen, and one name never moves another.
pub async fn cursors_of_every_name_move_forward_only<H: StoreHarness>(h: &H) {
    let store = h.store();
    let stored = h
        .enqueue_committed(vec![payout("15", 1), payout("15", 2), payout("15", 3)])
        .await
        .expect("enqueue");
    let p: Vec<Position> = stored.iter().map(|e| e.position).collect();
    let names = [
        "relay".to_owned(),
        "relay:g2:p7".to_owned(),
        attempted_cursor("relay"),
        attempted_cursor("relay:g2:p7"),
        "odd / name: ünïcode, spaces".to_owned(),
    ];
    for name in &names {
        store.save_cursor(name, p[1]).await.expect("first save");
    }
    for name in &names {
        store.save_cursor(name, p[0]).await.expect("a lower save");
        store.save_cursor(name, p[1]).await.expect("an equal save");
        assert_eq!(
            store.load_cursor(name).await.expect("load"),
            Some(p[1]),
            "cursor {name:?} moved on a lower or equal save"
        );
    }
    store.save_cursor(&names[0], p[2]).await.expect("save");
    for name in &names[1..] {
        assert_eq!(
            store.load_cursor(name).await.expect("load"),
            Some(p[1]),
            "a save under {:?} moved {name:?}",
            names[0]
        );
    }
    let reopened = h.reopen().await;
    assert_eq!(
        reopened.load_cursor(&names[0]).await.expect("load"),
        Some(p[2])
    );
    for name in &names[1..] {
        assert_eq!(reopened.load_cursor(name).await.expect("load"), Some(p[1]));
    }
    assert_eq!(
        reopened.load_cursor("relay:g2:p8").await.expect("load"),
        None,
        "a name never saved has no cursor"
    );
}

/// Runs the real dispatcher on relay `name` until everything is terminal.
async fn drain_dispatcher<H: StoreHarness>(
    h: &H,
    store: &H::Store,
    name: &str,
    ledger: Arc<AcceptingLedger>,
) -> Summary {
    let relay = h.relay(store, name).await;
    let config = DispatchConfig {
        bulk: false,
        poll_interval: Duration::from_millis(50),
        ..DispatchConfig::default()
    };
    let dispatcher = Dispatcher::open(Arc::new(store.clone()), relay, ledger, config)
        .await
        .expect("open the dispatcher");
    let (_stop, stopped) = watch::channel(false);
    tokio::time::timeout(
        Duration::from_secs(60),
        dispatcher.run(RunMode::Drain, stopped),
    )
    .await
    .expect("the dispatcher drains within a minute")
    .expect("the dispatcher run")
}

/// The dispatcher's "@attempted" horizon is a cursor of the store like the relay's
/// own: saved before anything is sent, only forward, and after a crash it bounds the
/// uncertain window whose events are looked up in the delivery records, not re-sent.
pub async fn attempted_horizon_is_a_cursor_that_bounds_the_uncertain_window<H: StoreHarness>(
    h: &H,
) {
    let store = h.store();
    let stored = h
        .enqueue_committed(vec![payout("16", 1), payout("16", 2), payout("17", 1)])
        .await
        .expect("enqueue");
    let ledger = Arc::new(AcceptingLedger::default());
    let first = drain_dispatcher(h, &store, "horizon", Arc::clone(&ledger)).await;
    assert_eq!(first.accepted, 3, "{first:?}");
    let horizon = attempted_cursor("horizon");
    assert_eq!(
        store.load_cursor("horizon").await.expect("cursor"),
        Some(stored[2].position)
    );
    assert_eq!(
        store.load_cursor(&horizon).await.expect("horizon"),
        Some(stored[2].position),
        "the horizon covers everything read for sending"
    );
    store
        .save_cursor(&horizon, stored[0].position)
        .await
        .expect("a lower save");
    assert_eq!(
        h.reopen()
            .await
            .load_cursor(&horizon)
            .await
            .expect("horizon"),
        Some(stored[2].position),
        "the horizon moved back"
    );

    // A run that crashed after reading two events for sending, before its cursor
    // moved: its horizon is ahead, its cursor missing.
    store
        .save_cursor(&attempted_cursor("crashed"), stored[1].position)
        .await
        .expect("save the horizon");
    assert_eq!(store.load_cursor("crashed").await.expect("cursor"), None);
    let resumed = drain_dispatcher(h, &store, "crashed", Arc::clone(&ledger)).await;
    assert_eq!(
        (resumed.already_done, resumed.accepted, resumed.replayed),
        (2, 0, 1),
        "the two events in the window have terminal records and are not re-sent; \
         the one after it is sent (a replay here): {resumed:?}"
    );
    // Accounts are sent in parallel: compare the posts as a set with repeats.
    let sorted = |mut keys: Vec<String>| {
        keys.sort();
        keys
    };
    let mut expected: Vec<String> = stored.iter().map(|e| e.event_id.to_string()).collect();
    expected.push(stored[2].event_id.to_string());
    let posted = ledger.posts().iter().map(|k| k.to_string()).collect();
    assert_eq!(sorted(posted), sorted(expected), "posts to the ledger");
    assert_eq!(
        store.load_cursor("crashed").await.expect("cursor"),
        Some(stored[2].position)
    );
}

/// A position survives the store: saved, it loads back equal (same bytes, rendered by
/// the store again) after a reopen; restored from its bytes alone it reads and saves
/// as the original; a position the store never made is refused, not misread.
pub async fn positions_round_trip_through_save_and_load<H: StoreHarness>(h: &H) {
    let store = h.store();
    let stored = h
        .enqueue_committed(vec![payout("18", 1), payout("18", 2)])
        .await
        .expect("enqueue");
    let read = store.read_committed(None, 10).await.expect("read");
    assert_eq!(
        read.iter().map(|e| e.position).collect::<Vec<_>>(),
        stored.iter().map(|e| e.position).collect::<Vec<_>>(),
        "enqueue and the reader give one event the same position"
    );
    let saved = read[0].position;
    store.save_cursor("round-trip", saved).await.expect("save");
    let reopened = h.reopen().await;
    let loaded = reopened
        .load_cursor("round-trip")
        .await
        .expect("load")
        .expect("a saved cursor");
    assert_eq!(loaded, saved);
    assert_eq!(loaded.as_bytes(), saved.as_bytes());
    assert_eq!(loaded.to_string(), saved.to_string());

    let restored = Position::from_bytes(saved.as_bytes()).expect("restore");
    assert_eq!(restored, saved);
    let after = reopened
        .read_committed(Some(restored), 10)
        .await
        .expect("read after a restored position");
    assert_eq!(ids(&after), ids(&stored[1..]));
    reopened
        .save_cursor("restored", restored)
        .await
        .expect("save a restored position");
    assert_eq!(
        reopened.load_cursor("restored").await.expect("load"),
        Some(saved)
    );
    let mut relay = h.relay(&reopened, "round-trip").await;
    assert_eq!(relay.acknowledged(), Some(saved));
    assert_eq!(ids(&drain(relay.as_mut()).await), ids(&stored[1..]));

    let foreign = Position::from_bytes(&[0xEE; Position::MAX_LEN]).expect("bytes");
    assert!(
        reopened.save_cursor("foreign", foreign).await.is_err(),
        "a position of another store was saved"
    );
    assert_eq!(reopened.load_cursor("foreign").await.expect("load"), None);
    assert!(
        reopened.read_committed(Some(foreign), 10).await.is_err(),
        "a position of another store was read after"
    );
}

/// Positions of one store order as its commits: strictly increasing in reading order,
/// the same from enqueue as from the reader, and a read after any of them returns
/// exactly the events that sort after it.
pub async fn positions_order_as_commits<H: StoreHarness>(h: &H) {
    let store = h.store();
    let mut stored = Vec::new();
    for batch in [
        vec![payout("19", 1)],
        vec![payout("20", 1)],
        vec![payout("19", 2), payout("21", 1)],
    ] {
        stored.extend(h.enqueue_committed(batch).await.expect("enqueue"));
    }
    let read = store.read_committed(None, 10).await.expect("read");
    assert_eq!(ids(&read), ids(&stored), "commit order");
    for pair in read.windows(2) {
        assert!(
            pair[0].position < pair[1].position,
            "{} then {}",
            pair[0].position,
            pair[1].position
        );
    }
    for (i, event) in read.iter().enumerate() {
        let after = store
            .read_committed(Some(event.position), 10)
            .await
            .expect("read after");
        assert_eq!(ids(&after), ids(&read[i + 1..]), "after {}", event.position);
        assert!(after.iter().all(|e| e.position > event.position));
    }
}

/// After a restart the relay looks up a whole batch of events at once.
pub async fn delivery_states_answer_a_batch<H: StoreHarness>(h: &H) {
    let store = h.store();
    assert!(!store.has_deliveries().await.expect("has_deliveries"));
    let (accepted, rejected, failing, unknown) = (
        EventId::new(),
        EventId::new(),
        EventId::new(),
        EventId::new(),
    );
    let mut refused = now_delivery(rejected, 1, DeliveryOutcome::Rejected, None);
    refused.error_code = Some("INSUFFICIENT_FUND".into());
    store
        .append_deliveries(&[
            now_delivery(accepted, 1, DeliveryOutcome::Failed, None),
            now_delivery(failing, 1, DeliveryOutcome::Failed, None),
            now_delivery(accepted, 2, DeliveryOutcome::Accepted, Some(7)),
            refused,
            now_delivery(failing, 2, DeliveryOutcome::Failed, None),
            now_delivery(accepted, 3, DeliveryOutcome::Replayed, Some(7)),
        ])
        .await
        .expect("append");
    assert!(store.has_deliveries().await.expect("has_deliveries"));
    let states = store
        .delivery_states(&[accepted, rejected, failing, unknown])
        .await
        .expect("states");
    assert_eq!(states.len(), 3, "{states:?}");
    let terminal = |id: &EventId| {
        states[id]
            .terminal
            .as_ref()
            .map(|r| (r.attempt, r.outcome, r.ledger_tx_id, r.error_code.clone()))
    };
    assert_eq!(states[&accepted].attempts, 3);
    assert_eq!(
        terminal(&accepted),
        Some((2, DeliveryOutcome::Accepted, Some(7), None)),
        "the first terminal record"
    );
    assert_eq!(states[&rejected].attempts, 1);
    assert_eq!(
        terminal(&rejected),
        Some((
            1,
            DeliveryOutcome::Rejected,
            None,
            Some("INSUFFICIENT_FUND".into())
        ))
    );
    assert_eq!(states[&failing].attempts, 2);
    assert_eq!(terminal(&failing), None);
    assert!(!states.contains_key(&unknown));
}

/// A revert names an event of the same account that the outbox already holds; any
/// other is refused at enqueue with the field named, and nothing is written.
pub async fn revert_target_must_be_known_and_of_the_same_account<H: StoreHarness>(h: &H) {
    let target = h
        .enqueue_committed(vec![payout("11", 500)])
        .await
        .expect("enqueue")
        .remove(0);
    let revert = |merchant: &str, of: EventId| {
        NewEvent::new(
            account(&format!("merchants:{merchant}")),
            LedgerCommand::Revert(RevertCommand {
                event_id: of,
                metadata: Metadata::new(),
            }),
        )
    };
    let mut tx = h.begin().await;
    let err = h
        .enqueue(&mut tx, &revert("11", EventId::new()))
        .await
        .expect_err("a revert of an unknown event was accepted");
    assert_eq!(err.field(), Some("revert"), "{err}");
    assert!(err.to_string().contains("not in the outbox"), "{err}");
    let err = h
        .enqueue(&mut tx, &revert("12", target.event_id))
        .await
        .expect_err("a revert of another account's event was accepted");
    assert_eq!(err.field(), Some("revert"), "{err}");
    assert!(err.to_string().contains("merchants:11"), "{err}");
    let ok = h
        .enqueue(&mut tx, &revert("11", target.event_id))
        .await
        .expect("a revert of the account's own event");
    assert_eq!(ok.sequence, 2, "a refused revert consumed a sequence");
    h.commit(tx).await.expect("commit");
}

fn now_delivery(
    event_id: EventId,
    attempt: u32,
    outcome: DeliveryOutcome,
    ledger_tx_id: Option<u64>,
) -> DeliveryRecord {
    let now = Utc::now().timestamp_micros();
    DeliveryRecord {
        event_id,
        attempt,
        outcome,
        ledger_tx_id,
        error_code: None,
        detail: None,
        at: DateTime::from_timestamp_micros(now).unwrap_or_default(),
    }
}
