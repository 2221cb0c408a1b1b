//! A fan-out loop that can no longer use its store takes `outbox fanout` down: the
//! process stops its intake and exits non-zero, naming the destination and the error,
//! instead of answering the ledger's webhooks with 204 while nothing is published.
//!
//! The real `outbox fanout` binary on a real store (a fresh PostgreSQL schema, and a
//! SQLite file), publishing to a real signed HTTP receiver on loopback. The test breaks
//! the store under the running process by renaming its cursor table, as a botched
//! migration or a manual change would.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fanout_process::{Fanout, HOP2_SECRET, deliver, try_deliver, webhook_body};
use common::hop2::Probe;
use common::postgres::PgOutbox;
use common::*;
use outbox_core::{MessageSink, Subscriber};
use outbox_testkit::ProbeConsumer;
use outbox_transport_http::{HttpSubscriber, SubscriberConfig};
use tokio::sync::watch;

/// How long the process may take to notice and exit.
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// One committed transaction of `merchants:7001` at `sequence`, as the ledger sends it.
fn webhook(tx: u64, sequence: u64) -> Vec<u8> {
    webhook_body(&[("merchants:7001", tx, sequence)])
}

/// A signed HTTP receiver on loopback feeding a probe consumer.
async fn receiver() -> (Arc<Probe>, String, watch::Sender<bool>) {
    let subscriber = HttpSubscriber::bind(SubscriberConfig::new(
        ([127, 0, 0, 1], 0).into(),
        HOP2_SECRET,
    ))
    .await
    .unwrap();
    let url = subscriber.url();
    let probe = Probe::new().await;
    let sink: Arc<dyn MessageSink> = probe.clone();
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(async move { subscriber.run(sink, shutdown).await });
    (probe, url, stop)
}

/// Delivers one message, breaks the store with `break_store`, delivers another (the
/// intake still stores it: appends do not touch the cursor table), and requires the
/// process to exit non-zero within [`EXIT_WITHIN`], naming the destination and the
/// missing table.
async fn a_loop_that_loses_its_store_takes_the_process_down<F, Fut>(database: &str, break_store: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (probe, destination, _stop_receiver) = receiver().await;
    let (mut fanout, intake) = Fanout::start(database, &destination).await;
    assert_eq!(deliver(&intake, "wh-1", &webhook(1, 1)).await, 204);
    eventually(
        Duration::from_secs(30),
        "the first message at the receiver",
        || probe.received().len() == 1,
    )
    .await;

    break_store().await;
    // The loop may meet the missing table at once (a cursor save due after the first
    // message) and take the process down before this arrives: then nothing listens.
    // While the process runs, the intake stores what it gets (appends do not use the
    // cursor table).
    match try_deliver(&intake, "wh-2", &webhook(2, 2)).await {
        Ok(status) => assert_eq!(status, 204, "the intake stores what it gets"),
        Err(e) => assert_eq!(
            e.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "the intake is gone only with its process: {e}"
        ),
    }

    let deadline = Instant::now() + EXIT_WITHIN;
    let status = loop {
        if let Some(status) = fanout.child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let answer = deliver(&intake, "wh-3", &webhook(3, 3)).await;
            panic!(
                "outbox fanout still runs {EXIT_WITHIN:?} after its loop lost the cursor \
                 table; its intake still answers {answer}; stderr: {}",
                fanout.stderr()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Let the stderr reader finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stderr = fanout.stderr();
    eprintln!("outbox fanout exited ({status}); stderr:\n{stderr}");
    assert!(!status.success(), "exited with {status}: {stderr}");
    assert!(
        stderr.contains(&destination) && stderr.contains("fanout_cursors"),
        "the error names the destination and what failed: {stderr}"
    );
    // The intake went down with the process: the ledger now retries its webhooks.
    let host = intake
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        tokio::net::TcpStream::connect(&host).await.is_err(),
        "the intake still accepts connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_fanout_whose_cursor_table_is_gone_exits_non_zero() {
    let Some(pg) = PgOutbox::new().await else {
        return;
    };
    let pool = pg.store.pool().clone();
    let schema = pg.schema.clone();
    a_loop_that_loses_its_store_takes_the_process_down(&pg.url(), || async move {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {schema}.fanout_cursors RENAME TO fanout_cursors_gone"
        )))
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
    pg.drop(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_fanout_whose_cursor_table_is_gone_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fanout.db");
    let database = format!("sqlite://{}", path.display());
    a_loop_that_loses_its_store_takes_the_process_down(&database, || async move {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute_batch("ALTER TABLE fanout_cursors RENAME TO fanout_cursors_gone")
            .unwrap();
    })
    .await;
}
