//! The reconciliation store suite: what every store's answers to the reconciliation
//! checks' reads (`InboxSequences`, `CompletenessStore`, `PostedHistory`) must be.
//!
//! Inbox rows and retention permits are written with raw SQL through the harness, as
//! a consumer's inbox or a retention pass would have left them (a repeated sequence
//! is exactly what the inbox engine never writes, so raw SQL is the only way in).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use outbox_core::reconcile::balances::{PostedEvent, PostedHistory};
use outbox_core::reconcile::completeness::{
    CompletenessCheckpoint, CompletenessStore, EventCheck, SeenTransaction,
};
use outbox_core::reconcile::sequences::{AppliedMarker, ConsumerGap, InboxSequences, MarkerKey};
use outbox_core::{
    DeliveryOutcome, DeliveryRecord, DeliveryState, ErrorKind, EventId, HeldGap, MessageKind,
    OutboxEvent, Position, Store,
};

use crate::fixtures::{account, payout};
use crate::harness::ReconcileHarness;

/// A fixed, whole-second instant, so stored timestamps compare exactly.
fn base_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-10-07T12:00:00Z")
        .expect("fixture time")
        .with_timezone(&Utc)
}

async fn raw<H: ReconcileHarness>(h: &H, sql: String) {
    h.execute_raw(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Writes one processed marker, as a consumer's inbox transaction would.
async fn insert_marker<H: ReconcileHarness>(h: &H, marker: &AppliedMarker) {
    raw(
        h,
        format!(
            "INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
             VALUES ('{}', '{}', '{}', {}, '{}', {})",
            marker.consumer,
            marker.instruction_id,
            marker.account.as_str(),
            marker.sequence,
            marker.kind.as_str(),
            h.time_literal(marker.applied_at)
        ),
    )
    .await;
}

fn marker(
    consumer: &str,
    account_name: &str,
    sequence: u64,
    instruction_id: &str,
    kind: MessageKind,
    applied_at: DateTime<Utc>,
) -> AppliedMarker {
    AppliedMarker {
        consumer: consumer.to_owned(),
        account: account(account_name),
        sequence,
        instruction_id: instruction_id.to_owned(),
        kind,
        applied_at,
    }
}

fn delivery(
    event_id: EventId,
    attempt: u32,
    outcome: DeliveryOutcome,
    ledger_tx_id: Option<u64>,
) -> DeliveryRecord {
    let refused = matches!(outcome, DeliveryOutcome::Rejected | DeliveryOutcome::Failed);
    DeliveryRecord {
        event_id,
        attempt,
        outcome,
        ledger_tx_id,
        error_code: refused.then(|| "INSUFFICIENT_FUND".to_owned()),
        detail: refused.then(|| "refused by the test".to_owned()),
        at: Utc::now(),
    }
}

/// An event's delivery attempts, its terminal outcome and ledger transaction, and
/// the transactions seen for it: what the completeness check reads of it.
type CheckSummary = (u32, Option<(DeliveryOutcome, Option<u64>)>, Vec<u64>);

fn seen(ledger_tx: u64, event_id: &str, reference: Option<&str>) -> SeenTransaction {
    SeenTransaction {
        ledger_tx,
        event_id: event_id.to_owned(),
        reference: reference.map(str::to_owned),
    }
}

/// Enqueues one event per call, each in its own committed transaction.
async fn enqueue_one<H: ReconcileHarness>(h: &H, merchant: &str) -> OutboxEvent {
    let mut stored = h
        .enqueue_committed(vec![payout(merchant, 100)])
        .await
        .expect("enqueue");
    stored.pop().expect("one event")
}

pub async fn markers_page_in_key_order_across_consumers_with_a_repeated_sequence<
    H: ReconcileHarness,
>(
    h: &H,
) {
    let store = h.store();
    assert!(
        store
            .markers_after(None, 10)
            .await
            .expect("markers of an empty inbox")
            .is_empty()
    );
    let at = |s: i64| base_time() + TimeDelta::seconds(s);
    // Two consumers in one database; "Treasury" sorts before "audit" by bytes (and
    // after it in most locales), sequence 10 after 2 (and before it as text), and
    // sequence 2 of merchants:4471 applied twice: the fault the check looks for.
    let markers = [
        marker(
            "audit",
            "merchants:4471",
            2,
            "i-2",
            MessageKind::Committed,
            at(1),
        ),
        marker(
            "Treasury",
            "merchants:4471",
            10,
            "i-10",
            MessageKind::Reverted,
            at(2),
        ),
        marker(
            "Treasury",
            "merchants:4471",
            2,
            "i-2-again",
            MessageKind::Committed,
            at(3),
        ),
        marker(
            "Treasury",
            "merchants:4471",
            1,
            "i-1",
            MessageKind::Committed,
            at(4),
        ),
        marker(
            "Treasury",
            "merchants:1007",
            1,
            "r-1",
            MessageKind::Rejected,
            at(5),
        ),
        marker(
            "audit",
            "merchants:4471",
            1,
            "i-1",
            MessageKind::Committed,
            at(6),
        ),
        marker(
            "Treasury",
            "merchants:4471",
            2,
            "i-2",
            MessageKind::Committed,
            at(7),
        ),
    ];
    for m in &markers {
        insert_marker(h, m).await;
    }
    let mut expected = markers.to_vec();
    expected.sort_by_key(MarkerKey::of);
    assert_eq!(
        expected
            .iter()
            .map(|m| (m.consumer.as_str(), m.sequence, m.instruction_id.as_str()))
            .collect::<Vec<_>>()[..4],
        [
            ("Treasury", 1, "r-1"),
            ("Treasury", 1, "i-1"),
            ("Treasury", 2, "i-2"),
            ("Treasury", 2, "i-2-again"),
        ],
        "the fixture's own order"
    );
    // Limit 1 puts a page boundary between the two markers of sequence 2.
    for limit in [1, 2, 3, 100] {
        let mut read = Vec::new();
        let mut pages = 0;
        let mut after: Option<MarkerKey> = None;
        for _ in 0..=markers.len() + 1 {
            let page = store
                .markers_after(after.as_ref(), limit)
                .await
                .expect("markers page");
            assert!(
                page.len() <= limit,
                "limit {limit}: a page of {}",
                page.len()
            );
            let Some(last) = page.last() else { break };
            after = Some(MarkerKey::of(last));
            pages += 1;
            read.extend(page);
        }
        assert_eq!(read, expected, "limit {limit}");
        assert_eq!(pages, markers.len().div_ceil(limit), "limit {limit}");
    }
    // A key between two stored ones continues after it.
    let between = MarkerKey {
        consumer: "Treasury".into(),
        account: "merchants:4471".into(),
        sequence: 2,
        instruction_id: "i-2-a".into(),
    };
    let next = store
        .markers_after(Some(&between), 1)
        .await
        .expect("after a key between markers");
    assert_eq!(next, vec![expected[3].clone()]);
}

pub async fn held_gaps_name_every_consumer_with_its_count_and_lowest_held<H: ReconcileHarness>(
    h: &H,
) {
    let store = h.store();
    assert!(store.held_gaps().await.expect("no gaps").is_empty());
    let at = |s: i64| base_time() + TimeDelta::seconds(s);
    for (consumer, account_name, last_applied) in [
        ("Treasury", "merchants:4471", 3),
        ("Treasury", "merchants:9", 12), // nothing held: not a gap
        ("audit", "merchants:4471", 2),
    ] {
        raw(
            h,
            format!(
                "INSERT INTO inbox_accounts (consumer, account, last_applied)
                 VALUES ('{consumer}', '{account_name}', {last_applied})"
            ),
        )
        .await;
    }
    // Sequence 7 was held before 5: the gap's age is the lowest held message's.
    for (consumer, account_name, sequence, held_at) in [
        ("Treasury", "merchants:4471", 7, at(0)),
        ("Treasury", "merchants:4471", 5, at(60)),
        ("Treasury", "merchants:1007", 2, at(30)),
        ("audit", "merchants:4471", 4, at(90)),
    ] {
        raw(
            h,
            format!(
                "INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
                 VALUES ('{consumer}', '{account_name}', {sequence}, 'i-{sequence}', 'committed', {}, {})",
                h.bytes_literal(br#"{"amount":1}"#),
                h.time_literal(held_at)
            ),
        )
        .await;
    }
    let gap = |consumer: &str, account_name: &str, last, lowest, held_at, held| ConsumerGap {
        consumer: consumer.to_owned(),
        gap: HeldGap {
            account: account(account_name),
            last_applied: last,
            lowest_held: lowest,
            held_at,
        },
        held,
    };
    assert_eq!(
        store.held_gaps().await.expect("gaps"),
        vec![
            // No high-water mark yet: nothing applied, 1 is missing.
            gap("Treasury", "merchants:1007", 0, 2, at(30), 1),
            gap("Treasury", "merchants:4471", 3, 5, at(60), 2),
            gap("audit", "merchants:4471", 2, 4, at(90), 1),
        ]
    );
}

pub async fn markers_pruned_follows_the_inbox_retention_permits<H: ReconcileHarness>(h: &H) {
    let store = h.store();
    assert!(!store.markers_pruned().await.expect("pruned"));
    let now = h.time_literal(Utc::now());
    raw(
        h,
        format!(
            "INSERT INTO outbox_retention_policies (keep_seconds, ledger_keeps_seconds, set_by, set_at)
             VALUES (86400, 86400, 'reconcile suite', {now})"
        ),
    )
    .await;
    let day = DateTime::parse_from_rfc3339("2020-01-01T00:00:00Z")
        .expect("day")
        .with_timezone(&Utc);
    let permit = |family: &str, rows: u64| {
        format!(
            "INSERT INTO outbox_retention_permits
                 (family, period_start, period_end, policy_id, rows, granted_by, granted_at)
             VALUES ('{family}', {}, {}, (SELECT max(id) FROM outbox_retention_policies), {rows},
                     'reconcile suite', {now})",
            h.time_literal(day),
            h.time_literal(day + TimeDelta::days(1)),
        )
    };
    raw(h, permit("exceptions", 4)).await;
    assert!(
        !store.markers_pruned().await.expect("pruned"),
        "another family's permit"
    );
    raw(h, permit("inbox", 0)).await;
    assert!(
        !store.markers_pruned().await.expect("pruned"),
        "a permit that removed no marker"
    );
    raw(h, permit("inbox", 3)).await;
    assert!(store.markers_pruned().await.expect("pruned"));
}

pub async fn checkpoint_moves_forward_only_on_each_side<H: ReconcileHarness>(h: &H) {
    let store = h.store();
    let name = "completeness";
    assert_eq!(
        store.completeness_checkpoint(name).await.expect("load"),
        None
    );
    let events = h
        .enqueue_committed(vec![payout("1", 1), payout("1", 2), payout("2", 3)])
        .await
        .expect("enqueue");
    let p: Vec<Position> = events.iter().map(|e| e.position).collect();
    let checkpoint = |ledger_tx: Option<u64>, position: Option<Position>| CompletenessCheckpoint {
        ledger_tx,
        position,
    };
    let steps = [
        // (saved, then loaded)
        (
            checkpoint(Some(5), Some(p[1])),
            checkpoint(Some(5), Some(p[1])),
        ),
        // an older ledger transaction keeps 5; the position moves
        (
            checkpoint(Some(3), Some(p[2])),
            checkpoint(Some(5), Some(p[2])),
        ),
        // an older position keeps p[2]; the ledger side moves
        (
            checkpoint(Some(9), Some(p[0])),
            checkpoint(Some(9), Some(p[2])),
        ),
        // nothing given, nothing moves
        (checkpoint(None, None), checkpoint(Some(9), Some(p[2]))),
        // the same again changes nothing
        (
            checkpoint(Some(9), Some(p[2])),
            checkpoint(Some(9), Some(p[2])),
        ),
    ];
    for (saved, loaded) in steps {
        store
            .save_completeness_checkpoint(name, &saved)
            .await
            .expect("save");
        assert_eq!(
            store.completeness_checkpoint(name).await.expect("load"),
            Some(loaded),
            "after saving {saved:?}"
        );
    }
    store
        .save_completeness_checkpoint("other", &checkpoint(Some(1), None))
        .await
        .expect("save other");
    assert_eq!(
        store.completeness_checkpoint("other").await.expect("load"),
        Some(checkpoint(Some(1), None))
    );
    let foreign = Position::from_bytes(&[1, 2, 3]).expect("bytes");
    let err = store
        .save_completeness_checkpoint(name, &checkpoint(Some(20), Some(foreign)))
        .await
        .expect_err("another store's position was kept");
    assert_eq!(err.kind(), &ErrorKind::Internal, "{err}");
    let err = store
        .save_completeness_checkpoint(name, &checkpoint(Some(u64::MAX), None))
        .await
        .expect_err("a ledger transaction id beyond the column was kept");
    assert_eq!(err.field(), Some("ledger_tx"), "{err}");

    // Durable, byte for byte, rendered as the store's own, and usable to resume.
    let reopened = h.reopen().await;
    let loaded = reopened
        .completeness_checkpoint(name)
        .await
        .expect("load after reopening")
        .expect("saved");
    assert_eq!(loaded, checkpoint(Some(9), Some(p[2])));
    let position = loaded.position.expect("position");
    assert_eq!(position.to_string(), p[2].to_string());
    assert!(
        reopened
            .events_to_check(name, Some(position), 10)
            .await
            .expect("after the checkpoint")
            .is_empty()
    );
    let rest = reopened
        .events_to_check(name, Some(p[0]), 10)
        .await
        .expect("after the first event");
    assert_eq!(
        rest.iter().map(|c| c.event.event_id).collect::<Vec<_>>(),
        vec![events[1].event_id, events[2].event_id]
    );
}

pub async fn seen_is_insert_once_and_matches_by_event_id_or_reference<H: ReconcileHarness>(h: &H) {
    let store = h.store();
    let name = "completeness";
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert!(
        store
            .seen_matching(name, &strings(&["A"]), &strings(&["ref:a"]))
            .await
            .expect("nothing seen")
            .is_empty()
    );
    store
        .record_seen(
            name,
            &[
                seen(12, "A", Some("ref:a2")),
                seen(10, "A", Some("ref:a")),
                seen(11, "B", None),
            ],
        )
        .await
        .expect("record");
    // Transaction 10 again, with other contents: the first record stands. Transaction
    // 13 carries an event id that is not even a UUID; it is kept as read.
    store
        .record_seen(
            name,
            &[
                seen(10, "Z", Some("ref:z")),
                seen(13, "not-a-uuid", Some("ref:b")),
                seen(13, "not-a-uuid", Some("ref:b")),
            ],
        )
        .await
        .expect("record again");
    store
        .record_seen(
            "other",
            &[seen(10, "A", Some("ref:a")), seen(30, "C", None)],
        )
        .await
        .expect("record under another name");
    store.record_seen(name, &[]).await.expect("record nothing");

    let matching = |ids: &[&str], refs: &[&str]| {
        let (ids, refs) = (strings(ids), strings(refs));
        let store = store.clone();
        async move {
            store
                .seen_matching(name, &ids, &refs)
                .await
                .expect("seen matching")
        }
    };
    let (a10, a12, b11) = (
        seen(10, "A", Some("ref:a")),
        seen(12, "A", Some("ref:a2")),
        seen(11, "B", None),
    );
    let odd = seen(13, "not-a-uuid", Some("ref:b"));
    assert_eq!(matching(&["A"], &[]).await, vec![a10.clone(), a12.clone()]);
    assert_eq!(matching(&[], &["ref:b"]).await, vec![odd.clone()]);
    assert_eq!(
        matching(&["B"], &["ref:a"]).await,
        vec![a10.clone(), b11.clone()]
    );
    // Matching both ways comes back once.
    assert_eq!(
        matching(&["A", "not-a-uuid"], &["ref:a", "ref:b"]).await,
        vec![a10, a12, odd]
    );
    assert!(matching(&["Z", "C"], &["ref:z"]).await.is_empty());
    assert_eq!(
        store
            .seen_matching("other", &strings(&["C"]), &[])
            .await
            .expect("other"),
        vec![seen(30, "C", None)]
    );
    for sql in [
        "UPDATE reconcile_seen SET event_id = 'tampered'",
        "DELETE FROM reconcile_seen",
    ] {
        let err = h.execute_raw(sql).await.expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
    assert_eq!(matching(&["B"], &[]).await, vec![b11]);
}

pub async fn events_to_check_pages_in_commit_order_with_states_and_seen<H: ReconcileHarness>(
    h: &H,
) {
    let store = h.store();
    let name = "completeness";
    assert!(
        store
            .events_to_check(name, None, 10)
            .await
            .expect("empty outbox")
            .is_empty()
    );
    let mut events = Vec::new();
    for merchant in ["1", "2", "1", "2", "1"] {
        events.push(enqueue_one(h, merchant).await);
    }
    let id = |i: usize| events[i].event_id;
    store
        .append_deliveries(&[
            delivery(id(0), 1, DeliveryOutcome::Accepted, Some(100)),
            delivery(id(1), 1, DeliveryOutcome::Failed, None),
            delivery(id(1), 2, DeliveryOutcome::Accepted, Some(101)),
            delivery(id(2), 1, DeliveryOutcome::Rejected, None),
            delivery(id(4), 1, DeliveryOutcome::Failed, None),
        ])
        .await
        .expect("deliveries");
    store
        .record_seen(
            name,
            &[
                seen(200, &id(0).to_string(), None),
                seen(100, &id(0).to_string(), Some("ref")),
                seen(101, &id(1).to_string(), None),
            ],
        )
        .await
        .expect("seen");
    store
        .record_seen("other", &[seen(300, &id(2).to_string(), None)])
        .await
        .expect("seen under another name");

    let mut checks: Vec<EventCheck> = Vec::new();
    let mut pages = Vec::new();
    let mut after = None;
    for _ in 0..10 {
        let page = store
            .events_to_check(name, after, 2)
            .await
            .expect("events to check");
        let Some(last) = page.last() else { break };
        after = Some(last.event.position);
        pages.push(page.len());
        checks.extend(page);
    }
    assert_eq!(pages, vec![2, 2, 1]);
    // The same events, positions and bytes as the relay's reader, in its order.
    let committed = store.read_committed(None, 100).await.expect("read");
    assert_eq!(
        checks.iter().map(|c| c.event.clone()).collect::<Vec<_>>(),
        committed
    );
    assert_eq!(committed, events);
    for check in &checks {
        let records = store
            .deliveries(check.event.event_id)
            .await
            .expect("deliveries");
        assert_eq!(check.delivery, DeliveryState::from_records(&records));
    }
    let summary: Vec<CheckSummary> = checks
        .iter()
        .map(|c| {
            (
                c.delivery.attempts,
                c.delivery
                    .terminal
                    .as_ref()
                    .map(|t| (t.outcome, t.ledger_tx_id)),
                c.seen.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                1,
                Some((DeliveryOutcome::Accepted, Some(100))),
                vec![100, 200]
            ),
            (2, Some((DeliveryOutcome::Accepted, Some(101))), vec![101]),
            (1, Some((DeliveryOutcome::Rejected, None)), vec![]),
            (0, None, vec![]),
            (1, None, vec![]),
        ]
    );

    // Incremental: after the last one, only what came since.
    assert!(
        store
            .events_to_check(name, after, 10)
            .await
            .expect("caught up")
            .is_empty()
    );
    let sixth = enqueue_one(h, "3").await;
    let next = store
        .events_to_check(name, after, 10)
        .await
        .expect("the new event");
    assert_eq!(
        next,
        vec![EventCheck {
            event: sixth,
            delivery: DeliveryState::default(),
            seen: Vec::new(),
        }]
    );
}

/// Every page `events_to_check` has to give after `after`, and where the last ended.
async fn check_to_the_end<S: CompletenessStore>(
    store: &S,
    name: &str,
    mut after: Option<Position>,
) -> (Vec<EventCheck>, Option<Position>) {
    let mut checks = Vec::new();
    for _ in 0..100 {
        let page = store
            .events_to_check(name, after, 10)
            .await
            .expect("events to check");
        let Some(last) = page.last() else { break };
        after = Some(last.event.position);
        checks.extend(page);
    }
    (checks, after)
}

/// The completeness check walks the outbox like the relay: an event that commits
/// after one with a higher position is checked later, never skipped (pitfall P1).
pub async fn events_to_check_never_skips_a_late_commit<H: ReconcileHarness>(h: &H) {
    let store = h.store();
    let name = "completeness";
    let mut tx_a = h.begin().await;
    let a = h
        .enqueue(&mut tx_a, &payout("6", 1))
        .await
        .expect("enqueue A");
    let writer = {
        let shared = h.clone();
        tokio::spawn(async move { shared.enqueue_committed(vec![payout("7", 2)]).await })
    };
    let mut checked = Vec::new();
    let mut after = None;
    // Where writers overlap, B commits while A is still open, with a higher position.
    if store.capabilities().concurrent_writers {
        let finished = tokio::time::timeout(Duration::from_secs(30), async {
            while !writer.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(finished.is_ok(), "B did not commit while A was open");
        let (early, at) = check_to_the_end(&store, name, after).await;
        assert!(
            early.is_empty(),
            "B was checked while A, before it in commit order, could still commit: {early:?}"
        );
        (checked, after) = (early, at);
    }
    h.commit(tx_a).await.expect("commit A");
    let b = writer.await.expect("writer").expect("enqueue B");
    checked.extend(check_to_the_end(&store, name, after).await.0);
    let mut got: Vec<EventId> = checked.iter().map(|c| c.event.event_id).collect();
    got.sort();
    let mut expected = vec![a.event_id, b[0].event_id];
    expected.sort();
    assert_eq!(got, expected, "an event was skipped or repeated");
}

pub async fn events_by_ids_leaves_unknown_ids_out<H: ReconcileHarness>(h: &H) {
    let store = h.store();
    assert!(store.events_by_ids(&[]).await.expect("no ids").is_empty());
    let events = h
        .enqueue_committed(vec![payout("1", 1), payout("2", 2), payout("1", 3)])
        .await
        .expect("enqueue");
    store
        .append_deliveries(&[
            delivery(events[0].event_id, 1, DeliveryOutcome::Failed, None),
            delivery(events[0].event_id, 2, DeliveryOutcome::Replayed, Some(7)),
        ])
        .await
        .expect("deliveries");
    let unknown = EventId::new();
    let found = store
        .events_by_ids(&[events[2].event_id, unknown, events[0].event_id])
        .await
        .expect("events by ids");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(!found.contains_key(&unknown));
    let (event, state) = &found[&events[0].event_id];
    assert_eq!(event, &events[0]);
    assert_eq!(
        (
            state.attempts,
            state.terminal.as_ref().map(|t| (t.outcome, t.ledger_tx_id))
        ),
        (2, Some((DeliveryOutcome::Replayed, Some(7))))
    );
    let (event, state) = &found[&events[2].event_id];
    assert_eq!(event, &events[2]);
    assert_eq!(state, &DeliveryState::default());
}

pub async fn last_posted_is_newest_first_within_before_and_limit<H: ReconcileHarness>(h: &H) {
    let store = h.store();
    // Each transaction a little later than the one before, so created_at orders them.
    let later = async |events: Vec<outbox_core::NewEvent>| {
        tokio::time::sleep(Duration::from_millis(3)).await;
        h.enqueue_committed(events).await.expect("enqueue")
    };
    let a1 = later(vec![payout("1", 1)]).await.remove(0);
    let b1 = later(vec![payout("2", 1)]).await.remove(0);
    let a2 = later(vec![payout("1", 2)]).await.remove(0);
    let c1 = later(vec![payout("3", 1)]).await.remove(0);
    let _undelivered = later(vec![payout("2", 2)]).await;
    let a3 = later(vec![payout("1", 3)]).await.remove(0);
    // Two of one account in one transaction (one created_at on PostgreSQL): the
    // higher sequence comes first.
    let pair = later(vec![payout("2", 3), payout("2", 4)]).await;
    let (b3, b4) = (pair[0].clone(), pair[1].clone());
    let a4 = later(vec![payout("1", 4)]).await.remove(0);
    store
        .append_deliveries(&[
            delivery(a1.event_id, 1, DeliveryOutcome::Accepted, Some(1)),
            delivery(b1.event_id, 1, DeliveryOutcome::Failed, None),
            delivery(b1.event_id, 2, DeliveryOutcome::Replayed, Some(2)),
            delivery(a2.event_id, 1, DeliveryOutcome::Rejected, None),
            delivery(c1.event_id, 1, DeliveryOutcome::Accepted, Some(3)),
            delivery(a3.event_id, 1, DeliveryOutcome::Failed, None),
            delivery(b3.event_id, 1, DeliveryOutcome::Accepted, Some(4)),
            delivery(b4.event_id, 1, DeliveryOutcome::Accepted, Some(5)),
            delivery(a4.event_id, 1, DeliveryOutcome::Accepted, Some(6)),
        ])
        .await
        .expect("deliveries");
    let posted = |e: &OutboxEvent, tx: u64| PostedEvent {
        account: e.account.clone(),
        sequence: e.sequence,
        event_id: e.event_id,
        ledger_tx: Some(tx),
    };
    let (m1, m2, m3) = (
        account("merchants:1"),
        account("merchants:2"),
        account("merchants:3"),
    );
    let ask = |accounts: Vec<outbox_core::Account>, before: DateTime<Utc>, limit: usize| {
        let store = store.clone();
        async move {
            store
                .last_posted(&accounts, before, limit)
                .await
                .expect("last posted")
        }
    };
    let cut = b4.created_at.max(b3.created_at);
    assert!(
        a4.created_at > cut,
        "the clock did not move between transactions"
    );
    // Rejected (a2), undelivered (merchants:2 #2), only failed (a3), after `before` (a4) and
    // another account (c1) are left out.
    assert_eq!(
        ask(vec![m1.clone(), m2.clone()], cut, 10).await,
        vec![
            posted(&b4, 5),
            posted(&b3, 4),
            posted(&b1, 2),
            posted(&a1, 1)
        ]
    );
    assert_eq!(
        ask(vec![m1.clone(), m2.clone()], cut, 2).await,
        vec![posted(&b4, 5), posted(&b3, 4)]
    );
    // `before` is inclusive.
    assert_eq!(
        ask(vec![m2.clone(), m1.clone()], b1.created_at, 10).await,
        vec![posted(&b1, 2), posted(&a1, 1)]
    );
    assert_eq!(
        ask(vec![m1.clone(), m2.clone()], a4.created_at, 3).await,
        vec![posted(&a4, 6), posted(&b4, 5), posted(&b3, 4)]
    );
    assert_eq!(ask(vec![m3], cut, 10).await, vec![posted(&c1, 3)]);
    assert!(
        ask(vec![m1.clone()], a1.created_at - TimeDelta::seconds(1), 10)
            .await
            .is_empty()
    );
    assert!(
        ask(vec![account("merchants:404")], cut, 10)
            .await
            .is_empty()
    );
    assert!(ask(Vec::new(), cut, 10).await.is_empty());
    assert!(ask(vec![m1], cut, 0).await.is_empty());
}
