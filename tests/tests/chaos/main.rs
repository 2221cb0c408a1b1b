//! The crash-and-fault campaign (issue 15; `scripts/chaos.sh` runs it with the long
//! sizes and prints the figures). Every scenario drives the real `outbox relay`
//! binary against the dev ledger over HTTP on loopback, on a real SQLite file or a
//! PostgreSQL schema of its own, and ends with the auditor
//! (`outbox_testkit::auditor`), which rebuilds what should have happened from the
//! outbox alone: 0 missing, 0 doubled, 0 out of order, 0 discrepancies of any kind.
//!
//! - Relay SIGKILL at random points while events are enqueued, on SQLite and on
//!   PostgreSQL (polling, `--cdc`, a 3-member `--partitions` fleet).
//! - Ledger faults: 5xx, answers lost after commit, timeouts, connection resets, a
//!   429 with `Retry-After` (honoured, read from the delivery records), an outage.
//! - PostgreSQL: a transaction held open and an enqueue that takes its xid early and
//!   commits late, while many others commit: nothing skipped.
//!
//! Sizes: `OUTBOX_CHAOS_PROFILE=short|long` (short by default, the one `cargo test`
//! runs); randomness: `OUTBOX_TEST_SEED` (printed by every scenario).

#[path = "../common/mod.rs"]
mod common;
mod figures;
mod kill_loop;
mod profile;
mod relay_child;
mod target;

use std::time::{Duration, Instant};

use common::backend::Backend;
use common::postgres::PgOutbox;
use common::*;
use figures::Chaos;
use kill_loop::KillPlan;
use outbox_core::{DeliveryOutcome, EventId, Store};
use outbox_ledger_dev::{FaultPlan, QueuedAnswer, RunningDevLedger};
use outbox_testkit::auditor::{AuditReport, audit};
use outbox_testkit::forwarder::TcpForwarder;
use profile::{Profile, seeded};
use relay_child::RelayChild;
use target::{enqueue_batched, terminal, workload};

/// The auditor over Hop 1: the outbox against the ledger.
async fn audit_hop1(backend: &Backend, ledger: &RunningDevLedger) -> AuditReport {
    let reader = client(ledger, Duration::from_secs(60));
    audit(backend.completeness(), &reader, &[]).await.unwrap()
}

/// A relay name of this run (slots, publications and cursors are named after it).
fn relay_name(prefix: &str) -> String {
    format!("{prefix}{}", &EventId::new().to_string()[24..])
}

/// Waits (bounded) until every one of `total` events is terminal, the relay alive.
async fn wait_drained(backend: &Backend, relay: &mut RelayChild, total: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let done = terminal(backend).await;
        if done == total {
            return;
        }
        relay.assert_running();
        assert!(
            Instant::now() < deadline,
            "{done} of {total} events terminal after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Relays killed with SIGKILL at random points while the workload is enqueued, then
/// drained; the auditor finds nothing.
async fn relay_sigkill(
    scenario: &str,
    backend: Backend,
    flags: Vec<String>,
    members: usize,
) -> Backend {
    let profile = Profile::from_env();
    let (seed, mut rng) = seeded(scenario);
    let ledger = dev_ledger(None).await;
    let logs = tempfile::TempDir::new().unwrap();
    let count = profile.kill_events;
    let events = workload(&mut rng, count, profile.kill_accounts);
    let started = Instant::now();
    let plan = KillPlan {
        backend: &backend,
        ledger_url: ledger.url(),
        flags,
        members,
        kills: profile.kills,
        kill_within: profile.kill_within,
        log_dir: logs.path(),
    };
    let mut chaos = plan.run(events, &mut rng).await;
    chaos.replays = ledger.stats().idempotency_hits;
    let report = audit_hop1(&backend, &ledger).await;
    figures::report(
        scenario,
        seed,
        profile.kill_accounts,
        &chaos,
        &report,
        started.elapsed(),
    );
    assert_eq!(report.events, count, "{report}");
    assert_eq!(
        chaos.kills, profile.kills,
        "the relays drained before the planned kills: too few crash points"
    );
    assert!(chaos.kills_mid_drain > 0, "no kill landed mid-drain");
    backend
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_sigkill_at_random_points_on_sqlite() {
    relay_sigkill(
        "relay-sigkill sqlite",
        Backend::Sqlite(Outbox::new().await),
        Vec::new(),
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_sigkill_at_random_points_on_postgres_polling() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let backend = relay_sigkill(
        "relay-sigkill postgres polling",
        Backend::Postgres(outbox),
        Vec::new(),
        1,
    )
    .await;
    if let Backend::Postgres(outbox) = backend {
        outbox.drop(None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_sigkill_at_random_points_on_postgres_cdc() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let name = relay_name("chaoscdc");
    let flags = vec!["--name".to_owned(), name.clone(), "--cdc".to_owned()];
    let backend = relay_sigkill(
        "relay-sigkill postgres cdc",
        Backend::Postgres(outbox),
        flags,
        1,
    )
    .await;
    if let Backend::Postgres(outbox) = backend {
        outbox.drop(Some(&name)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_sigkill_at_random_points_in_a_fleet_of_three() {
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let flags = [
        "--name",
        &relay_name("chaosfleet"),
        "--partitions",
        "6",
        "--partition-check-ms",
        "200",
    ]
    .map(str::to_owned)
    .to_vec();
    let backend = relay_sigkill(
        "relay-sigkill postgres fleet of 3",
        Backend::Postgres(outbox),
        flags,
        3,
    )
    .await;
    if let Backend::Postgres(outbox) = backend {
        outbox.drop(None).await;
    }
}

/// Delivery attempts that failed (5xx, 429, timeouts, resets, the outage).
fn failed_attempts(outbox: &Outbox) -> i64 {
    let conn = rusqlite::Connection::open(&outbox.path).unwrap();
    conn.query_row(
        "SELECT count(*) FROM outbox_deliveries WHERE outcome = 'failed'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// How the relay's failure record names the ledger's 429.
const THROTTLED: &str = "429 Too Many Requests";

/// What the gap between the 429's record and the next attempt's may fall short of
/// `Retry-After`: the wait runs from the answer, the record is written a moment
/// later. Far below the gap a relay that ignored the header would leave (its first
/// backoff is at most 100 ms).
const RECORD_SKEW: Duration = Duration::from_millis(200);

/// Waits until a failure record names the 429 (the ledger answers the first write
/// with it); panics after `within`.
async fn wait_throttle_recorded(outbox: &Outbox, within: Duration) {
    let deadline = Instant::now() + within;
    while throttled_events(outbox).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no 429 recorded within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The events with a failure record naming the 429.
fn throttled_events(outbox: &Outbox) -> Vec<String> {
    let conn = rusqlite::Connection::open(&outbox.path).unwrap();
    let mut stmt = conn
        .prepare("SELECT DISTINCT event_id FROM outbox_deliveries WHERE outcome = 'failed' AND detail LIKE '%' || ?1 || '%'")
        .unwrap();
    stmt.query_map([THROTTLED], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// `Retry-After` of the 429 the ledger answered first: the same event's next attempt
/// finished that long after the 429 was recorded (less `RECORD_SKEW`). Returns the
/// gap seen.
async fn assert_retry_after_honoured(outbox: &Outbox, retry_after: Duration) -> Duration {
    let throttled = throttled_events(outbox);
    assert!(!throttled.is_empty(), "no delivery record names the 429");
    let mut shortest = Duration::MAX;
    for id in throttled {
        let records = outbox.store.deliveries(id.parse().unwrap()).await.unwrap();
        let at_429 = records
            .iter()
            .position(|r| {
                r.outcome == DeliveryOutcome::Failed
                    && r.detail.as_deref().unwrap_or_default().contains(THROTTLED)
            })
            .unwrap();
        let next = records
            .get(at_429 + 1)
            .unwrap_or_else(|| panic!("no attempt after the 429: {records:?}"));
        let gap = (next.at - records[at_429].at).to_std().unwrap_or_default();
        assert!(
            gap + RECORD_SKEW >= retry_after,
            "the next attempt came {gap:?} after a 429 with Retry-After {retry_after:?}: {records:?}"
        );
        shortest = shortest.min(gap);
    }
    shortest
}

/// The relay through a ledger that fails, loses answers after commit, times out,
/// throttles and drops connections, and then is unreachable for an outage; one post
/// per event, so each fault hits one event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_faults_and_an_outage() {
    ledger_faults("ledger-faults sqlite --no-bulk", &["--no-bulk"]).await;
}

/// The same with bulk on: the heads of many accounts in `_bulk` calls and the hot
/// account's consecutive events in ordered runs, whose failures (a 5xx, an answer
/// lost after the run committed, a refusal inside a run) send them one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_faults_and_an_outage_with_bulk_and_runs() {
    ledger_faults("ledger-faults sqlite bulk+runs", &[]).await;
}

async fn ledger_faults(scenario: &str, flags: &[&str]) {
    let profile = Profile::from_env();
    let (seed, mut rng) = seeded(scenario);
    let ledger = dev_ledger(None).await;
    // The relay reaches the ledger through a forwarder the test cuts: a cut drops
    // every open connection (resets) and, held, is the outage.
    let network = TcpForwarder::start(ledger.addr()).await;
    let retry_after = Duration::from_secs(2);
    ledger
        .faults()
        .set_plan(FaultPlan {
            error_ratio: 0.2,
            seed,
            queue: vec![QueuedAnswer {
                status: 429,
                retry_after_secs: Some(retry_after.as_secs()),
                count: 1,
            }],
            timeout_after_commit_ratio: 0.1,
            hold_ms: 1_500,
            ..FaultPlan::default()
        })
        .unwrap();
    let backend = Backend::Sqlite(Outbox::new().await);
    let logs = tempfile::TempDir::new().unwrap();
    let mut events = workload(&mut rng, profile.fault_events, profile.fault_accounts);
    let during_outage = events.split_off(events.len() / 2);
    let started = Instant::now();
    enqueue_batched(&backend, events, target::BATCH).await;
    // Answers lost after commit outlast the 500 ms timeout.
    let flags: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["--request-timeout-ms", "500"])
        .collect();
    let mut relay = RelayChild::start(
        &backend.url(),
        &format!("http://{}", network.listen),
        &flags,
        logs.path(),
    );
    // The connection resets start once the 429 is on record: a reset that struck
    // while its answer was on the way would leave only a transport error in the
    // record, and nothing to check `Retry-After` against.
    let Backend::Sqlite(outbox) = &backend else {
        unreachable!()
    };
    wait_throttle_recorded(outbox, Duration::from_secs(60)).await;
    let mut chaos = Chaos::default();
    let resets = if profile.name == "long" { 20 } else { 4 };
    for _ in 0..resets {
        tokio::time::sleep(Duration::from_millis(rng.u64(50..400))).await;
        network.cut();
        tokio::time::sleep(Duration::from_millis(20)).await;
        network.restore().await;
    }
    let before_outage = terminal(&backend).await;
    network.cut();
    let outage = Instant::now();
    enqueue_batched(&backend, during_outage, target::BATCH).await;
    tokio::time::sleep(profile.outage.saturating_sub(outage.elapsed())).await;
    // An answer read just before the cut may still be recorded during the outage, so
    // this is a figure, not an assertion.
    let during = terminal(&backend).await - before_outage;
    network.restore().await;
    wait_drained(
        &backend,
        &mut relay,
        profile.fault_events,
        Duration::from_secs(600),
    )
    .await;
    relay.terminate().await;

    let gap = assert_retry_after_honoured(outbox, retry_after).await;
    chaos.faults = ledger.faults().injected();
    chaos.replays = ledger.stats().idempotency_hits;
    chaos.notes.push(format!(
        "resets={resets} outage={:?} terminal_during_outage={during} failed_attempts={} retry_after={retry_after:?} next_attempt_after={:.1}s",
        profile.outage,
        failed_attempts(outbox),
        gap.as_secs_f64()
    ));
    let report = audit_hop1(&backend, &ledger).await;
    figures::report(
        scenario,
        seed,
        profile.fault_accounts,
        &chaos,
        &report,
        started.elapsed(),
    );
    assert!(
        chaos.faults > 0 && chaos.replays > 0,
        "faults {} replays {}",
        chaos.faults,
        chaos.replays
    );
    assert_eq!(report.events, profile.fault_events, "{report}");
}

/// A transaction holding an xid, and an enqueue that takes its xid first and commits
/// last, both open while many others commit: the polling relay skips nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_held_transactions_skip_nothing() {
    let scenario = "held-transaction postgres polling";
    let Some(outbox) = PgOutbox::new().await else {
        return;
    };
    let profile = Profile::from_env();
    let (seed, mut rng) = seeded(scenario);
    let ledger = dev_ledger(None).await;
    let logs = tempfile::TempDir::new().unwrap();
    let pool = outbox.store.pool().clone();
    let backend = Backend::Postgres(outbox);
    let mut relay = RelayChild::start(&backend.url(), &ledger.url(), &[], logs.path());
    let started = Instant::now();

    let mut held = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *held)
        .await
        .unwrap();
    // Its own account: an open enqueue holds its account's sequence until it commits.
    let mut late = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *late)
        .await
        .unwrap();
    let late_event = outbox_store_postgres::enqueue(&mut late, &fund("late", 1))
        .await
        .unwrap();

    // The others, each in its own transaction.
    let others = workload(&mut rng, profile.held_others, 100);
    enqueue_batched(&backend, others, 1).await;
    tokio::time::sleep(profile.held_for.saturating_sub(started.elapsed())).await;
    let delivered_while_held = terminal(&backend).await;
    held.commit().await.unwrap();
    late.commit().await.unwrap();
    let total = profile.held_others + 1;
    wait_drained(&backend, &mut relay, total, Duration::from_secs(600)).await;
    relay.terminate().await;

    let Backend::Postgres(outbox) = &backend else {
        unreachable!()
    };
    let late_records = outbox.store.deliveries(late_event.event_id).await.unwrap();
    assert!(
        late_records
            .iter()
            .any(|r| r.outcome == DeliveryOutcome::Accepted),
        "the late commit was skipped: {late_records:?}"
    );
    let chaos = Chaos {
        notes: vec![format!(
            "held_for={:?} others_committed={} delivered_while_held={delivered_while_held}",
            profile.held_for, profile.held_others
        )],
        ..Chaos::default()
    };
    let report = audit_hop1(&backend, &ledger).await;
    figures::report(scenario, seed, 101, &chaos, &report, started.elapsed());
    assert_eq!(report.events, total, "{report}");
    if let Backend::Postgres(outbox) = backend {
        outbox.drop(None).await;
    }
}
