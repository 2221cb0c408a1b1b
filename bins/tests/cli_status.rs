//! `outbox status` on a seeded outbox (relay cursor, deliveries, an exception and a
//! fan-out log in one database) and a consumer database of its own, on SQLite and on
//! PostgreSQL: the text an
//! operator reads and the `--json` a script parses say the same thing.

use std::process::{Command, Output};

use chrono::Utc;
use outbox_core::{
    Account, DeliveryOutcome, DeliveryRecord, ExceptionKind, FanoutStore, MessageKind,
    NewException, OutboxEvent, Store,
};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore, SqliteStore, connect, enqueue};
use outbox_testkit::fixtures::{fanout_message, payout, settlement};

const DESTINATION: &str = "http://127.0.0.1:9/hop2/messages";

fn outbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .output()
        .expect("run outbox")
}

fn stdout(args: &[&str]) -> String {
    let out = outbox(args);
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn record(
    event: &OutboxEvent,
    outcome: DeliveryOutcome,
    code: Option<&str>,
    detail: &str,
) -> DeliveryRecord {
    DeliveryRecord {
        event_id: event.event_id,
        attempt: 1,
        outcome,
        ledger_tx_id: (outcome == DeliveryOutcome::Accepted).then_some(1),
        error_code: code.map(str::to_owned),
        detail: (!detail.is_empty()).then(|| detail.to_owned()),
        at: Utc::now(),
    }
}

/// The events to enqueue, in this order: merchants:1 #1 and #2, merchants:2 #1,
/// merchants:3 #1.
fn new_events() -> Vec<outbox_core::NewEvent> {
    vec![
        settlement("1", 500),
        payout("1", 200),
        settlement("2", 500),
        settlement("3", 500),
    ]
}

/// Over the enqueued `events`: merchants:1 #1 delivered and #2 failing (retrying),
/// merchants:2 #1 stopped by an idempotency mismatch, merchants:3 #1 not tried; the
/// relay's cursor after merchants:1 #1; two fan-out messages, one past the
/// destination's cursor.
async fn seed(store: &dyn Store, fanout: &dyn FanoutStore, events: &[OutboxEvent]) {
    store
        .save_cursor("relay", events[0].position)
        .await
        .unwrap();
    store
        .append_deliveries(&[
            record(&events[0], DeliveryOutcome::Accepted, None, ""),
            record(
                &events[1],
                DeliveryOutcome::Failed,
                Some("TRANSPORT"),
                "connection refused",
            ),
            record(
                &events[2],
                DeliveryOutcome::Failed,
                Some("IDEMPOTENCY_MISMATCH"),
                "another body under this key",
            ),
        ])
        .await
        .unwrap();
    store
        .raise_exception(
            &NewException::new(
                "relay",
                ExceptionKind::IdempotencyMismatch,
                Account::parse("merchants:2").unwrap(),
                1,
                "idempotency key reused with a different body: account stopped",
            )
            .with_event_id(events[2].event_id.to_string()),
        )
        .await
        .unwrap();
    fanout
        .append(
            "wh-1",
            &[
                fanout_message(
                    "0190f2a0-7b1c-7cc2-8a4e-000000000001",
                    "1",
                    1,
                    MessageKind::Committed,
                    1,
                ),
                fanout_message(
                    "0190f2a0-7b1c-7cc2-8a4e-000000000002",
                    "1",
                    2,
                    MessageKind::Committed,
                    2,
                ),
            ],
        )
        .await
        .unwrap();
    let stored = fanout.read_after(0, 10).await.unwrap();
    fanout
        .save_cursor(DESTINATION, stored[0].position)
        .await
        .unwrap();
}

/// The consumer holding merchants:5 #3 behind a missing #2 (`held_at` the literal of
/// unix second 1 in the store's timestamp column).
fn gap_sql(held_at: &str, payload: &str) -> String {
    format!(
        "INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES ('treasury', 'merchants:5', 1);
         INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
         VALUES ('treasury', 'merchants:5', 3, 'i3', 'committed', {payload}, {held_at});"
    )
}

/// `outbox status` (text and `--json`) on the seeded databases.
fn status_shows_the_seeded_state(
    database: &str,
    consumer: &str,
    events: &[OutboxEvent],
    first_cursor: u64,
) -> serde_json::Value {
    let args = [
        "status",
        "--database",
        database,
        "--consumer-database",
        consumer,
    ];
    let text = stdout(&args);
    for expected in [
        "relays (1)",
        "  relay: pending 3, oldest ",
        "held accounts (2)",
        &format!(
            "  merchants:1 #2 retrying event {}, 1 failed attempts",
            events[1].event_id
        ),
        "TRANSPORT: connection refused",
        &format!("  merchants:2 #1 STOPPED event {}", events[2].event_id),
        "idempotency key reused with a different body: account stopped",
        "fan-out destinations (1)",
        &format!("  {DESTINATION}: cursor {first_cursor}, pending 1, oldest "),
        "open gaps (1)",
        "  treasury merchants:5: applied through #1, missing #2, 1 held since 1970-01-01T00:00:01Z",
        "open exceptions in --database (1)",
        "idempotency_mismatch merchants:2 #1 (source relay",
        "open exceptions in --consumer-database (0)",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    assert!(
        !text.contains("merchants:3"),
        "not tried is not held:\n{text}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&[&args[..], &["--json"]].concat())).unwrap();
    let relay = &json["relays"][0];
    assert_eq!(relay["relay"], "relay");
    assert_eq!(relay["backlog"]["pending"], 3);
    assert_eq!(
        relay["backlog"]["oldest_at"]
            .as_str()
            .map(|t| chrono::DateTime::parse_from_rfc3339(t).unwrap()),
        Some(events[1].created_at.into())
    );
    let held = json["held_accounts"].as_array().unwrap();
    assert_eq!(held.len(), 2);
    assert_eq!(
        (held[0]["account"].as_str(), held[0]["state"].as_str()),
        (Some("merchants:1"), Some("retrying"))
    );
    assert_eq!(held[0]["attempts"], 1);
    assert_eq!(
        (held[1]["account"].as_str(), held[1]["state"].as_str()),
        (Some("merchants:2"), Some("stopped"))
    );
    assert_eq!(held[1]["event_id"], events[2].event_id.to_string());
    let destination = &json["destinations"][0];
    assert_eq!(destination["destination"], DESTINATION);
    assert_eq!(
        (
            destination["cursor"].as_u64(),
            destination["backlog"]["pending"].as_u64()
        ),
        (Some(first_cursor), Some(1))
    );
    let gap = &json["gaps"][0];
    assert_eq!(
        (gap["consumer"].as_str(), gap["account"].as_str()),
        (Some("treasury"), Some("merchants:5"))
    );
    assert_eq!(
        (
            gap["missing_from"].as_u64(),
            gap["lowest_held"].as_u64(),
            gap["held"].as_u64()
        ),
        (Some(2), Some(3), Some(1))
    );
    let open = &json["open_exceptions"];
    assert_eq!(open["database"].as_array().unwrap().len(), 1);
    assert_eq!(open["database"][0]["kind"], "idempotency_mismatch");
    assert_eq!(open["consumer-database"].as_array().unwrap().len(), 0);
    json
}

#[tokio::test]
async fn sqlite_status_shows_backlog_held_accounts_destinations_gaps_and_exceptions() {
    let dir = tempfile::tempdir().unwrap();
    let (outbox_path, consumer_path) =
        (dir.path().join("outbox.db"), dir.path().join("consumer.db"));
    let config = SqliteConfig::new(&outbox_path);
    let store = SqliteStore::open(config.clone()).await.unwrap();
    let mut conn = connect(&config).unwrap();
    let tx = conn.transaction().unwrap();
    let events: Vec<_> = new_events()
        .iter()
        .map(|e| enqueue(&tx, e).unwrap())
        .collect();
    tx.commit().unwrap();
    let fanout = SqliteFanoutStore::open(config).await.unwrap();
    seed(&store, &fanout, &events).await;
    let consumer = SqliteConfig::new(&consumer_path);
    drop(SqliteStore::open(consumer.clone()).await.unwrap());
    connect(&consumer)
        .unwrap()
        .execute_batch(&gap_sql("1000000", "x'00'"))
        .unwrap();
    let json = status_shows_the_seeded_state(
        &format!("sqlite://{}", outbox_path.display()),
        &format!("sqlite://{}", consumer_path.display()),
        &events,
        1,
    );
    assert!(json["postgres_horizon"].is_null(), "SQLite has no horizon");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_status_shows_backlog_held_accounts_destinations_gaps_and_exceptions() {
    use outbox_store_postgres::{PgConfig, PgFanoutStore, PgStore};
    use sqlx::{Connection, Executor};

    let server = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    match sqlx::PgConnection::connect(&server).await {
        Ok(conn) => drop(conn.close().await),
        Err(e) if std::env::var_os("OUTBOX_TEST_REQUIRE").is_some_and(|v| !v.is_empty()) => {
            panic!("PostgreSQL at {server} is unreachable ({e}) and OUTBOX_TEST_REQUIRE is set")
        }
        Err(e) => {
            eprintln!("SKIPPED: PostgreSQL at {server} is unreachable ({e})");
            return;
        }
    }
    let id = uuid::Uuid::now_v7().simple().to_string();
    let (outbox_schema, consumer_schema) = (
        format!("outbox_cli_st_{id}"),
        format!("outbox_cli_stc_{id}"),
    );
    let store = PgStore::open(PgConfig::new(&server).with_schema(&outbox_schema))
        .await
        .unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    let mut events = Vec::new();
    for event in new_events() {
        events.push(
            outbox_store_postgres::enqueue(&mut tx, &event)
                .await
                .unwrap(),
        );
    }
    tx.commit().await.unwrap();
    let fanout = PgFanoutStore::open(PgConfig::new(&server).with_schema(&outbox_schema))
        .await
        .unwrap();
    seed(&store, &fanout, &events).await;
    let first_cursor = fanout.read_after(0, 1).await.unwrap()[0].position;
    let consumer = PgStore::open(PgConfig::new(&server).with_schema(&consumer_schema))
        .await
        .unwrap();
    consumer
        .pool()
        .execute(sqlx::AssertSqlSafe(gap_sql("to_timestamp(1)", "'\\x00'")))
        .await
        .unwrap();
    drop((store, fanout, consumer));
    let separator = if server.contains('?') { '&' } else { '?' };
    let url = |schema: &str| format!("{server}{separator}schema={schema}");
    let outcome = std::panic::catch_unwind(|| {
        let json = status_shows_the_seeded_state(
            &url(&outbox_schema),
            &url(&consumer_schema),
            &events,
            first_cursor,
        );
        let horizon = &json["postgres_horizon"];
        assert!(
            horizon["oldest_age_seconds"].as_f64().is_some(),
            "{horizon}"
        );
        assert!(horizon["held_back"].as_u64().is_some(), "{horizon}");
    });
    let mut conn = sqlx::PgConnection::connect(&server).await.unwrap();
    for schema in [&outbox_schema, &consumer_schema] {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_missing_database_is_refused_naming_the_flag_and_creating_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.db");
    let out = outbox(&[
        "status",
        "--database",
        &format!("sqlite://{}", path.display()),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no SQLite database at") && stderr.contains("database"),
        "{stderr}"
    );
    assert!(!path.exists(), "status never creates a database");
}
