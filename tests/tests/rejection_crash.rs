//! A refused payout and a relay killed with SIGKILL around its refusal, on SQLite and
//! on PostgreSQL.
//!
//! The ledger keeps no idempotency key for a refusal: re-posting a refused payout
//! evaluates it again, and once the merchant is funded it commits. So the one thing
//! that must never happen is both at once: a rejection notice on the ledger (Hop 2
//! tells consumers the payout was refused) and a committed transaction for the same
//! payout. Each case kills the relay in the window where the old relay let that
//! happen, funds the merchant, restarts the relay, and checks that invariant, then
//! ends with the auditor (each event posted once or refused, in the merchant's order).

mod common;

use std::time::{Duration, Instant};

use common::backend::{Backend, postgres, sqlite};
use common::*;
use outbox_core::{
    DeliveryOutcome, EventId, Ledger, NewEvent, OutboxEvent, dispatch::OUTBOX_REJECTED_CODE_KEY,
};
use outbox_ledger_dev::{FaultPlan, RunningDevLedger};
use outbox_ledger_formance::FormanceLedger;

/// A payout the merchant cannot cover yet, marked so the dev ledger can hold its answer.
fn refused_payout(merchant: &str, marker: &str) -> NewEvent {
    let mut event = payout(merchant, 1_000);
    if let outbox_core::LedgerCommand::Post(post) = &mut event.command {
        post.reference = Some(marker.to_owned());
    }
    event
}

/// Waits (bounded) until `done` holds.
async fn wait_until<F: AsyncFnMut() -> bool>(limit: Duration, mut done: F) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Whether the merchant's latest rejection notice on the ledger is `event`'s (each
/// case refuses one payout per merchant).
async fn notice_on_ledger(reader: &FormanceLedger, event: &OutboxEvent) -> bool {
    reader
        .account(&event.account)
        .await
        .unwrap()
        .is_some_and(|a| {
            a.metadata.get(outbox_core::OUTBOX_EVENT_ID_KEY) == Some(&event.event_id.to_string())
        })
}

async fn fund_on_ledger(reader: &FormanceLedger, merchant: &str) {
    let body = format!(
        r#"{{"postings":[{{"source":"world","destination":"merchants:{merchant}:available","amount":10000,"asset":"USD/2"}}]}}"#
    );
    reader.post(EventId::new(), body.as_bytes()).await.unwrap();
}

/// Runs the relay once more to the end, after the crash.
async fn restart_and_drain(backend: &Backend, ledger: &RunningDevLedger) {
    let out = relay_process(&backend.url(), &ledger.url(), &["--once"])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the restarted relay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The invariant: the refused payout is either refused and announced, or committed
/// and never announced. Then the auditor: whichever way it went, each of the three
/// events is posted once or refused, the merchant's ledger order is its sequence
/// order, and the relay's records agree with the ledger. Returns whether the payout
/// stayed refused.
async fn assert_refused_xor_committed(
    backend: &Backend,
    ledger: &RunningDevLedger,
    refused: &OutboxEvent,
) -> bool {
    let reader = client(ledger, Duration::from_secs(10));
    let committed = reader
        .transaction_by_event_id(refused.event_id)
        .await
        .unwrap();
    let announced = notice_on_ledger(&reader, refused).await;
    assert!(
        !(committed.is_some() && announced),
        "the payout Hop 2 reported as refused was committed too (tx {:?})",
        committed.map(|t| t.id)
    );
    let refusals = usize::from(committed.is_none());
    // The test's own funding is the one transaction without outbox metadata.
    assert_audited(backend.completeness(), ledger, 3, refusals, 1).await;
    committed.is_none()
}

/// SIGKILL while the relay's `Rejected` record waits on the store: a notice must not
/// have gone out before that record is durable.
async fn killed_while_the_refusal_waits_on_the_store(backend: Backend) {
    let ledger = dev_ledger(None).await;
    let reader = client(&ledger, Duration::from_secs(10));
    let marker = format!("hold-{}", EventId::new());
    let stored = backend
        .enqueue(&[
            fund("31", 100),
            refused_payout("31", &marker),
            payout("31", 50),
        ])
        .await;
    ledger
        .faults()
        .set_plan(FaultPlan {
            hold_matching: Some(marker),
            hold_matching_count: Some(1),
            hold_ms: 1_500,
            ..FaultPlan::default()
        })
        .unwrap();
    let mut relay = relay_process(&backend.url(), &ledger.url(), &[])
        .spawn()
        .unwrap();
    // The refused post has reached the ledger (its answer is held): lock the records.
    let faults = ledger.faults();
    assert!(
        wait_until(Duration::from_secs(30), async || faults
            .plan()
            .hold_matching_count
            == Some(0))
        .await,
        "the relay never posted the payout"
    );
    let lock = backend.lock_records().await;
    // The old relay announced the refusal here, before recording it.
    let announced = wait_until(Duration::from_secs(4), async || {
        notice_on_ledger(&reader, &stored[1]).await
    })
    .await;
    relay.kill().await.unwrap();
    relay.wait().await.unwrap();
    lock.release().await;
    fund_on_ledger(&reader, "31").await;
    restart_and_drain(&backend, &ledger).await;
    let still_refused = assert_refused_xor_committed(&backend, &ledger, &stored[1]).await;
    if announced {
        assert!(still_refused, "announced, then committed");
    }
    ledger.shutdown().await;
    backend.cleanup().await;
}

/// SIGKILL once the refusal is recorded and its notice is written but unanswered:
/// after the restart only the notice is sent again, never the payout.
async fn killed_while_the_notice_is_unanswered(backend: Backend) {
    let ledger = dev_ledger(None).await;
    let reader = client(&ledger, Duration::from_secs(10));
    let stored = backend
        .enqueue(&[fund("32", 100), payout("32", 1_000), payout("32", 50)])
        .await;
    ledger
        .faults()
        .hold_after_commit_matching(OUTBOX_REJECTED_CODE_KEY, Duration::from_secs(60));
    let mut relay = relay_process(&backend.url(), &ledger.url(), &[])
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(30), async || notice_on_ledger(
            &reader, &stored[1]
        )
        .await)
        .await,
        "no rejection notice reached the ledger"
    );
    relay.kill().await.unwrap();
    relay.wait().await.unwrap();
    ledger.faults().clear();
    fund_on_ledger(&reader, "32").await;
    restart_and_drain(&backend, &ledger).await;
    assert!(
        assert_refused_xor_committed(&backend, &ledger, &stored[1]).await,
        "the announced refusal was posted again and committed"
    );
    assert_eq!(
        backend.outcomes(stored[1].event_id).await,
        vec![DeliveryOutcome::Rejected]
    );
    ledger.shutdown().await;
    backend.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_while_the_refusal_waits_on_the_store() {
    killed_while_the_refusal_waits_on_the_store(sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_while_the_notice_is_unanswered() {
    killed_while_the_notice_is_unanswered(sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_while_the_refusal_waits_on_the_store() {
    if let Some(backend) = postgres().await {
        killed_while_the_refusal_waits_on_the_store(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_while_the_notice_is_unanswered() {
    if let Some(backend) = postgres().await {
        killed_while_the_notice_is_unanswered(backend).await;
    }
}
