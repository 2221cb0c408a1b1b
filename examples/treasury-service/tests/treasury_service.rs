//! The treasury service as it runs: the real binary as a process, consuming what the
//! real AMQP publisher put on RabbitMQ, booking into a real PostgreSQL schema. The
//! expected balances come from the history itself (`support::history`), applied once
//! in sequence order — the service has to match them however the messages arrive.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use outbox_transport_amqp::AmqpPublisher;
use support::history::{History, Instruction};
use support::{Env, Service, seed, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shuffled_stream_with_duplicates_is_applied_once_in_order_and_a_gap_waits_for_its_message()
 {
    let Some(env) = Env::fresh("order").await else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(seed());
    // 4 merchants × 8: m1 reverts its sequence-2 payout at 5, m2's 4 is a rejection.
    let history = History::new(4, 8, &mut rng);
    let total = history.instructions.len() as i64;
    // m0's sequence 3 is published last: 4..=8 must wait behind it.
    let gap = history.get("m0", 3).message.clone();
    let mut stream = history.shuffled_with_duplicates(0.3, &mut rng, |i| {
        i.message.instruction_id != gap.instruction_id
    });
    assert_eq!(stream.len(), 31 + 9, "31 messages and 9 duplicates");
    // The reversal reaches the service before its payout: it must wait for it.
    History::put_first(
        &mut stream,
        &history.get("m1", 5).message.instruction_id,
        &history.get("m1", 2).message.instruction_id,
    );

    let mut service = Service::start(
        &env,
        &[
            "--gap-alarm-after-ms",
            "2000",
            "--gap-check-every-ms",
            "100",
        ],
    )
    .await;
    let publisher = AmqpPublisher::new(env.amqp_config()).unwrap();
    env.publish(&publisher, &stream).await;

    let shared = &env;
    wait_until(
        &mut service,
        Duration::from_secs(60),
        "everything but m0 after its gap is applied",
        || async move { shared.applied_count().await == total - 6 && shared.held().await.len() == 5 },
    )
    .await;
    let held: Vec<_> = (4..=8).map(|s| ("merchants:m0".to_owned(), s)).collect();
    assert_eq!(env.held().await, held, "m0's 4..=8 wait for 3");

    // The gap raises an alarm, and nothing is skipped however long it stays open.
    let m0_gap = &("gap".to_owned(), "merchants:m0".to_owned(), 3);
    wait_until(
        &mut service,
        Duration::from_secs(30),
        "the gap raised an alarm",
        || async move { shared.exceptions().await.contains(m0_gap) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(env.held().await, held, "still held after the alarm");
    let before_gap = |i: &Instruction| i.merchant != "m0" || i.sequence <= 2;
    assert_eq!(env.balances().await, history.expected_balances(before_gap));

    // The missing message arrives (twice): it and everything held behind it apply.
    env.publish(&publisher, &[gap.clone(), gap]).await;
    wait_until(
        &mut service,
        Duration::from_secs(60),
        "everything is applied",
        || async move { shared.applied_count().await == total && shared.held().await.is_empty() },
    )
    .await;
    env.assert_converged(&history).await;
    let exceptions = env.exceptions().await;
    assert!(
        exceptions.iter().all(|(kind, ..)| kind == "gap"),
        "duplicates and reorders are not exceptions: {exceptions:?}"
    );

    // The journal is append-only, by the database.
    for change in [
        "UPDATE treasury_journal SET ledger_tx_id = 0",
        "DELETE FROM treasury_journal",
        "TRUNCATE treasury_journal",
    ] {
        let refused = sqlx::raw_sql(change).execute(&env.pool).await.unwrap_err();
        assert!(
            refused.to_string().contains("append-only"),
            "{change}: {refused}"
        );
    }

    let status = service.terminate().await;
    assert!(status.success(), "SIGTERM is a clean stop: {status}");
    drop(env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_twice_mid_stream_the_service_still_applies_everything_exactly_once() {
    let Some(env) = Env::fresh("crash").await else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(seed());
    let history = History::new(8, 50, &mut rng);
    let total = history.instructions.len() as i64;
    let stream = history.shuffled_with_duplicates(0.3, &mut rng, |_| true);
    // Everything is queued before the service starts, so it is killed with a backlog.
    let publisher = AmqpPublisher::new(env.amqp_config()).unwrap();
    env.publish(&publisher, &stream).await;

    let shared = &env;
    let mut applied_at_kill = 0;
    for share in [5, 2] {
        let mut service = Service::start(&env, &[]).await;
        let threshold = (total / share).max(applied_at_kill + 1);
        wait_until(
            &mut service,
            Duration::from_secs(60),
            &format!("{threshold} of {total} applied"),
            || async move { shared.applied_count().await >= threshold },
        )
        .await;
        let status = service.kill().await;
        assert_eq!(status.signal(), Some(9), "SIGKILL: {status}");
        applied_at_kill = env.applied_count().await;
        eprintln!("killed with {applied_at_kill} of {total} applied");
        assert!(
            applied_at_kill < total,
            "killed mid-stream: {applied_at_kill} of {total} applied"
        );
    }

    let mut service = Service::start(&env, &[]).await;
    wait_until(
        &mut service,
        Duration::from_secs(120),
        "everything is applied after the restarts",
        || async move { shared.applied_count().await == total && shared.held().await.is_empty() },
    )
    .await;
    env.assert_converged(&history).await;
    assert_eq!(
        env.exceptions().await,
        Vec::new(),
        "redeliveries after a kill are plain duplicates"
    );
    let status = service.terminate().await;
    assert!(status.success(), "{status}");
    drop(env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_payload_stops_the_service_naming_the_field_and_writes_nothing() {
    let Some(env) = Env::fresh("poison").await else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(seed());
    let history = History::new(1, 5, &mut rng);
    // Sequence 2 before 1: were it not refused first, it would be held.
    let mut poisoned = history.get("m0", 2).message.clone();
    let payload = String::from_utf8(poisoned.payload.clone()).unwrap();
    let amount = format!(
        "\"amount\":{}",
        match history.get("m0", 2).intent {
            support::history::Intent::Payout { amount }
            | support::history::Intent::Fund { amount, .. } => amount,
            other => panic!("{other:?}"),
        }
    );
    assert!(payload.contains(&amount), "{payload}");
    poisoned.payload = payload.replace(&amount, "\"amount\":12.5").into_bytes();

    let service = Service::start(&env, &[]).await;
    let publisher = AmqpPublisher::new(env.amqp_config()).unwrap();
    env.publish(&publisher, std::slice::from_ref(&poisoned))
        .await;
    let (status, log) = service.exited(Duration::from_secs(30)).await;
    assert_eq!(
        status.code(),
        Some(1),
        "a permanent error ends the service: {status}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("invalid postings[0].amount") && l.contains("12.5")),
        "the log names the field: {log:#?}"
    );
    assert_eq!(env.applied_count().await, 0, "no processed marker");
    assert_eq!(env.held().await, Vec::new(), "never held");
    assert_eq!(env.balances().await, Default::default(), "no balance");
    let journal: i64 = sqlx::query_scalar("SELECT count(*) FROM treasury_journal")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(journal, 0, "no journal row");
    assert_eq!(
        env.ready_in_queue_of(&poisoned.account).await,
        1,
        "the message stays in its queue for an operator"
    );
    drop(env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_database_connections_are_retried_as_transient_and_nothing_is_lost_or_doubled() {
    let Some(env) = Env::fresh("dbloss").await else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(seed());
    let history = History::new(8, 60, &mut rng);
    let total = history.instructions.len() as i64;
    let stream = history.shuffled_with_duplicates(0.3, &mut rng, |_| true);
    let publisher = AmqpPublisher::new(env.amqp_config()).unwrap();
    env.publish(&publisher, &stream).await;

    let mut service = Service::start(&env, &[]).await;
    let retried = |log: &[String]| {
        log.iter()
            .any(|l| l.contains("sink refused a delivery, retrying") && l.contains("(transient)"))
    };
    // Terminate the service's sessions, in transactions or idle, until one of its
    // transactions met the loss (bounded: 500 rounds, 20 ms apart).
    let application = format!("treasury-service/{}", env.consumer);
    let mut terminated = 0;
    for _ in 0..500 {
        if retried(&service.log()) || env.applied_count().await == total {
            break;
        }
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
             FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&application)
        .fetch_one(&env.pool)
        .await
        .unwrap();
        terminated += killed;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(terminated > 0, "no session of {application} to terminate");
    assert!(
        retried(&service.log()),
        "a transaction met a lost connection ({terminated} sessions terminated) and was retried"
    );

    let shared = &env;
    wait_until(
        &mut service,
        Duration::from_secs(120),
        "everything is applied after the connection losses",
        || async move { shared.applied_count().await == total && shared.held().await.is_empty() },
    )
    .await;
    env.assert_converged(&history).await;
    assert_eq!(env.exceptions().await, Vec::new());
    let status = service.terminate().await;
    assert!(status.success(), "{status}");
    drop(env);
}
