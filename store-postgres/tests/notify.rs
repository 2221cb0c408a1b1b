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

use outbox_store_postgres::NOTIFY_CHANNEL;

/// A session of its own listening on the outbox channel, and the payload that names
/// this store's outbox (the table's oid).
async fn observer(db: &common::TestDb) -> (sqlx::postgres::PgListener, String) {
    let mut listener = sqlx::postgres::PgListener::connect_with(db.pool())
        .await
        .unwrap();
    listener.listen(NOTIFY_CHANNEL).await.unwrap();
    let ours: String = sqlx::query_scalar("SELECT 'outbox_events'::regclass::oid::text")
        .fetch_one(db.pool())
        .await
        .unwrap();
    (listener, ours)
}

/// How many notifications naming this outbox the observer got before a marker sent
/// now: notifications arrive in commit order, so the marker comes after every one of
/// a transaction that committed before this call. (Other outboxes on the server's
/// database, other tests' and older writers' with an empty payload, are not counted.)
async fn ours_before_marker(
    observer: &mut sqlx::postgres::PgListener,
    ours: &str,
    db: &common::TestDb,
) -> usize {
    let marker = format!("marker-{}", uuid::Uuid::now_v7());
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(NOTIFY_CHANNEL)
        .bind(&marker)
        .execute(db.pool())
        .await
        .unwrap();
    let mut count = 0;
    loop {
        let received = tokio::time::timeout(Duration::from_secs(10), observer.recv())
            .await
            .expect("the marker never arrived")
            .unwrap();
        match received.payload() {
            p if p == marker => return count,
            p if p == ours => count += 1,
            _ => {}
        }
    }
}

/// Whether this store's LISTEN session holds the exclusive wake-up lock (its keys: a
/// tag, and the outbox table's oid).
async fn wakeup_lock_held(db: &common::TestDb) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks
                        WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND granted
                          AND classid = 1868724088 AND objid = 'outbox_events'::regclass::oid
                          AND objsubid = 2)",
    )
    .fetch_one(db.pool())
    .await
    .unwrap()
}

async fn enqueue_and_commit(db: &common::TestDb, merchant: &str) -> OutboxEvent {
    let mut conn = other_connection(&db.config).await;
    let mut tx = conn.begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout(merchant, 1)).await.unwrap();
    tx.commit().await.unwrap();
    stored
}

/// The idle-period wake-up: with no relay waiting (none runs, or it is busy polling),
/// a commit sends no NOTIFY, so writers do not serialise on the notification lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_relay_waiting_a_commit_sends_no_notify() {
    let Some(db) = open_store().await else { return };
    let (mut observer, ours) = observer(&db).await;
    enqueue_and_commit(&db, "4471").await;
    assert_eq!(
        ours_before_marker(&mut observer, &ours, &db).await,
        0,
        "a commit notified while no relay waited"
    );
}

/// Once a relay waits, its LISTEN session holds the wake-up lock: the next commit
/// notifies, once, and wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_relay_makes_the_next_commit_notify() {
    let Some(db) = open_store().await else { return };
    let (mut observer, ours) = observer(&db).await;
    let mut relay = db.store.polling_relay("idle-notify").await.unwrap();
    assert!(drain(&mut relay).await.is_empty());
    let waiting =
        tokio::spawn(async move { next_woken_batch(&mut relay, Duration::from_secs(30)).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !wakeup_lock_held(&db).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiting relay's session never took the wake-up lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stored = enqueue_and_commit(&db, "4471").await;
    let batch = waiting.await.unwrap().expect("the relay was not woken");
    assert_eq!(batch, vec![stored]);
    assert_eq!(ours_before_marker(&mut observer, &ours, &db).await, 1);
}

/// A writer that found no relay waiting sends no NOTIFY; when a relay begins to wait
/// before that writer commits, the relay still gets the row at once (its session's
/// wake-up lock waits for the writer, then wakes it), not after the poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_did_not_notify_still_wakes_a_relay_that_began_waiting_before_it() {
    let Some(db) = open_store().await else { return };
    let (mut observer, ours) = observer(&db).await;
    let mut conn = other_connection(&db.config).await;
    let mut tx = conn.begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();

    let mut relay = db.store.polling_relay("barrier").await.unwrap();
    assert!(drain(&mut relay).await.is_empty());
    let wakeup = db.store.wakeup().await.unwrap();
    let waiting =
        tokio::spawn(async move { next_woken_batch(&mut relay, Duration::from_secs(30)).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !wakeup.relay_waiting() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay never waited"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tx.commit().await.unwrap();
    let batch = waiting
        .await
        .unwrap()
        .expect("the commit behind the waiting relay was left to the poll interval");
    assert_eq!(batch, vec![stored]);
    assert_eq!(
        ours_before_marker(&mut observer, &ours, &db).await,
        0,
        "the writer notified: this did not test the lock's hand-over"
    );
}
