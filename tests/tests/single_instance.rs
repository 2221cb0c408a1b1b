//! At most one relay per relay name: a second `outbox relay` with the same name (a
//! rolling deploy, `--once` beside the daemon, a plain relay beside a fleet of that
//! name) is refused with a clear error, and the name is free again once the holder
//! died, however it died.

mod common;

use std::time::Duration;

use common::backend::{Backend, postgres, sqlite};
use common::*;
use outbox_ledger_dev::RunningDevLedger;

async fn run_once(
    backend: &Backend,
    ledger: &RunningDevLedger,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec!["--once"];
    args.extend_from_slice(extra);
    tokio::time::timeout(
        Duration::from_secs(60),
        relay_process(&backend.url(), &ledger.url(), &args).output(),
    )
    .await
    .expect("the relay ended in time")
    .unwrap()
}

async fn second_instance_is_refused(backend: Backend, first_args: &[&str]) {
    let ledger = dev_ledger(None).await;
    let stored = backend.enqueue(&[fund("41", 100)]).await;
    let mut first = relay_process(&backend.url(), &ledger.url(), first_args)
        .spawn()
        .unwrap();
    // The first relay is up and has delivered: it holds the name.
    wait_for_ledger_commit(&ledger, stored[0].event_id, &mut first).await;

    let second = run_once(&backend, &ledger, &[]).await;
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "a second relay named \"relay\" ran beside the first: {}",
        String::from_utf8_lossy(&second.stdout)
    );
    assert!(
        stderr.contains("already running") && stderr.contains("\"relay\""),
        "{stderr}"
    );

    first.kill().await.unwrap(); // SIGKILL: the lock goes with the process
    first.wait().await.unwrap();
    // The name is free again: a new relay of the same kind starts and delivers.
    let later = backend.enqueue(&[fund("41", 5)]).await;
    let mut third = relay_process(&backend.url(), &ledger.url(), first_args)
        .spawn()
        .unwrap();
    wait_for_ledger_commit(&ledger, later[0].event_id, &mut third).await;
    third.kill().await.unwrap();
    third.wait().await.unwrap();
    ledger.shutdown().await;
    backend.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_second_relay_with_the_same_name_is_refused() {
    second_instance_is_refused(sqlite().await, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_second_relay_with_the_same_name_is_refused() {
    if let Some(backend) = postgres().await {
        second_instance_is_refused(backend, &[]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_plain_relay_beside_a_fleet_of_that_name_is_refused() {
    if let Some(backend) = postgres().await {
        second_instance_is_refused(
            backend,
            &["--partitions", "2", "--partition-check-ms", "100"],
        )
        .await;
    }
}
