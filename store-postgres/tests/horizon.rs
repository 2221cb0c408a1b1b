//! Pitfall P3 (docs/ARCHITECTURE.md): a long transaction stalls the xmin-gated reader, and
//! `PgStore::horizon()` shows who and for how long.

mod common;

use std::time::{Duration, Instant};

use outbox_core::Store;
use outbox_store_postgres::enqueue;
use outbox_testkit::fixtures::payout;
use sqlx::{Connection, PgConnection};

use common::{backend_pid, collect, drain, open_store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_transaction_stalls_the_reader_and_horizon_names_it() {
    let Some(db) = open_store().await else { return };
    let options = db.config.connect_options().unwrap();
    let mut relay = db.store.polling_relay("horizon").await.unwrap();

    // A long transaction that holds an xid (it wrote something, or asked for one).
    let mut long = PgConnection::connect_with(&options).await.unwrap();
    let mut long_tx = long.begin().await.unwrap();
    let long_xid: String = sqlx::query_scalar("SELECT pg_current_xact_id()::text")
        .fetch_one(&mut *long_tx)
        .await
        .unwrap();
    let long_xid: u64 = long_xid.parse().unwrap();
    let long_pid = backend_pid(&mut long_tx).await;
    let opened = Instant::now();

    // Another event is enqueued and committed after it.
    let mut writer = PgConnection::connect_with(&options).await.unwrap();
    let mut tx = writer.begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout("4471", 1)).await.unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The relay does not return it while the long transaction is open...
    assert!(
        drain(&mut relay).await.is_empty(),
        "a row committed after an open transaction was returned"
    );
    // ...lag counts it...
    assert_eq!(db.store.lag("horizon").await.unwrap().pending, 1);
    // ...and the horizon names the long transaction, at least as old as it is.
    let open_for = opened.elapsed();
    let horizon = db.store.horizon().await.unwrap();
    let holder = horizon
        .holders
        .iter()
        .find(|h| h.pid == Some(long_pid))
        .unwrap_or_else(|| panic!("pid {long_pid} missing from {horizon:?}"));
    assert_eq!(holder.xid, long_xid);
    assert!(
        holder.age >= open_for,
        "age {:?} < open {open_for:?}",
        holder.age
    );
    assert_eq!(holder.state.as_deref(), Some("idle in transaction"));
    assert!(horizon.xmin <= long_xid, "{horizon:?}");
    assert!(horizon.held_back >= 1, "{horizon:?}");
    // Another session's transaction may be older still; then it is the one reported.
    let oldest = horizon.oldest().expect("a holder");
    assert!(oldest.xid <= long_xid);
    assert!(horizon.age() >= open_for, "{horizon:?}");
    if oldest.pid == Some(long_pid) {
        assert_eq!(horizon.age(), holder.age);
    }

    // After the long transaction ends, the event is delivered.
    long_tx.commit().await.unwrap();
    let delivered = collect(&mut relay, 1, Duration::from_secs(20)).await;
    assert_eq!(delivered, vec![stored]);
    let after = db.store.horizon().await.unwrap();
    assert!(after.holders.iter().all(|h| h.pid != Some(long_pid)));
}
