//! The schema: concurrent first starts, daily partitions, and append-only triggers on
//! every partition.

mod common;

use std::time::Duration;

use chrono::{Days, NaiveDate, Utc};
use outbox_core::{DeliveryOutcome, DeliveryRecord, ErrorKind, EventId, Store};
use outbox_store_postgres::{MIGRATIONS_TABLE, PartitionBounds, PgStore, enqueue, map_error};
use outbox_testkit::fixtures::payout;
use sqlx::{AssertSqlSafe, PgPool};

use common::{SchemaGuard, collect, fresh_config, open_store, server_available};

async fn execute(pool: &PgPool, sql: &str) -> outbox_core::Result<u64> {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
        .map_err(map_error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_starts_migrate_once() {
    if !server_available().await {
        return;
    }
    let config = fresh_config();
    let schema = config.schema.clone().unwrap();
    let _guard = SchemaGuard {
        schema: schema.clone(),
    };
    // Five processes start at once on a schema that does not exist yet, each with a
    // pool of its own.
    let starts: Vec<_> = (0..5)
        .map(|_| tokio::spawn(PgStore::open(config.clone())))
        .collect();
    let mut stores = Vec::new();
    for start in starts {
        stores.push(start.await.unwrap().expect("a concurrent start failed"));
    }
    let pool = stores[0].pool();

    let applied: Vec<(i64, bool)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT version, success FROM {MIGRATIONS_TABLE} ORDER BY version"
    )))
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(applied, vec![(1, true), (2, true), (3, true), (5, true)]);
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'outbox_sequences'",
    )
    .bind(&schema)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(tables, 1);

    // Yesterday to a week ahead, for both tables, plus the defaults.
    let partitions = stores[0].partitions().await.unwrap();
    let today = Utc::now().date_naive();
    for parent in ["outbox_deliveries", "outbox_events"] {
        let days: Vec<NaiveDate> = partitions
            .iter()
            .filter(|p| p.parent == parent)
            .filter_map(|p| p.day())
            .collect();
        let expected: Vec<NaiveDate> = (0..9)
            .map(|i| today - Days::new(1) + Days::new(i))
            .collect();
        assert_eq!(days, expected, "{parent}");
        assert!(
            partitions
                .iter()
                .any(|p| p.parent == parent && p.bounds == PartitionBounds::Default),
            "{parent} has no default partition"
        );
    }

    // A later start finds everything in place.
    let again = PgStore::open(config.clone()).await.unwrap();
    let today_and_ahead = again.ensure_partitions(today, 8).await.unwrap();
    assert!(today_and_ahead.is_empty(), "{today_and_ahead:?}");
}

#[tokio::test]
async fn every_partition_is_append_only() {
    let Some(db) = open_store().await else { return };
    let stored = {
        let mut tx = db.pool().begin().await.unwrap();
        let stored = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
        tx.commit().await.unwrap();
        stored
    };
    db.store
        .append_deliveries(&[DeliveryRecord {
            event_id: stored.event_id,
            attempt: 1,
            outcome: DeliveryOutcome::Accepted,
            ledger_tx_id: Some(7),
            error_code: None,
            detail: None,
            at: Utc::now(),
        }])
        .await
        .unwrap();
    // A partition created after the migration gets the same protection.
    let later = NaiveDate::from_ymd_opt(2030, 1, 1).unwrap();
    let created = db.store.ensure_partitions(later, 1).await.unwrap();
    assert_eq!(
        created,
        vec!["outbox_events_p20300101", "outbox_deliveries_p20300101"]
    );

    let today = Utc::now().format("%Y%m%d");
    for sql in [
        format!("UPDATE outbox_events_p{today} SET account = 'tampered'"),
        format!("DELETE FROM outbox_events_p{today}"),
        format!("UPDATE outbox_deliveries_p{today} SET outcome = 'rejected'"),
        format!("DELETE FROM outbox_deliveries_p{today}"),
        "TRUNCATE outbox_events".to_owned(),
        "TRUNCATE outbox_deliveries".to_owned(),
        format!("TRUNCATE outbox_events_p{today}"),
        "TRUNCATE outbox_events_default".to_owned(),
        "TRUNCATE outbox_deliveries_p20300101".to_owned(),
        // Moving a row to another partition is an UPDATE too.
        "UPDATE outbox_events SET event_id = '01a113a8-ec00-7000-8000-000000000000'".to_owned(),
    ] {
        let err = execute(db.pool(), &sql).await.expect_err(&sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
        assert!(err.message().contains("append-only"), "{sql}: {err}");
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(rows, 1);
}

/// A UUID v7 minted at noon UTC of `day`.
fn id_on(day: NaiveDate) -> EventId {
    let noon = day.and_hms_opt(12, 0, 0).unwrap().and_utc();
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, noon.timestamp() as u64, 0);
    EventId::from_uuid(uuid::Uuid::new_v7(ts)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_beyond_the_partitions_land_in_default_and_block_only_their_day() {
    let Some(db) = open_store().await else { return };
    let far = NaiveDate::from_ymd_opt(2031, 3, 3).unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout("4471", 1).with_event_id(id_on(far)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let home: String = sqlx::query_scalar(
        "SELECT tableoid::regclass::text FROM outbox_events WHERE event_id = $1",
    )
    .bind(stored.event_id.as_uuid())
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(home, "outbox_events_default");

    // That day's events partition would contradict the default's row: skipped; the
    // deliveries partition (no stray rows) and the next days are created.
    let created = db.store.ensure_partitions(far, 2).await.unwrap();
    assert_eq!(
        created,
        vec![
            "outbox_deliveries_p20310303",
            "outbox_events_p20310304",
            "outbox_deliveries_p20310304"
        ]
    );
    // The relay reads the default partition like any other.
    let mut relay = db.store.polling_relay("far").await.unwrap();
    let seen = collect(&mut relay, 1, Duration::from_secs(20)).await;
    assert_eq!(seen, vec![stored]);
}

/// sqlx keeps its migration lock when a migration fails; migrate() runs on a
/// connection it closes, so the lock cannot outlive the attempt inside the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_migration_leaves_no_lock_behind() {
    if !server_available().await {
        return;
    }
    let mut config = fresh_config();
    config.application_name = format!("outbox-migrate-{}", uuid::Uuid::now_v7().simple());
    let schema = config.schema.clone().unwrap();
    let _guard = SchemaGuard {
        schema: schema.clone(),
    };
    let pool = outbox_store_postgres::connect(&config).await.unwrap();
    // Something in the way: the migration's CREATE TABLE outbox_events fails.
    execute(&pool, &format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    execute(
        &pool,
        &format!("CREATE TABLE {schema}.outbox_events (x int)"),
    )
    .await
    .unwrap();
    let err = outbox_store_postgres::migrate(&pool, &config)
        .await
        .expect_err("the migration ran over an existing table");
    assert_eq!(err.kind(), &ErrorKind::Storage, "{err}");
    assert_eq!(err.context("migration"), Some("1"), "{err}");

    // No session of this pool still holds an advisory (migration) lock.
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND a.application_name = $1",
    )
    .bind(&config.application_name)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(held, 0, "the failed migration left its lock in the pool");

    execute(&pool, &format!("DROP TABLE {schema}.outbox_events"))
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        outbox_store_postgres::migrate(&pool, &config),
    )
    .await
    .expect("the second migration waited for a lock the first one kept")
    .expect("second migration");
}
