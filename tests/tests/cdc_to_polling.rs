//! Leaving CDC for polling under the same relay name (`outbox relay --from-cdc`), as
//! the runbook's "Switch polling ↔ CDC" tells the operator: nothing posted twice, no
//! refusal evaluated again, nothing skipped — including a transaction that took its
//! xid before the CDC relay's last events and committed after the relay stopped,
//! which a cursor mapped from the LSN to "after the last row delivered" would skip.

mod common;

use std::time::{Duration, Instant};

use common::postgres::PgOutbox;
use common::*;
use outbox_core::{DeliveryOutcome, EventId, Ledger, OutboxEvent, Store};
use outbox_store_postgres::{PgPosition, enqueue};

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

/// Waits until the CDC relay `name` streams: its handover is recorded and a
/// replication session holds its slot (creating the slot holds it too, but before the
/// handover exists).
async fn wait_streaming(pool: &sqlx::PgPool, name: &str) {
    wait_for(Duration::from_secs(90), "the CDC relay to stream", || {
        let (pool, slot, handover) = (
            pool.clone(),
            format!("outbox_{name}"),
            format!("{name}@cdc-handover"),
        );
        async move {
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active)
                    AND EXISTS (SELECT 1 FROM relay_cursors WHERE relay = $2)",
            )
            .bind(slot)
            .bind(handover)
            .fetch_one(&pool)
            .await
            .unwrap_or(false)
        }
    })
    .await;
}

/// Events with a terminal delivery record.
async fn terminal_events(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(DISTINCT event_id) FROM outbox_deliveries WHERE outcome <> 'failed'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Runs `outbox relay --once` with `extra`; returns (exit code, stdout, stderr).
async fn relay_once(outbox: &PgOutbox, ledger_url: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = extra.to_vec();
    args.push("--once");
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        relay_process(&outbox.url(), ledger_url, &args)
            .spawn()
            .unwrap()
            .wait_with_output(),
    )
    .await
    .expect("the relay drained in time")
    .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_to_polling_under_the_same_name_skips_nothing_and_repeats_nothing() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let reader = client(&ledger, Duration::from_secs(10));
    let pool = outbox.store.pool().clone();
    let name = format!("leavecdc{}", &EventId::new().to_string()[24..]);
    let slot = format!("outbox_{name}");

    // Before the CDC relay exists: delivered by its catch-up. `r` has no funds, so
    // its payouts are refused by the ledger.
    let mut before: Vec<_> = (0..6u64)
        .map(|i| fund(&format!("m{}", i % 3), 100 + i))
        .collect();
    before.push(payout("r", 1_000));
    let before = outbox.enqueue(&before).await;

    let mut cdc = relay_process(&outbox.url(), &ledger.url(), &["--name", &name, "--cdc"])
        .spawn()
        .unwrap();
    wait_streaming(&pool, &name).await;

    // A transaction takes its xid now and commits only after the CDC relay stopped:
    // its txid is below every streamed event's, its commit after the relay's last ack.
    let mut late_tx = pool.begin().await.unwrap();
    let _: String = sqlx::query_scalar("SELECT pg_current_xact_id()::text")
        .fetch_one(&mut *late_tx)
        .await
        .unwrap();

    // Streamed by the CDC relay.
    let mut streamed: Vec<_> = (0..9u64)
        .map(|i| fund(&format!("m{}", i % 3), 200 + i))
        .collect();
    streamed.push(payout("r", 500));
    let streamed = outbox.enqueue(&streamed).await;
    let delivered_by_cdc = (before.len() + streamed.len()) as i64;
    wait_for(
        Duration::from_secs(60),
        "the CDC relay's deliveries",
        || {
            let pool = pool.clone();
            async move { terminal_events(&pool).await == delivered_by_cdc }
        },
    )
    .await;
    // SIGTERM: the relay saves its cursor at the frontier and stops.
    let pid = cdc.id().expect("running").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopped = tokio::time::timeout(Duration::from_secs(60), cdc.wait())
        .await
        .expect("the CDC relay stopped after SIGTERM")
        .unwrap();
    assert!(stopped.success(), "CDC relay exited with {stopped}");
    let cursor_is_lsn: bool = sqlx::query_scalar(
        "SELECT lsn IS NOT NULL AND txid IS NULL FROM relay_cursors WHERE relay = $1",
    )
    .bind(&name)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(cursor_is_lsn, "the CDC relay left an LSN cursor");

    // While no relay runs: the early transaction commits, more events arrive, and `r`
    // is funded on the ledger, so a refused payout evaluated again would now commit.
    let late = enqueue(&mut late_tx, &fund("late", 7)).await.unwrap();
    late_tx.commit().await.unwrap();
    let txid = |event: &OutboxEvent| match PgPosition::decode(&event.position).unwrap() {
        PgPosition::Snapshot { txid, .. } => txid,
        other => panic!("enqueue returned {other}"),
    };
    assert!(
        txid(&late) < txid(&streamed[0]),
        "the late transaction's txid sorts before the streamed events"
    );
    let while_stopped: Vec<_> = (0..3u64)
        .map(|i| fund(&format!("m{}", i % 3), 300 + i))
        .collect();
    let while_stopped = outbox.enqueue(&while_stopped).await;
    let funding = br#"{"postings":[{"source":"world","destination":"merchants:r:available","amount":100000,"asset":"USD/2"}]}"#;
    reader.post(EventId::new(), funding).await.unwrap();

    // A polling relay does not take over an LSN cursor by accident.
    let (code, _, stderr) = relay_once(&outbox, &ledger.url(), &["--name", &name]).await;
    assert_eq!(code, 2, "refused as a configuration matter: {stderr}");
    assert!(stderr.contains("--from-cdc"), "{stderr}");

    // The runbook's clean-up (an idle slot keeps WAL for ever), done before the
    // switch, as after a failover that lost the slot: the switch needs neither.
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP PUBLICATION {slot}")))
        .execute(&pool)
        .await
        .unwrap();
    let (code, stdout, stderr) =
        relay_once(&outbox, &ledger.url(), &["--name", &name, "--from-cdc"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("switching relay"),
        "the switch is logged: {stderr}"
    );
    // Everything from the handover on: the streamed events, the late one, the new ones.
    let rows_to_read = streamed.len() + 1 + while_stopped.len();
    assert!(
        stderr.contains(&format!("rows_to_read={rows_to_read}")),
        "{stderr}"
    );
    // Re-read from the CDC handover: the streamed events come again and are found
    // delivered (9 accepted, 1 refusal whose notice is re-sent); the catch-up's are
    // not re-read at all.
    let expected_new = 1 + while_stopped.len();
    assert!(
        stdout.contains(&format!(
            "accepted {expected_new}, replayed 0, rejected 0, retried 0, already done 9,"
        )),
        "{stdout}"
    );

    // Both cursors are polling ones now: the CDC log horizon left as "@attempted"
    // would make every later event uncertain (looked up, sent alone) for good.
    let polling_rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM relay_cursors
         WHERE relay IN ($1, $1 || '@attempted') AND txid IS NOT NULL AND lsn IS NULL",
    )
    .bind(&name)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(polling_rows, 2);
    let refused = [before[6].clone(), streamed[9].clone()];
    for event in &refused {
        let records = outbox.store.deliveries(event.event_id).await.unwrap();
        assert_eq!(records.len(), 1, "refused once, never again: {records:?}");
        assert_eq!(records[0].outcome, DeliveryOutcome::Rejected);
    }
    // The auditor: every other event posted once, per account in sequence order, and
    // neither refused payout posted after the switch.
    let events = before.len() + streamed.len() + 1 + while_stopped.len();
    assert_two_refused_the_rest_posted_once(&outbox, &ledger, events).await;

    // From now on a plain polling relay, and the switch back to CDC works again.
    let next = outbox.enqueue(&[fund("m0", 400)]).await;
    let (code, stdout, stderr) = relay_once(&outbox, &ledger.url(), &["--name", &name]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("accepted 1, replayed 0"), "{stdout}");
    let again = outbox.enqueue(&[fund("m1", 500)]).await;
    let (code, stdout, stderr) =
        relay_once(&outbox, &ledger.url(), &["--name", &name, "--cdc"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("accepted 1, replayed 0"), "{stdout}");
    assert_two_refused_the_rest_posted_once(&outbox, &ledger, events + next.len() + again.len())
        .await;
    outbox.drop(Some(name.as_str())).await;
}

/// The auditor over the first case's `events` outbox events: the two refused payouts
/// refused, the rest posted once and in per-account order; the test's own funding of
/// `r` is the one ledger transaction without outbox metadata.
async fn assert_two_refused_the_rest_posted_once(
    outbox: &PgOutbox,
    ledger: &outbox_ledger_dev::RunningDevLedger,
    events: usize,
) {
    assert_audited(&outbox.store, ledger, events, 2, 1).await;
}

/// The CDC relay dies (SIGKILL, as in a failover) after the ledger committed a post
/// and before its outcome was recorded; the polling relay that takes over finds the
/// event in its checked window and gets the ledger's replay, not a second transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_the_cdc_relay_died_on_is_replayed_once_after_the_switch() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let pool = outbox.store.pool().clone();
    let name = format!("leavecdc{}", &EventId::new().to_string()[24..]);
    let mut cdc = relay_process(&outbox.url(), &ledger.url(), &["--name", &name, "--cdc"])
        .spawn()
        .unwrap();
    wait_streaming(&pool, &name).await;
    let mut events: Vec<_> = (0..12u64)
        .map(|i| fund(&format!("m{}", i % 3), 100 + i))
        .collect();
    let target_id = events[7].event_id.unwrap();
    ledger
        .faults()
        .hold_after_commit_matching(&target_id.to_string(), Duration::from_secs(60));
    let stored = outbox.enqueue(&std::mem::take(&mut events)).await;
    let committed = wait_for_ledger_commit(&ledger, target_id, &mut cdc).await;
    cdc.kill().await.unwrap();
    cdc.wait().await.unwrap();
    ledger.faults().clear();
    assert!(outbox.store.deliveries(target_id).await.unwrap().is_empty());

    let (code, stdout, stderr) =
        relay_once(&outbox, &ledger.url(), &["--name", &name, "--from-cdc"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let records = outbox.store.deliveries(target_id).await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].outcome, records[0].ledger_tx_id),
        (DeliveryOutcome::Replayed, Some(committed.id))
    );
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
    outbox.drop(Some(name.as_str())).await;
}
