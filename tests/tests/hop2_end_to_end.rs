//! Hop 1 and Hop 2 end to end, every part a real process or service:
//! `outbox relay` → dev ledger → signed webhooks → `outbox fanout` → Kafka (Tansu) and
//! RabbitMQ → two `outbox consume` processes, one on a Postgres inbox, one on SQLite.
//!
//! The run includes ledger replays (the relay is SIGKILLed after a commit, so the
//! ledger answers the re-send with Idempotency-Hit and re-emits the webhook), a
//! reversal, a rejection notice, and a SIGKILLed `outbox fanout` restarted mid-stream.
//! At the end both treasury tables equal the ledger's balances for every merchant
//! account and no instruction was applied twice.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::postgres::PgOutbox;
use common::process::Process;
use common::*;
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, WebhookBackoff, WebhookTarget};
use outbox_testkit::auditor::{ConsumerView, audit};
use outbox_transport_http::WEBHOOK_PATH;

const MERCHANTS: [&str; 4] = ["e2e0", "e2e1", "e2e2", "e2e3"];

fn reachable(addr: &str) -> bool {
    addr.parse()
        .ok()
        .and_then(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).ok())
        .is_some()
}

/// Runs `outbox relay --once` to the end and checks it succeeded.
async fn relay_once(outbox: &Outbox, ledger_url: &str) -> String {
    let output = relay_process(&outbox.url(), ledger_url, &["--once"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "relay failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn sqlite_rows(path: &std::path::Path, sql: &str) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relay_ledger_fanout_kafka_and_rabbitmq_to_two_treasuries() {
    let brokers = std::env::var("OUTBOX_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let required = std::env::var("OUTBOX_TEST_REQUIRE").is_ok_and(|v| v == "1");
    for (what, addr) in [("Kafka", brokers.as_str()), ("RabbitMQ", "127.0.0.1:5672")] {
        if !reachable(addr) {
            assert!(!required, "OUTBOX_TEST_REQUIRE=1 and no {what} at {addr}");
            eprintln!("skipped: no {what} at {addr}");
            return;
        }
    }
    let Some(pg) = PgOutbox::new().await else {
        return;
    };
    let outbox = Outbox::new().await;
    let dir = outbox.dir().to_path_buf();
    let suffix = format!("{:x}", fastrand::u64(..));
    let topic = format!("e2e-ledger-events-{suffix}");
    let exchange = format!("e2e-ledger-events-{suffix}");
    let amqp = format!("amqp://guest:guest@127.0.0.1:5672/%2f?exchange={exchange}&queues=4");
    let fanout_port = outbox_testkit::ports::free_port();

    let ledger = DevLedger::start(DevLedgerConfig {
        webhooks: vec![WebhookTarget {
            url: format!("http://127.0.0.1:{fanout_port}{WEBHOOK_PATH}"),
            secret: SECRET.to_owned(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            max_attempts: 1_000,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap();

    let fanout_args: Vec<String> = [
        "fanout",
        "--listen",
        &format!("127.0.0.1:{fanout_port}"),
        "--database",
        &format!("sqlite://{}", dir.join("fanout.db").display()),
        "--secret",
        SECRET,
        "--to",
        &format!("kafka://{brokers}/{topic}?partitions=4"),
        "--to",
        &amqp,
        "--poll-interval-ms",
        "50",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let fanout = Process::start("fanout", &fanout_args, "fanout: intake on").await;
    let kafka_consumer = Process::start(
        "consume (kafka → postgres)",
        &[
            "consume".into(),
            "--from".into(),
            format!("kafka://{brokers}/{topic}?group=e2e-{suffix}"),
            "--database".into(),
            pg.url(),
            "--name".into(),
            "treasury-pg".into(),
        ],
        "consume: treasury-pg",
    )
    .await;
    let sqlite_treasury = dir.join("treasury.db");
    let amqp_consumer = Process::start(
        "consume (rabbitmq → sqlite)",
        &[
            "consume".into(),
            "--from".into(),
            amqp.clone(),
            "--database".into(),
            format!("sqlite://{}", sqlite_treasury.display()),
            "--name".into(),
            "treasury-sqlite".into(),
        ],
        "consume: treasury-sqlite",
    )
    .await;

    // Round 1: funding, payouts, a payout refused for insufficient funds, and a
    // reversal. The relay is SIGKILLed right after one commit, so the re-send is a
    // ledger replay that re-emits its webhook.
    let mut events = Vec::new();
    for (i, m) in MERCHANTS.iter().enumerate() {
        events.push(fund(m, 1_000_000 * (i as u64 + 1)));
        events.push(payout(m, 250_000));
    }
    events.push(payout("e2e1", 900_000_000)); // more than e2e1 holds: INSUFFICIENT_FUND
    let first = outbox.enqueue(&events);
    let reversal = outbox.enqueue(&[revert("merchants:e2e2", first[5].event_id)]);
    let target = first[3].event_id;
    ledger
        .faults()
        .hold_after_commit_matching(&target.to_string(), Duration::from_secs(60));
    let mut relay = relay_process(&outbox.url(), &ledger.url(), &["--once"])
        .spawn()
        .unwrap();
    wait_for_ledger_commit(&ledger, target, &mut relay).await;
    relay.kill().await.unwrap();
    ledger.faults().clear();
    let stdout = relay_once(&outbox, &ledger.url()).await;
    assert!(
        !stdout.contains("replayed 0,"),
        "no replay after the kill: {stdout}"
    );
    assert!(stdout.contains("rejected 1,"), "{stdout}");

    // Round 2 while `outbox fanout` is SIGKILLed and restarted: the ledger retries
    // its webhooks, the fan-out re-sends what it had not confirmed.
    fanout.kill().await;
    let mut second = Vec::new();
    for m in MERCHANTS {
        second.push(payout(m, 125_000));
        second.push(fund(m, 10_000));
    }
    outbox.enqueue(&second);
    relay_once(&outbox, &ledger.url()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fanout = Process::start("fanout (restarted)", &fanout_args, "fanout: intake on").await;

    let instructions = events.len() + reversal.len() + second.len();
    let pg_pool = pg.store.pool().clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let on_sqlite =
            sqlite_rows(&sqlite_treasury, "SELECT 'n', COUNT(*) FROM inbox_messages")[0].1;
        let on_pg: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inbox_messages")
            .fetch_one(&pg_pool)
            .await
            .unwrap();
        if on_sqlite as usize >= instructions && on_pg as usize >= instructions {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "consumers applied {on_sqlite} (sqlite) and {on_pg} (postgres) of {instructions}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // One refusal and one reversal reached both consumers (the auditor checks the rest).
    let kinds = sqlite_rows(
        &sqlite_treasury,
        "SELECT kind, COUNT(*) FROM inbox_messages GROUP BY kind",
    );
    let kinds: BTreeMap<_, _> = kinds.into_iter().collect();
    assert_eq!(kinds.get("rejected"), Some(&1), "{kinds:?}");
    assert_eq!(kinds.get("reverted"), Some(&1), "{kinds:?}");
    let pg_kinds: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, COUNT(*) FROM inbox_messages GROUP BY kind ORDER BY kind")
            .fetch_all(&pg_pool)
            .await
            .unwrap();
    assert_eq!(pg_kinds.into_iter().collect::<BTreeMap<_, _>>(), kinds);

    let client = client(&ledger, Duration::from_secs(10));
    let sqlite_balances: BTreeMap<String, i64> = sqlite_rows(
        &sqlite_treasury,
        "SELECT account, balance FROM treasury_balances WHERE account LIKE 'merchants:%'",
    )
    .into_iter()
    .collect();
    let pg_balances: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT account, balance FROM treasury_balances WHERE account LIKE 'merchants:%'",
    )
    .fetch_all(&pg_pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(sqlite_balances, pg_balances, "both treasuries agree");
    assert_eq!(
        sqlite_balances.len(),
        MERCHANTS.len() * 2,
        "available and pending per merchant"
    );
    // The reversal put e2e2's first payout back.
    assert_eq!(sqlite_balances["merchants:e2e2:payouts:pending"], 125_000);

    // The auditor, from the outbox alone: every event posted or refused once and in
    // order on the ledger, and each consumer applied each exactly once, at its
    // sequence, holding nothing, with the ledger's balances.
    let sqlite_inbox = outbox_store_sqlite::SqliteStore::open(
        outbox_store_sqlite::SqliteConfig::new(&sqlite_treasury),
    )
    .await
    .unwrap();
    let wide = |balances: &BTreeMap<String, i64>| {
        balances
            .iter()
            .map(|(account, balance)| (account.clone(), i128::from(*balance)))
            .collect()
    };
    let consumers = [
        ConsumerView {
            name: "treasury-sqlite".into(),
            inbox: &sqlite_inbox,
            balances: Some(wide(&sqlite_balances)),
        },
        ConsumerView {
            name: "treasury-pg".into(),
            inbox: &pg.store,
            balances: Some(wide(&pg_balances)),
        },
    ];
    let report = audit(&outbox.store, &client, &consumers).await.unwrap();
    report.assert_clean();
    assert_eq!(
        (report.events, report.applied),
        (instructions, 2 * instructions),
        "{report}"
    );

    // The ledger's replays reached the intake and were absorbed there.
    let deliveries = sqlite_rows(
        &dir.join("fanout.db"),
        "SELECT 'n', COUNT(*) FROM fanout_deliveries",
    )[0]
    .1;
    let stored = sqlite_rows(
        &dir.join("fanout.db"),
        "SELECT 'n', COUNT(*) FROM fanout_messages",
    )[0]
    .1;
    assert_eq!(
        stored as usize, instructions,
        "one stored message per instruction"
    );
    assert!(
        deliveries > stored,
        "replays re-emitted webhooks: {deliveries} deliveries, {stored} messages"
    );

    let fanout_out = fanout.terminate().await;
    assert!(
        fanout_out.iter().any(|l| l.starts_with("fanout kafka:")),
        "{fanout_out:?}"
    );
    let kafka_out = kafka_consumer.terminate().await;
    let amqp_out = amqp_consumer.terminate().await;
    for out in [&kafka_out, &amqp_out] {
        let summary = out
            .iter()
            .find(|l| l.contains(": applied "))
            .expect("a summary line");
        assert!(summary.contains("conflicts 0"), "{summary}");
    }
    ledger.shutdown().await;
    pg.drop(None).await;
}
