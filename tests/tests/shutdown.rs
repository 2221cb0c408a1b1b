//! `outbox relay` as a daemon: SIGTERM lets the posts in flight finish, records them,
//! saves the cursor and exits cleanly; a relay started again delivers the rest, each
//! event once and in order (the auditor).

mod common;

use std::time::Duration;

use common::*;
use outbox_core::{DeliveryOutcome, Store};
use outbox_testkit::auditor::DiscrepancyKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_posts_and_exits_cleanly() {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let stored = outbox.enqueue(
        &(0..40u64)
            .map(|i| fund(&format!("m{}", i % 4), 10 + i))
            .collect::<Vec<_>>(),
    );
    // Every answer takes 300 ms, so a post is in flight when the signal arrives.
    ledger.faults().set_delay(Duration::from_millis(300));
    let daemon = relay_process(&outbox.url(), &ledger.url(), &["--no-bulk"])
        .spawn()
        .unwrap();
    let store = outbox.store.clone();
    let first = stored[0].event_id;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.deliveries(first).await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never posted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = daemon.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = tokio::time::timeout(Duration::from_secs(30), daemon.wait_with_output())
        .await
        .expect("the daemon stopped after SIGTERM")
        .unwrap();
    assert!(output.status.success(), "exit status {:?}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("relay relay: accepted "), "{stdout}");

    // Whatever reached the ledger is recorded, and the cursor sits at the end of the
    // longest recorded prefix (in commit order).
    let mut recorded = Vec::new();
    for event in &stored {
        let records = store.deliveries(event.event_id).await.unwrap();
        recorded.push(
            records
                .iter()
                .any(|r| r.outcome == DeliveryOutcome::Accepted),
        );
    }
    let count = recorded.iter().filter(|r| **r).count();
    assert!(
        count > 0 && count < 40,
        "{count} of 40 recorded: the signal came too late to test a drain"
    );
    let prefix = recorded.iter().take_while(|r| **r).count();
    let cursor = store.load_cursor("relay").await.unwrap();
    assert_eq!(cursor, Some(stored[prefix - 1].position));
    // The auditor names exactly the unrecorded events undelivered, and the ledger
    // holds one transaction per recorded event and no more: a post answered during
    // shutdown but not recorded would be an extra one.
    let report = audit_ledger(&outbox.store, &ledger).await;
    let unrecorded: Vec<Finding> = stored
        .iter()
        .zip(&recorded)
        .filter(|(_, recorded)| !**recorded)
        .map(|(event, _)| finding(DiscrepancyKind::Undelivered, event))
        .collect();
    assert_eq!(findings(&report), unrecorded, "{report}");
    assert_eq!(
        (report.posted, report.ledger_transactions),
        (count, count),
        "a post answered during shutdown was not recorded: {report}"
    );

    // A relay started again delivers the rest: each event once, in order.
    ledger.faults().clear();
    let rest = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .output()
        .await
        .unwrap();
    assert!(
        rest.status.success(),
        "{}",
        String::from_utf8_lossy(&rest.stderr)
    );
    assert_exactly_once_in_order(&outbox.store, &ledger, &stored).await;
}
