//! Each payment service as a client sees it — the real binary over HTTP on loopback,
//! on a real database — and then its outbox delivered by the relay to the dev ledger
//! and audited: every payout the service accepted reached the ledger once, in order.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_core::{DispatchConfig, Dispatcher, EventId, Ledger, Relay, RunMode, Store};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
use outbox_testkit::ports::free_port;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `binary` with `args` on a free port; returns it and its base URL once it
/// says it listens.
async fn start(binary: &str, args: &[&str]) -> (Child, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(binary)
        .args(args)
        .args(["--listen", &listen])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the service said it listens")
        .unwrap()
        .unwrap_or_default();
    assert!(line.contains("listening"), "{line}");
    (child, format!("http://{listen}"))
}

async fn post(base: &str, body: &str) -> (StatusCode, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}/payouts"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

fn payout(id: &str, amount: u64) -> String {
    json!({"payout_id": id, "merchant": "4471", "amount_minor": amount, "asset": "USD/2"})
        .to_string()
}

/// What a client meets: a payout written once, its retry answered from it, every bad
/// field named. Returns how many payouts the service holds (2).
async fn exercise(base: &str) -> usize {
    let (status, first) = post(base, &payout("po_1", 48_500_000)).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["sequence"], 1);
    let (status, again) = post(base, &payout("po_1", 48_500_000)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a retry is answered from the payout"
    );
    assert_eq!(again, first);
    let (status, conflict) = post(base, &payout("po_1", 1)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["field"], "payout_id");

    let float = r#"{"payout_id":"po_2","merchant":"4471","amount_minor":12.5,"asset":"USD/2"}"#;
    let (status, malformed) = post(base, float).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{malformed}");
    assert!(
        malformed["message"]
            .as_str()
            .unwrap()
            .contains("amount_minor"),
        "{malformed}"
    );
    let extra =
        r#"{"payout_id":"po_3","merchant":"4471","amount_minor":1,"asset":"USD/2","fee":1}"#;
    let (status, unknown) = post(base, extra).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        unknown["message"].as_str().unwrap().contains("fee"),
        "{unknown}"
    );
    let lower = r#"{"payout_id":"po_4","merchant":"4471","amount_minor":1,"asset":"usd"}"#;
    let (status, invalid) = post(base, lower).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{invalid}");
    assert_eq!(invalid["field"], "asset");
    let (status, zero) = post(base, &payout("po_5", 0)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(zero["field"], "amount_minor");

    let (status, second) = post(base, &payout("po_6", 1_500_000)).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["sequence"], 2, "the merchant's next sequence");
    2
}

/// Funds the merchant on a fresh dev ledger, drains `store`'s outbox into it with the
/// relay's dispatcher, and audits: each payout posted once, in sequence order.
async fn deliver_and_audit<S>(store: S, relay: Box<dyn Relay>, payouts: usize)
where
    S: Store + CompletenessStore + Clone + 'static,
{
    let dev = DevLedger::start(DevLedgerConfig {
        create_ledgers: vec!["payments".into()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap();
    let ledger =
        Arc::new(FormanceLedger::new(&FormanceConfig::new(dev.url(), "payments")).unwrap());
    let funding = br#"{"postings":[{"source":"world","destination":"merchants:4471:available","amount":50000000,"asset":"USD/2"}]}"#;
    ledger.post(EventId::new(), funding).await.unwrap();
    let config = DispatchConfig {
        poll_interval: Duration::from_millis(20),
        ..DispatchConfig::default()
    };
    let ledger_dyn: Arc<dyn Ledger> = ledger.clone();
    let dispatcher = Dispatcher::open(Arc::new(store.clone()), relay, ledger_dyn, config)
        .await
        .unwrap();
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let summary = dispatcher.run(RunMode::Drain, stopped).await.unwrap();
    assert_eq!(summary.accepted, payouts as u64, "{summary:?}");
    let report = outbox_testkit::auditor::audit(&store, ledger.as_ref(), &[])
        .await
        .unwrap();
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.ledger_transactions),
        (payouts, payouts, payouts + 1),
        "{report}"
    );
    let balances = ledger
        .aggregate_balances("merchants:4471:payouts:pending")
        .await
        .unwrap();
    assert_eq!(
        balances.values().copied().sum::<i128>(),
        48_500_000 + 1_500_000
    );
}

#[tokio::test]
async fn the_sqlite_service_writes_each_payout_with_its_event_and_the_relay_delivers_them() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("payments.db");
    let (service, base) = start(
        env!("CARGO_BIN_EXE_payment-service-sqlite"),
        &["--database", db.to_str().unwrap()],
    )
    .await;
    let payouts = exercise(&base).await;
    drop(service);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let count = |table: &str| -> i64 {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    // Refused requests wrote nothing: one outbox event per payout row.
    assert_eq!((count("payouts"), count("outbox_events")), (2, 2));
    let store = outbox_store_sqlite::SqliteStore::open(outbox_store_sqlite::SqliteConfig::new(&db))
        .await
        .unwrap();
    let relay = store.polling_relay("relay").await.unwrap();
    deliver_and_audit(store, Box::new(relay), payouts).await;
}

#[tokio::test]
async fn the_postgres_service_writes_each_payout_with_its_event_and_the_relay_delivers_them() {
    let server = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!("payments_{}", uuid::Uuid::now_v7().simple());
    let config = outbox_store_postgres::PgConfig::new(&server).with_schema(&schema);
    let store = match outbox_store_postgres::PgStore::open(config).await {
        Ok(store) => store,
        Err(e) if std::env::var_os("OUTBOX_TEST_REQUIRE").is_none() => {
            eprintln!("SKIPPED: no PostgreSQL at {server} ({e})");
            return;
        }
        Err(e) => panic!("PostgreSQL is required (OUTBOX_TEST_REQUIRE) but unreachable: {e}"),
    };
    let (service, base) = start(
        env!("CARGO_BIN_EXE_payment-service-postgres"),
        &["--database", &server, "--schema", &schema],
    )
    .await;
    let payouts = exercise(&base).await;
    drop(service);
    let count = |table: &'static str| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {table}"
            )))
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        (count("payouts").await, count("outbox_events").await),
        (2, 2)
    );
    let relay = store.polling_relay("relay").await.unwrap();
    deliver_and_audit(store.clone(), Box::new(relay), payouts).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(store.pool())
        .await
        .unwrap();
}
