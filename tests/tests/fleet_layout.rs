//! A fleet's partition count is kept in the database: a member restarted with another
//! `--partitions` is refused (it used to resume merged partitions from one old cursor
//! and silently skip the other's unfinished events), and `--repartition` changes the
//! layout without skipping or re-sending anything.

mod common;

use std::time::{Duration, Instant};

use common::postgres::PgOutbox;
use common::*;
use outbox_core::{Ledger, NewEvent, OutboxEvent};
use outbox_ledger_dev::RunningDevLedger;
use tokio::process::Child;

/// Merchants whose accounts fall in partition `want` of `of` (the store's hash).
async fn merchants_in(outbox: &PgOutbox, of: i32, want: i32, count: usize) -> Vec<String> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT m FROM (SELECT 'fl' || g AS m FROM generate_series(1, 5000) g) c
         WHERE abs(hashtextextended('merchants:' || m, 0) % $1) = $2 ORDER BY m LIMIT $3",
    )
    .bind(of)
    .bind(want)
    .bind(count as i64)
    .fetch_all(outbox.store.pool())
    .await
    .unwrap();
    assert_eq!(names.len(), count);
    names
}

fn member(
    outbox: &PgOutbox,
    ledger: &RunningDevLedger,
    name: &str,
    partitions: &str,
    extra: &[&str],
) -> Child {
    let mut args = vec![
        "--name",
        name,
        "--partitions",
        partitions,
        "--partition-check-ms",
        "100",
    ];
    args.extend_from_slice(extra);
    relay_process(&outbox.url(), &ledger.url(), &args)
        .spawn()
        .unwrap()
}

async fn committed(
    reader: &outbox_ledger_formance::FormanceLedger,
    events: &[OutboxEvent],
) -> usize {
    let mut n = 0;
    for e in events {
        if reader
            .transaction_by_event_id(e.event_id)
            .await
            .unwrap()
            .is_some()
        {
            n += 1;
        }
    }
    n
}

async fn wait_committed(
    reader: &outbox_ledger_formance::FormanceLedger,
    events: &[OutboxEvent],
    child: &mut Child,
    limit: Duration,
) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if committed(reader, events).await == events.len() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn stop(mut child: Child) {
    child.kill().await.unwrap();
    child.wait().await.unwrap();
}

/// SIGTERM, then the exit: the member records the outcomes of its posts in flight, so
/// the auditor finds every delivered event's record (a SIGKILL may leave the last one
/// unrecorded until the next run replays it).
async fn stop_gracefully(mut child: Child) {
    let pid = child.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the member stopped after SIGTERM")
        .unwrap();
}

/// Merchant X (old partition 5 of 8) is blocked while the fleet delivers merchant Y
/// (old partition 1 of 8, later in the outbox); both fall in partition 1 of 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_to_four_partitions_skips_nothing() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let reader = client(&ledger, Duration::from_secs(10));
    let x = merchants_in(&outbox, 8, 5, 1).await.remove(0);
    let y = merchants_in(&outbox, 8, 1, 1).await.remove(0);
    let blocked: Vec<NewEvent> = (0..6).map(|i| fund(&x, 100 + i)).collect();
    let later: Vec<NewEvent> = (0..10).map(|i| fund(&y, 200 + i)).collect();
    let blocked = outbox.enqueue(&blocked).await;
    let later = outbox.enqueue(&later).await;
    let name = format!("fl{}", &outbox_core::EventId::new().to_string()[24..]);
    ledger
        .faults()
        .fail_matching(&format!("merchants:{x}:available"));
    let mut eight = member(&outbox, &ledger, &name, "8", &[]);
    assert!(
        wait_committed(&reader, &later, &mut eight, Duration::from_secs(60)).await,
        "the fleet did not deliver merchant Y"
    );
    stop(eight).await;
    ledger.faults().clear();
    assert_eq!(
        committed(&reader, &blocked).await,
        0,
        "merchant X was not blocked"
    );

    // Restarted with another partition count, as an operator would try it.
    let mut four = member(&outbox, &ledger, &name, "4", &[]);
    let delivered = wait_committed(&reader, &blocked, &mut four, Duration::from_secs(20)).await;
    let exited = four.try_wait().unwrap();
    assert!(
        exited.is_some() || delivered,
        "a member with --partitions 4 neither refused to start nor delivered merchant X's events ({} of 6 posted): they were skipped silently",
        committed(&reader, &blocked).await
    );
    let out = four.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("laid out in 8 partitions") && stderr.contains("--repartition"),
        "{stderr}"
    );

    // With --repartition: merchant X's events go out, nothing is sent twice.
    let mut four = member(&outbox, &ledger, &name, "4", &["--repartition"]);
    assert!(
        wait_committed(&reader, &blocked, &mut four, Duration::from_secs(60)).await,
        "merchant X's events were not delivered after re-partitioning: {}",
        String::from_utf8_lossy(&four.wait_with_output().await.unwrap().stderr)
    );
    stop_gracefully(four).await;
    let all: Vec<OutboxEvent> = blocked.iter().chain(&later).cloned().collect();
    assert_exactly_once_in_order(&outbox.store, &ledger, &all).await;
    ledger.shutdown().await;
    outbox.drop(None).await;
}

/// Going from 4 to 8 partitions re-reads nothing that was delivered, and a single
/// member re-partitioning to 2 delivers what follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_or_fewer_partitions_resend_nothing() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let reader = client(&ledger, Duration::from_secs(10));
    let name = format!("fl{}", &outbox_core::EventId::new().to_string()[24..]);
    let first: Vec<NewEvent> = (0..40)
        .map(|i| fund(&format!("up{}", i % 12), 10 + i))
        .collect();
    let first = outbox.enqueue(&first).await;
    let mut four = member(&outbox, &ledger, &name, "4", &["--no-bulk"]);
    assert!(wait_committed(&reader, &first, &mut four, Duration::from_secs(60)).await);
    // Gracefully: a SIGKILL right after the ledger committed the last post can leave
    // it unrecorded, and the next member would rightly send it again (a replay this
    // test would count as re-partitioning's). Crashes are the campaign's subject.
    stop_gracefully(four).await;
    let hits = ledger.stats().idempotency_hits;

    let second: Vec<NewEvent> = (0..20)
        .map(|i| fund(&format!("up{}", i % 12), 90 + i))
        .collect();
    let second = outbox.enqueue(&second).await;
    let mut eight = member(
        &outbox,
        &ledger,
        &name,
        "8",
        &["--repartition", "--no-bulk"],
    );
    assert!(
        wait_committed(&reader, &second, &mut eight, Duration::from_secs(60)).await,
        "not delivered after 4 → 8"
    );
    stop_gracefully(eight).await;
    assert_eq!(
        ledger.stats().idempotency_hits,
        hits,
        "going from 4 to 8 partitions sent delivered events again"
    );

    let third: Vec<NewEvent> = (0..10)
        .map(|i| fund(&format!("up{}", i % 12), 150 + i))
        .collect();
    let third = outbox.enqueue(&third).await;
    let mut two = member(
        &outbox,
        &ledger,
        &name,
        "2",
        &["--repartition", "--no-bulk"],
    );
    assert!(
        wait_committed(&reader, &third, &mut two, Duration::from_secs(60)).await,
        "not delivered after 8 → 2"
    );
    stop_gracefully(two).await;
    let all: Vec<OutboxEvent> = first.iter().chain(&second).chain(&third).cloned().collect();
    assert_exactly_once_in_order(&outbox.store, &ledger, &all).await;
    ledger.shutdown().await;
    outbox.drop(None).await;
}

/// A re-partition is refused while another member of the fleet runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repartition_waits_for_every_member_to_stop() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let reader = client(&ledger, Duration::from_secs(10));
    let name = format!("fl{}", &outbox_core::EventId::new().to_string()[24..]);
    let events = outbox.enqueue(&[fund("rp1", 10)]).await;
    let mut running = member(&outbox, &ledger, &name, "4", &[]);
    assert!(wait_committed(&reader, &events, &mut running, Duration::from_secs(60)).await);
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        member(&outbox, &ledger, &name, "2", &["--repartition"]).wait_with_output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("other fleet member"),
        "{stderr}"
    );
    stop(running).await;
    ledger.shutdown().await;
    outbox.drop(None).await;
}
