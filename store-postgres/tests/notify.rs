//! LISTEN/NOTIFY wakes the polling relay: every relay here polls once an hour, so
//! only a wake-up can bring an event within the bounds below.

mod common;

use std::time::Duration;

use outbox_core::{OutboxEvent, Relay};
use outbox_store_postgres::{PgConfig, PgStore, enqueue};
use outbox_testkit::fixtures::payout;
use sqlx::{Connection, PgConnection};

use common::{drain, fresh_config, open_store, server_available};

const HOUR: Duration = Duration::from_secs(3600);

/// Waits like a relay loop does (an hour-long interval) until a batch arrives.
async fn next_woken_batch(relay: &mut dyn Relay, within: Duration) -> Option<Vec<OutboxEvent>> {
    tokio::time::timeout(within, async {
        loop {
            relay.wait(HOUR).await;
            let batch = relay.next_batch(10).await.expect("batch");
            if !batch.is_empty() {
                return batch;
            }
        }
    })
    .await
    .ok()
}

/// A connection of its own (not the store's pool), like another service's.
async fn other_connection(config: &PgConfig) -> PgConnection {
    PgConnection::connect_with(&config.connect_options().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_on_another_connection_wakes_the_relay() {
    let Some(db) = open_store().await else { return };
    let mut relay = db.store.polling_relay("notify").await.unwrap();
    assert!(drain(&mut relay).await.is_empty());

    let config = db.config.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut conn = other_connection(&config).await;
        let mut tx = conn.begin().await.unwrap();
        let stored = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
        tx.commit().await.unwrap();
        stored
    });
    let batch = next_woken_batch(&mut relay, Duration::from_secs(10))
        .await
        .expect("the commit did not wake the relay within 10 s");
    let stored = writer.await.unwrap();
    assert_eq!(batch, vec![stored]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_wakes_nothing_that_returns_anything() {
    let Some(db) = open_store().await else { return };
    let mut relay = db.store.polling_relay("rollback").await.unwrap();
    assert!(drain(&mut relay).await.is_empty());

    let mut conn = other_connection(&db.config).await;
    let mut tx = conn.begin().await.unwrap();
    enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
    tx.rollback().await.unwrap();

    // NOTIFY is transactional: the rolled-back one is never delivered. (Commits of
    // other tests on the same server may still wake the relay: it finds nothing.)
    let woken = next_woken_batch(&mut relay, Duration::from_secs(2)).await;
    assert_eq!(woken, None, "a rolled-back enqueue reached the relay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_reconnects_after_its_connection_dies() {
    if !server_available().await {
        return;
    }
    let mut config = fresh_config();
    config.application_name = format!("outbox-notify-{}", uuid::Uuid::now_v7().simple());
    let _guard = common::SchemaGuard {
        schema: config.schema.clone().unwrap(),
    };
    let store = PgStore::open(config.clone()).await.unwrap();
    let mut relay = store.polling_relay("reconnect").await.unwrap();

    // Kill every session of this store, the LISTEN one included.
    let mut admin = PgConnection::connect(&common::server_url()).await.unwrap();
    let killed: Vec<i32> = sqlx::query_scalar(
        // Targets first (MATERIALIZED), so the filter runs before any termination.
        "WITH targets AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = $1)
         SELECT pid FROM targets WHERE pg_terminate_backend(pid)",
    )
    .bind(&config.application_name)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!killed.is_empty(), "no session of the store was found");

    // Wait for the new LISTEN session, then absorb the wake-up the reconnect sends
    // (notifications may have been missed meanwhile), so the one awaited below can
    // only come from the new subscription.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let listening: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                            WHERE application_name = $1 AND query LIKE 'LISTEN%' AND pid <> ALL($2))",
        )
        .bind(&config.application_name)
        .bind(&killed)
        .fetch_one(&mut admin)
        .await
        .unwrap();
        if listening {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "LISTEN was not re-established"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = next_woken_batch(&mut relay, Duration::from_millis(300)).await;

    let mut conn = other_connection(&config).await;
    let mut tx = conn.begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
    tx.commit().await.unwrap();
    let batch = next_woken_batch(&mut relay, Duration::from_secs(10))
        .await
        .expect("no wake-up after the LISTEN connection was re-established");
    assert_eq!(batch, vec![stored]);
}

/// A commit behind an open older transaction cannot be read at once; the listener
/// wakes the relay again when the horizon moves, although nothing is notified then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_held_back_by_the_horizon_wakes_the_relay_when_it_moves() {
    let Some(db) = open_store().await else { return };
    let mut relay = db.store.polling_relay("horizon-wake").await.unwrap();

    let mut long = other_connection(&db.config).await;
    let mut long_tx = long.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *long_tx)
        .await
        .unwrap();

    let mut conn = other_connection(&db.config).await;
    let mut tx = conn.begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
    tx.commit().await.unwrap();

    let early = next_woken_batch(&mut relay, Duration::from_secs(1)).await;
    assert_eq!(early, None, "returned while an older transaction was open");

    long_tx.rollback().await.unwrap();
    let batch = next_woken_batch(&mut relay, Duration::from_secs(10))
        .await
        .expect("the relay was not woken when the horizon moved");
    assert_eq!(batch, vec![stored]);
}

/// The LISTEN task belongs to the store: when the last clone (the relay holds one)
/// is dropped, it stops, and with the pool its sessions end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_store_stops_listening() {
    if !server_available().await {
        return;
    }
    let mut config = fresh_config();
    config.application_name = format!("outbox-drop-{}", uuid::Uuid::now_v7().simple());
    let _guard = common::SchemaGuard {
        schema: config.schema.clone().unwrap(),
    };
    let store = PgStore::open(config.clone()).await.unwrap();
    let relay = store.polling_relay("dropped").await.unwrap();
    let mut admin = PgConnection::connect(&common::server_url()).await.unwrap();
    assert_eq!(
        listen_sessions(&mut admin, &config.application_name).await,
        1
    );

    drop(relay);
    drop(store);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while listen_sessions(&mut admin, &config.application_name).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the LISTEN session outlived the store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn listen_sessions(admin: &mut PgConnection, application_name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
    )
    .bind(application_name)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Writers that turn the wake-up off (a CDC relay needs none) still enqueue normally;
/// a polling relay finds their rows on its interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_without_notify_is_found_by_polling() {
    use outbox_store_postgres::{EnqueueOptions, enqueue_with};
    let Some(db) = open_store().await else { return };
    let mut relay = db.store.polling_relay("quiet").await.unwrap();
    let mut conn = other_connection(&db.config).await;
    let mut tx = conn.begin().await.unwrap();
    let stored = enqueue_with(
        &mut tx,
        &payout("4471", 1),
        EnqueueOptions { notify: false },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let mut found = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while found.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the row was never read"
        );
        relay.wait(Duration::from_millis(50)).await;
        found = drain(&mut relay).await;
    }
    assert_eq!(found, vec![stored]);
}
