//! The relay over PostgreSQL as a user runs it (`outbox relay` processes): a SIGKILL
//! mid-post with the polling relay and with the CDC relay, a SIGKILL in the middle of
//! the CDC relay's catch-up, a CDC deployment's partition maintenance, a fleet of
//! three relay processes losing one to SIGKILL, and retention by partition drop.

mod common;

use std::time::{Duration, Instant};

use common::postgres::PgOutbox;
use common::*;
use outbox_core::{DeliveryOutcome, EventId, OutboxEvent, Store};
use tokio::process::Child;

fn relay(url: &str, ledger_url: &str, extra: &[&str]) -> Child {
    relay_process(url, ledger_url, extra).spawn().unwrap()
}

async fn wait_for<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn crash_and_restart(cdc: bool) {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let name = format!("crash{}", &EventId::new().to_string()[24..]);
    let mut extra = vec!["--name", name.as_str()];
    if cdc {
        extra.push("--cdc");
    }
    let events: Vec<_> = (0..30u64)
        .map(|i| fund(&format!("m{}", i % 3), 100 + i))
        .collect();
    // The CDC daemon starts first, so these events come through its stream (the
    // catch-up of rows committed before the slot has a test of its own).
    let (mut first, stored) = if cdc {
        common::postgres::drop_stale_crash_slots(outbox.store.pool()).await;
        let child = relay(&outbox.url(), &ledger.url(), &extra);
        let slot = format!("outbox_{name}");
        let pool = outbox.store.pool().clone();
        wait_for(Duration::from_secs(90), "the CDC slot (creating a slot waits for running transactions)", || {
            let (pool, slot) = (pool.clone(), slot.clone());
            async move {
                sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active)")
                    .bind(slot)
                    .fetch_one(&pool)
                    .await
                    .unwrap_or(false)
            }
        })
        .await;
        let mut events = events;
        let target_id = events[13].event_id.unwrap();
        ledger
            .faults()
            .hold_after_commit_matching(&target_id.to_string(), Duration::from_secs(60));
        let stored = outbox.enqueue(&std::mem::take(&mut events)).await;
        (child, stored)
    } else {
        let stored = outbox.enqueue(&events).await;
        ledger
            .faults()
            .hold_after_commit_matching(&stored[13].event_id.to_string(), Duration::from_secs(60));
        let mut once = extra.clone();
        once.push("--once");
        (relay(&outbox.url(), &ledger.url(), &once), stored)
    };
    let target = stored[13].clone();
    let committed = wait_for_ledger_commit(&ledger, target.event_id, &mut first).await;
    first.kill().await.unwrap();
    first.wait().await.unwrap();
    ledger.faults().clear();
    assert!(
        outbox
            .store
            .deliveries(target.event_id)
            .await
            .unwrap()
            .is_empty()
    );

    let mut once = extra.clone();
    once.push("--once");
    let second = relay(&outbox.url(), &ledger.url(), &once)
        .wait_with_output()
        .await
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );

    let records = outbox.store.deliveries(target.event_id).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].outcome, records[0].ledger_tx_id),
        (DeliveryOutcome::Replayed, Some(committed.id))
    );
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
    outbox.drop(cdc.then_some(name.as_str())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_relay_sigkill_between_accept_and_cursor() {
    crash_and_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_relay_sigkill_between_accept_and_cursor() {
    crash_and_restart(true).await;
}

/// Terminal delivery records: events that reached a final outcome.
async fn terminal_events(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(DISTINCT event_id) FROM outbox_deliveries WHERE outcome <> 'failed'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Every event is enqueued before the CDC relay ever ran, so it all comes through the
/// catch-up; the relay is killed in the middle of it and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_relay_sigkill_mid_catch_up_then_restart_exactly_once_in_order() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    // Not `crash…`: the other CDC crash test drops inactive `outbox_crash%` slots.
    let name = format!("catchup{}", &EventId::new().to_string()[24..]);
    let events: Vec<_> = (0..3000u64)
        .map(|i| fund(&format!("m{}", i % 12), 100 + i))
        .collect();
    let stored = outbox.enqueue(&events).await;
    // Slow answers keep the catch-up going long enough to kill it midway.
    ledger.faults().set_delay(Duration::from_millis(30));
    let args = ["--name", name.as_str(), "--cdc", "--batch-size", "100"];
    let mut first = relay(&outbox.url(), &ledger.url(), &args);
    let pool = outbox.store.pool().clone();
    wait_for(
        Duration::from_secs(90),
        "a part of the catch-up to be delivered",
        || {
            let pool = pool.clone();
            async move { terminal_events(&pool).await >= 600 }
        },
    )
    .await;
    first.kill().await.unwrap(); // SIGKILL
    first.wait().await.unwrap();
    let at_kill = terminal_events(&pool).await;
    assert!(
        at_kill < 3000,
        "the catch-up finished before the kill: nothing was tested"
    );
    let polling_style: bool = sqlx::query_scalar(
        "SELECT txid IS NOT NULL AND lsn IS NULL FROM relay_cursors WHERE relay = $1",
    )
    .bind(&name)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(polling_style, "the relay's cursor is still the catch-up's");
    ledger.faults().clear();

    let mut once = args.to_vec();
    once.push("--once");
    let second = tokio::time::timeout(
        Duration::from_secs(180),
        relay(&outbox.url(), &ledger.url(), &once).wait_with_output(),
    )
    .await
    .expect("the restarted relay drained in time")
    .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    eprintln!("{at_kill} of 3000 events were terminal at the kill");
    assert_eq!(terminal_events(&pool).await, 3000);
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
    outbox.drop(Some(name.as_str())).await;
}

/// A CDC deployment's store keeps the daily partitions ahead of the calendar, as
/// the polling relay's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdc_deployment_keeps_creating_daily_partitions() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let name = format!("cdcparts{}", &EventId::new().to_string()[24..]);
    let mut config = outbox_store_postgres::PgConfig::new(common::postgres::server_url())
        .with_schema(&outbox.schema);
    config.partition_maintenance_interval = Duration::from_millis(200);
    let database = outbox_bins::wiring::Database::Postgres(config);
    let (store, relay) = database.store_and_cdc_relay(&name).await.unwrap();

    // A partition ahead of the calendar goes missing, as for a process that outlives
    // the partitions created at its start.
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(3);
    let partition = format!("outbox_events_p{}", day.format("%Y%m%d"));
    let exists = |pool: sqlx::PgPool, partition: String| async move {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = $1)",
        )
        .bind(partition)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let pool = outbox.store.pool().clone();
    assert!(
        exists(pool.clone(), partition.clone()).await,
        "created at open"
    );
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {partition}")))
        .execute(&pool)
        .await
        .unwrap();
    assert!(!exists(pool.clone(), partition.clone()).await);
    wait_for(
        Duration::from_secs(20),
        "the partition maintenance to re-create it",
        || exists(pool.clone(), partition.clone()),
    )
    .await;
    drop((store, relay));
    outbox.drop(Some(name.as_str())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_of_three_survives_a_sigkill_exactly_once_in_order() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let events: Vec<_> = (0..300u64)
        .map(|i| fund(&format!("m{}", i % 30), 10 + i))
        .collect();
    let stored = outbox.enqueue(&events).await;
    // Slow answers keep the work going long enough to kill a member mid-run.
    ledger.faults().set_delay(Duration::from_millis(60));
    let name = format!("fleet{}", &EventId::new().to_string()[24..]);
    let args = [
        "--name",
        name.as_str(),
        "--partitions",
        "6",
        "--no-bulk",
        "--partition-check-ms",
        "200",
    ];
    let mut members: Vec<Child> = (0..3)
        .map(|_| relay(&outbox.url(), &ledger.url(), &args))
        .collect();

    let store = outbox.store.clone();
    let done = |store: outbox_store_postgres::PgStore, _events: Vec<OutboxEvent>| async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(DISTINCT event_id) FROM outbox_deliveries WHERE outcome <> 'failed'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    wait_for(Duration::from_secs(60), "some progress", || {
        let (store, stored) = (store.clone(), stored.clone());
        async move { done(store, stored).await >= 60 }
    })
    .await;
    let killed_at = Instant::now();
    members[0].kill().await.unwrap(); // SIGKILL: its session ends, its locks are released
    members[0].wait().await.unwrap();
    assert!(
        done(store.clone(), stored.clone()).await < 300,
        "finished before the kill: nothing was tested"
    );
    ledger.faults().clear();
    wait_for(
        Duration::from_secs(90),
        "every event to reach the ledger",
        || {
            let (store, stored) = (store.clone(), stored.clone());
            async move { done(store, stored).await == 300 }
        },
    )
    .await;
    eprintln!(
        "all 300 events terminal {:?} after the kill",
        killed_at.elapsed()
    );
    for member in &mut members[1..] {
        let pid = member.id().unwrap().to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }
    for member in members.drain(1..) {
        let out = tokio::time::timeout(Duration::from_secs(30), member.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
    outbox.drop(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_only_old_fully_delivered_partitions() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let today = chrono::Utc::now().date_naive();
    let old = today - chrono::Days::new(10);
    let older_pending = today - chrono::Days::new(9);
    outbox.store.ensure_partitions(old, 3).await.unwrap();
    // Event ids minted on those days land in those days' partitions.
    let minted_on = |day: chrono::NaiveDate, n: u64| {
        let ms = day
            .and_hms_opt(12, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis() as u64
            + n;
        let uuid = uuid::Builder::from_unix_timestamp_millis(ms, &rand_bytes(n)).into_uuid();
        EventId::from_uuid(uuid).unwrap()
    };
    let mut events = Vec::new();
    for n in 0..3 {
        events.push(fund("r1", 10 + n).with_event_id(minted_on(old, n)));
        events.push(fund("r2", 10 + n).with_event_id(minted_on(older_pending, n)));
    }
    let stored = outbox.enqueue(&events).await;
    let now = chrono::Utc::now();
    let record = |e: &OutboxEvent| outbox_core::DeliveryRecord {
        event_id: e.event_id,
        attempt: 1,
        outcome: DeliveryOutcome::Accepted,
        ledger_tx_id: Some(1),
        error_code: None,
        detail: None,
        at: now,
    };
    // Every event of the old day is delivered; one of the next day is not.
    let delivered: Vec<_> = stored
        .iter()
        .filter(|e| e.account.as_str() == "merchants:r1")
        .map(record)
        .collect();
    let mut partly: Vec<_> = stored
        .iter()
        .filter(|e| e.account.as_str() == "merchants:r2")
        .map(record)
        .collect();
    partly.pop();
    outbox.store.append_deliveries(&delivered).await.unwrap();
    outbox.store.append_deliveries(&partly).await.unwrap();

    let out = std::process::Command::new(outbox_binary())
        .args([
            "retention",
            "--database",
            &outbox.url(),
            "--older-than",
            "5d",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("dropped {old}")), "{stdout}");
    assert!(
        stdout.contains(&format!("kept {older_pending}: 1 events")),
        "{stdout}"
    );

    let names: Vec<String> = outbox
        .store
        .partitions()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    let tag = |d: chrono::NaiveDate| d.format("%Y%m%d").to_string();
    assert!(
        !names.iter().any(|n| n.ends_with(&tag(old))),
        "old partitions still there: {names:?}"
    );
    assert!(
        names.contains(&format!("outbox_events_p{}", tag(older_pending))),
        "{names:?}"
    );
    assert!(
        names.contains(&format!("outbox_deliveries_p{}", tag(older_pending))),
        "{names:?}"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(outbox.store.pool())
        .await
        .unwrap();
    assert_eq!(left, 3, "only the kept day's events remain");
    outbox.drop(None).await;
}

fn rand_bytes(seed: u64) -> [u8; 10] {
    let mut bytes = [0u8; 10];
    let id = uuid::Uuid::now_v7();
    bytes.copy_from_slice(&id.as_bytes()[6..16]);
    bytes[0] ^= seed as u8;
    bytes
}
