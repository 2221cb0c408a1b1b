//! The read-only status views (`outbox_core::status::StatusReader`) every store
//! offers `outbox status` and the metrics sampler. Each case takes what the store's
//! own test file set up (events it enqueued, a reader on the same database), since
//! enqueue and the readers are the store crates' own.

use chrono::{Duration, Utc};
use outbox_core::status::StatusReader;
use outbox_core::{
    DeliveryOutcome, DeliveryRecord, ExceptionKind, FanoutStore, MessageKind, NewDeadLetter,
    NewException, OutboxEvent, Store,
};

use crate::fixtures::{account, fanout_message};

fn failed(event: &OutboxEvent, attempt: u32, code: &str) -> DeliveryRecord {
    DeliveryRecord {
        event_id: event.event_id,
        attempt,
        outcome: DeliveryOutcome::Failed,
        ledger_tx_id: None,
        error_code: Some(code.to_owned()),
        detail: Some(format!("attempt {attempt} failed")),
        at: Utc::now(),
    }
}

fn accepted(event: &OutboxEvent, attempt: u32, tx: u64) -> DeliveryRecord {
    DeliveryRecord {
        event_id: event.event_id,
        attempt,
        outcome: DeliveryOutcome::Accepted,
        ledger_tx_id: Some(tx),
        error_code: None,
        detail: None,
        at: Utc::now(),
    }
}

/// `events` are three committed events, enqueued in this order: `merchants:1` #1,
/// `merchants:1` #2, `merchants:2` #1. The relay backlog follows the cursor, the
/// failing events are those with failed attempts and no terminal outcome (the last
/// attempt's error kept), read horizons and partition cursors are told apart, and
/// open exceptions leave the view once resolved.
pub async fn outbox_views(store: &dyn Store, events: &[OutboxEvent], reader: &dyn StatusReader) {
    assert_eq!(events.len(), 3, "the case needs three events");
    assert!(reader.relay_names().await.unwrap().is_empty());
    let fresh = reader.relay("relay").await.unwrap();
    assert_eq!(fresh.cursor_updated_at, None, "no cursor yet");
    let backlog = fresh.backlog.expect("a relay's backlog");
    assert_eq!(backlog.pending, 3, "without a cursor everything is pending");
    assert_eq!(backlog.oldest_at, Some(events[0].created_at));

    let before_save = Utc::now() - Duration::seconds(5);
    store
        .save_cursor("relay", events[0].position)
        .await
        .unwrap();
    store
        .save_cursor("relay@attempted", events[2].position)
        .await
        .unwrap();
    store
        .save_cursor("relay:g1:p0", events[0].position)
        .await
        .unwrap();
    assert_eq!(
        reader.relay_names().await.unwrap(),
        vec!["relay".to_owned(), "relay:g1:p0".to_owned()],
        "read horizons are not relays"
    );
    let moved = reader.relay("relay").await.unwrap();
    assert!(moved.cursor_updated_at.is_some_and(|at| at > before_save));
    let backlog = moved.backlog.expect("a relay's backlog");
    assert_eq!(backlog.pending, 2, "after the cursor");
    assert_eq!(backlog.oldest_at, Some(events[1].created_at));
    let partition = reader.relay("relay:g1:p0").await.unwrap();
    assert_eq!(
        partition.backlog, None,
        "a partition cursor has no backlog of its own"
    );

    // A #2 failed twice; B #1 failed once, then was accepted.
    store
        .append_deliveries(&[
            failed(&events[1], 1, "TRANSPORT"),
            failed(&events[2], 1, "TRANSPORT"),
            accepted(&events[2], 2, 7),
            failed(&events[1], 2, "INTERNAL"),
        ])
        .await
        .unwrap();
    let failing = reader.failing_events().await.unwrap();
    assert_eq!(failing.len(), 1, "{failing:?}");
    let head = &failing[0];
    assert_eq!(head.account, account("merchants:1"));
    assert_eq!((head.sequence, head.event_id), (2, events[1].event_id));
    assert_eq!(head.attempts, 2);
    assert_eq!(
        head.error_code.as_deref(),
        Some("INTERNAL"),
        "the last attempt's"
    );
    assert_eq!(head.detail.as_deref(), Some("attempt 2 failed"));

    assert!(reader.open_exceptions().await.unwrap().is_empty());
    let stopped = NewException::new(
        "relay",
        ExceptionKind::Stopped,
        account("merchants:1"),
        2,
        "permanent failure: account stopped",
    )
    .with_event_id(events[1].event_id.to_string());
    store.raise_exception(&stopped).await.unwrap();
    let open = reader.open_exceptions().await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].kind, ExceptionKind::Stopped);
    assert_eq!(open[0].account, account("merchants:1"));
    store
        .resolve_exception(open[0].id, "ops", "resumed after the fix")
        .await
        .unwrap();
    assert!(reader.open_exceptions().await.unwrap().is_empty());
}

/// A destination's backlog follows its cursor, refusals are counted per destination,
/// and only destination cursors are listed (not the catch-up checkpoint or a replay's
/// progress).
pub async fn fanout_views(fanout: &dyn FanoutStore, reader: &dyn StatusReader) {
    let messages: Vec<_> = (1..=3)
        .map(|sequence| {
            fanout_message(
                &format!("0190f2a0-7b1c-7cc2-8a4e-00000000000{sequence}"),
                "4471",
                sequence,
                MessageKind::Committed,
                sequence,
            )
        })
        .collect();
    fanout.append("wh-1", &messages).await.unwrap();
    let stored = fanout.read_after(0, 10).await.unwrap();
    assert_eq!(stored.len(), 3);

    let fresh = reader.destination("kafka://b:9092/t").await.unwrap();
    assert_eq!((fresh.cursor, fresh.cursor_updated_at), (0, None));
    assert_eq!(fresh.backlog.pending, 3);
    assert_eq!(fresh.backlog.oldest_at, Some(stored[0].received_at));

    fanout
        .save_cursor("kafka://b:9092/t", stored[1].position)
        .await
        .unwrap();
    fanout.save_cursor("ledger-log:payouts", 12).await.unwrap();
    fanout
        .append_dead_letters(&[NewDeadLetter {
            destination: "kafka://b:9092/t".to_owned(),
            position: stored[2].position,
            account: stored[2].message.account.clone(),
            sequence: 3,
            instruction_id: stored[2].message.instruction_id.clone(),
            reason: outbox_core::DeadLetterReason::Refused,
            error: "422 refused".to_owned(),
        }])
        .await
        .unwrap();
    assert_eq!(
        reader.destination_names().await.unwrap(),
        vec!["kafka://b:9092/t".to_owned()]
    );
    let moved = reader.destination("kafka://b:9092/t").await.unwrap();
    assert_eq!(moved.cursor, stored[1].position);
    assert!(moved.cursor_updated_at.is_some());
    assert_eq!(moved.backlog.pending, 1);
    assert_eq!(moved.backlog.oldest_at, Some(stored[2].received_at));
    assert_eq!(moved.refused, 1);
    let other = reader.destination("http://h/x").await.unwrap();
    assert_eq!((other.backlog.pending, other.refused), (3, 0));
}
