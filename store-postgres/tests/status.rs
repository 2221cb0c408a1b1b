//! The status views of a PostgreSQL schema (`PgAuditReader` as a `StatusReader`):
//! the testkit cases, the gap queue, the snapshot horizon and a slot's WAL.

mod common;

use std::time::Duration;

use common::open_store;
use outbox_core::status::StatusReader;
use outbox_store_postgres::{PgAuditReader, PgFanoutStore, enqueue};
use outbox_testkit::fixtures::{account, payout, settlement};
use outbox_testkit::status_cases;
use sqlx::Executor;

#[tokio::test]
async fn outbox_views() {
    let Some(db) = open_store().await else {
        return;
    };
    let mut tx = db.pool().begin().await.unwrap();
    let mut events = Vec::new();
    for event in [settlement("1", 100), payout("1", 40), settlement("2", 100)] {
        events.push(enqueue(&mut tx, &event).await.unwrap());
    }
    tx.commit().await.unwrap();
    let reader = PgAuditReader::open(&db.config).await.unwrap();
    status_cases::outbox_views(&db.store, &events, &reader).await;
}

#[tokio::test]
async fn fanout_views() {
    let Some(db) = open_store().await else {
        return;
    };
    let fanout = PgFanoutStore::open(db.config.clone()).await.unwrap();
    let reader = PgAuditReader::open(&db.config).await.unwrap();
    status_cases::fanout_views(&fanout, &reader).await;
}

#[tokio::test]
async fn gaps_name_the_consumer_the_account_and_the_last_applied_sequence() {
    let Some(db) = open_store().await else {
        return;
    };
    db.pool()
        .execute(
            "INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES ('treasury', 'merchants:1', 2);
             INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at) VALUES
                 ('treasury', 'merchants:1', 5, 'i5', 'committed', '\\x00', to_timestamp(2)),
                 ('treasury', 'merchants:1', 4, 'i4', 'committed', '\\x00', to_timestamp(3)),
                 ('audit', 'merchants:2', 2, 'j2', 'committed', '\\x00', to_timestamp(1));",
        )
        .await
        .unwrap();
    let reader = PgAuditReader::open(&db.config).await.unwrap();
    let gaps = reader.gaps().await.unwrap();
    assert_eq!(gaps.len(), 2, "{gaps:?}");
    let (audit, treasury) = (&gaps[0], &gaps[1]);
    assert_eq!(
        (audit.consumer.as_str(), &audit.account),
        ("audit", &account("merchants:2"))
    );
    assert_eq!(
        (audit.last_applied, audit.lowest_held, audit.held),
        (0, 2, 1)
    );
    assert_eq!(audit.oldest_held_at.timestamp(), 1);
    assert_eq!(treasury.consumer, "treasury");
    assert_eq!(
        (treasury.last_applied, treasury.lowest_held, treasury.held),
        (2, 4, 2)
    );
    assert_eq!(
        treasury.oldest_held_at.timestamp(),
        2,
        "the oldest hold of the account"
    );
}

/// A transaction holding an xid gives the horizon an age; a slot that does not
/// exist has no retained WAL, one that does has some.
#[tokio::test]
async fn the_horizon_and_a_slots_retained_wal_are_read() {
    let Some(db) = open_store().await else {
        return;
    };
    let reader = PgAuditReader::open(&db.config).await.unwrap();
    let mut holder = db.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *holder)
        .await
        .unwrap();
    let first = reader
        .horizon()
        .await
        .unwrap()
        .expect("PostgreSQL has a horizon");
    assert!(
        first.oldest_age > Duration::ZERO,
        "the open transaction holds it: {first:?}"
    );
    let second = reader
        .horizon()
        .await
        .unwrap()
        .expect("PostgreSQL has a horizon");
    assert!(
        second.oldest_age >= first.oldest_age,
        "an age that only grows while the holder stays open: {first:?} then {second:?}"
    );
    holder.rollback().await.unwrap();

    let slot = format!("outbox_status_t_{}", uuid::Uuid::now_v7().simple());
    assert_eq!(reader.slot_retained_wal_bytes(&slot).await.unwrap(), None);
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
        .bind(&slot)
        .execute(db.pool())
        .await
        .unwrap();
    sqlx::query("SELECT pg_logical_emit_message(false, 'outbox-status-test', 'x')")
        .execute(db.pool())
        .await
        .unwrap();
    let retained = reader.slot_retained_wal_bytes(&slot).await;
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(db.pool())
        .await
        .unwrap();
    assert!(retained.unwrap().is_some_and(|bytes| bytes > 0));
}
