//! The webhook intake over real HTTP on loopback, in front of the real fan-out stores:
//! a verified delivery is appended to the fan-out store before the 2xx; anything
//! unsigned, stale, oversized or malformed is refused with nothing stored; a store that
//! cannot write makes the ledger retry (5xx), and the retry is stored once it can.
//!
//! Every case runs on `outbox_store_sqlite::SqliteFanoutStore` in a temporary
//! directory and checks what was really stored by reading it back through the
//! `FanoutStore` trait (and, where the trait cannot see it, the `fanout_deliveries`
//! table through a second SQLite connection). The store-down cases use real failures:
//! a SQLite file whose write lock another connection holds, a SQLite schema broken
//! under the store, a `PgFanoutStore` whose append lock another session holds on a live
//! PostgreSQL server, and a `PgFanoutStore` whose server does not answer.
//!
//! PostgreSQL: `OUTBOX_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it cannot be reached the test that
//! needs it says "skipped: no PostgreSQL at ..." and passes, unless
//! `OUTBOX_TEST_REQUIRE=1`: then it fails.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use outbox_core::{FanoutStore, MessageKind, StoredMessage, Wakeup};
use outbox_ledger_formance::{FormanceWebhookDecoder, WebhookVerifier};
use outbox_store_postgres::{PgConfig, PgFanoutStore};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore};
use outbox_transport_http::{ReceiverConfig, RunningReceiver, start_intake};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tempfile::TempDir;

use common::{LEDGER_SECRET, TRACEPARENT, ledger_decoder, now, post_signed};

const INSTRUCTION_ID: &str = "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59";
const TRACESTATE: &str = "rojo=00f067aa0ba902b7";

fn body(tx: u64, event_id: &str, sequence: u64) -> Vec<u8> {
    format!(
        r#"{{"idempotency_key":"","date":"2026-10-07T10:00:00.000000Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{{"accountMetadata":{{}},"ledger":"payouts","transactions":[{{"id":{tx},"metadata":{{"outbox_account":"merchants:4471","outbox_event_id":"{event_id}","outbox_sequence":"{sequence}"}},"postings":[{{"amount":48500000,"asset":"USD/2","destination":"merchants:4471:payouts:pending","source":"merchants:4471:available"}}]}}]}}}}"#
    )
    .into_bytes()
}

fn payout() -> Vec<u8> {
    body(1, INSTRUCTION_ID, 1)
}

/// The one ledger transaction of [`payout`], as JSON.
fn payout_transaction() -> serde_json::Value {
    let webhook: serde_json::Value = serde_json::from_slice(&payout()).unwrap();
    webhook["payload"]["transactions"][0].clone()
}

/// A real SQLite fan-out store in its own temporary directory.
struct Sqlite {
    _dir: TempDir,
    path: PathBuf,
    store: Arc<SqliteFanoutStore>,
}

impl Sqlite {
    async fn open() -> Self {
        Self::open_with(|_| {}).await
    }

    async fn open_with(tune: impl FnOnce(&mut SqliteConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fanout.db");
        let mut config = SqliteConfig::new(&path);
        tune(&mut config);
        let store = SqliteFanoutStore::open(config).await.unwrap();
        Self {
            _dir: dir,
            path,
            store: Arc::new(store),
        }
    }

    /// What the store holds, read through the `FanoutStore` trait.
    async fn stored(&self) -> Vec<StoredMessage> {
        self.store.read_after(0, 100).await.unwrap()
    }

    /// A second, independent connection to the same file, for what the trait does not
    /// show (and to prove a write was committed, not only visible to the store's own
    /// connection).
    fn connection(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(&self.path).unwrap()
    }

    /// The webhook ids the store has recorded (`fanout_deliveries`), sorted.
    fn delivery_ids(&self) -> Vec<String> {
        delivery_ids(&self.path)
    }
}

fn delivery_ids(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT delivery_id FROM fanout_deliveries ORDER BY delivery_id")
        .unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<Vec<String>>>()
        .unwrap()
}

async fn start(store: Arc<dyn FanoutStore>) -> RunningReceiver {
    let mut config = ReceiverConfig::new(([127, 0, 0, 1], 0).into());
    config.max_body_bytes = 4096;
    start_intake(
        config,
        ledger_decoder(LEDGER_SECRET),
        store,
        Some(Wakeup::new()),
    )
    .await
    .unwrap()
}

/// POSTs `body` signed as delivery `id`; returns the status and the JSON answer.
async fn deliver_json(
    receiver: &RunningReceiver,
    id: &str,
    body: Vec<u8>,
) -> (u16, serde_json::Value) {
    let url = receiver.webhook_url();
    post_signed(&url, id, now(), LEDGER_SECRET, &body.clone(), body, &[]).await
}

async fn deliver(receiver: &RunningReceiver, id: &str, body: Vec<u8>) -> u16 {
    deliver_json(receiver, id, body).await.0
}

/// The one stored message is the payout of [`payout`], nothing else.
fn assert_only_the_payout(stored: &[StoredMessage]) {
    assert_eq!(stored.len(), 1, "{stored:?}");
    let m = &stored[0].message;
    assert_eq!(
        (
            m.instruction_id.as_str(),
            m.account.as_str(),
            m.sequence,
            m.kind
        ),
        (INSTRUCTION_ID, "merchants:4471", 1, MessageKind::Committed),
    );
}

#[tokio::test]
async fn a_signed_delivery_is_stored_then_acknowledged() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    let url = receiver.webhook_url();
    let before = Utc::now();
    let (status, _) = post_signed(
        &url,
        "wh-1",
        now(),
        LEDGER_SECRET,
        &payout(),
        payout(),
        &[("traceparent", TRACEPARENT), ("tracestate", TRACESTATE)],
    )
    .await;
    assert_eq!(status, 204);
    let after = Utc::now();

    // Committed by the time of the 204: a store opened afresh on the same file (its
    // own connection) reads it.
    let reopened = SqliteFanoutStore::open(SqliteConfig::new(&db.path))
        .await
        .unwrap();
    let stored = reopened.read_after(0, 100).await.unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(
        stored,
        db.stored().await,
        "both connections see the same log"
    );
    let s = &stored[0];
    assert_eq!(s.position, 1);
    assert!(
        // Microsecond precision in the store.
        s.received_at >= before - chrono::Duration::milliseconds(1) && s.received_at <= after,
        "received_at {} not within [{before}, {after}]",
        s.received_at
    );
    let m = &s.message;
    assert_eq!(
        (
            m.instruction_id.as_str(),
            m.account.as_str(),
            m.sequence,
            m.kind,
            m.ledger.as_str(),
            m.ledger_tx_id,
            m.traceparent.as_deref(),
            m.tracestate.as_deref(),
        ),
        (
            INSTRUCTION_ID,
            "merchants:4471",
            1,
            MessageKind::Committed,
            "payouts",
            Some(1),
            Some(TRACEPARENT),
            Some(TRACESTATE),
        )
    );
    let payload: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(
        payload,
        payout_transaction(),
        "the payload is the transaction"
    );
    assert_eq!(db.delivery_ids(), ["wh-1"]);
    receiver.shutdown().await;
}

#[tokio::test]
async fn a_retried_delivery_and_a_replay_re_emit_are_acknowledged_and_stored_once() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    assert_eq!(deliver(&receiver, "wh-1", payout()).await, 204);
    let first = db.stored().await;
    assert_only_the_payout(&first);
    // The webhooks service retries the same delivery (same id) ...
    assert_eq!(deliver(&receiver, "wh-1", payout()).await, 204);
    // ... and the ledger re-emits the transaction on an idempotent replay (new id).
    assert_eq!(deliver(&receiver, "wh-2", payout()).await, 204);
    assert_eq!(
        db.delivery_ids(),
        ["wh-1", "wh-2"],
        "both webhook ids reached the store, the retried one recorded once"
    );
    let stored = db.stored().await;
    assert_eq!(stored, first, "the store kept one message, unchanged");
    receiver.shutdown().await;
}

#[tokio::test]
async fn unsigned_badly_signed_and_stale_deliveries_are_refused_with_nothing_stored() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    let url = receiver.webhook_url();

    let unsigned = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body(payout())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);

    let (status, json) = post_signed(
        &url,
        "wh-2",
        now(),
        "another-secret",
        &payout(),
        payout(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-signature")),
        "{json}"
    );

    let tampered = body(1, INSTRUCTION_ID, 2);
    let (status, _) =
        post_signed(&url, "wh-3", now(), LEDGER_SECRET, &payout(), tampered, &[]).await;
    assert_eq!(status, 401);

    let (status, json) = post_signed(
        &url,
        "wh-4",
        now() - 600,
        LEDGER_SECRET,
        &payout(),
        payout(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-timestamp")),
        "{json}"
    );

    assert_eq!(db.stored().await, [], "a refused delivery was stored");
    assert!(
        db.delivery_ids().is_empty(),
        "a refused delivery reached the store"
    );

    // The same store does take a signed delivery: the refusals above were the
    // intake's, not a store that could not write.
    assert_eq!(deliver(&receiver, "wh-5", payout()).await, 204);
    assert_only_the_payout(&db.stored().await);
    receiver.shutdown().await;
}

/// The ledger's secret being rotated out, still accepted while the rotation runs.
const PREVIOUS_LEDGER_SECRET: &str = "b2xkLXNlY3JldC1vZi0yNC1ieXRlcy0x";

#[tokio::test]
async fn during_a_secret_rotation_either_secret_is_accepted_and_an_unknown_one_stores_nothing() {
    let db = Sqlite::open().await;
    let rotating = WebhookVerifier::new(LEDGER_SECRET)
        .unwrap()
        .with_previous_secret(PREVIOUS_LEDGER_SECRET)
        .unwrap();
    let receiver = start_intake(
        ReceiverConfig::new(([127, 0, 0, 1], 0).into()),
        Arc::new(FormanceWebhookDecoder::new(rotating)),
        db.store.clone(),
        Some(Wakeup::new()),
    )
    .await
    .unwrap();
    let url = receiver.webhook_url();

    // A delivery signed with an unknown secret is refused before anything is stored.
    let (status, json) = post_signed(
        &url,
        "wh-unknown",
        now(),
        "dW5rbm93bi1zZWNyZXQtb2YtMjQtYnl0ZXM=",
        &payout(),
        payout(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("formance-webhook-signature")),
        "{json}"
    );
    assert_eq!(
        db.stored().await,
        [],
        "a delivery with an unknown secret was stored"
    );
    assert!(db.delivery_ids().is_empty());

    // Still signed with the old secret (the ledger's config not switched yet, or a
    // retry of a delivery first signed before the switch): accepted and stored.
    let (status, json) = post_signed(
        &url,
        "wh-old",
        now(),
        PREVIOUS_LEDGER_SECRET,
        &payout(),
        payout(),
        &[],
    )
    .await;
    assert_eq!(status, 204, "{json}");
    assert_only_the_payout(&db.stored().await);

    // Signed with the new one: accepted too.
    let second = body(2, "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a5a", 2);
    let (status, json) = post_signed(
        &url,
        "wh-new",
        now(),
        LEDGER_SECRET,
        &second,
        second.clone(),
        &[],
    )
    .await;
    assert_eq!(status, 204, "{json}");
    assert_eq!(db.stored().await.len(), 2);
    assert_eq!(db.delivery_ids(), ["wh-new", "wh-old"]);
    receiver.shutdown().await;

    // Once the rotation is over (no previous secret), the old secret is refused.
    let receiver = start(db.store.clone()).await;
    let third = body(3, "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a5b", 3);
    let (status, _) = post_signed(
        &receiver.webhook_url(),
        "wh-late",
        now(),
        PREVIOUS_LEDGER_SECRET,
        &third,
        third.clone(),
        &[],
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        db.stored().await.len(),
        2,
        "nothing stored after the refusal"
    );
    receiver.shutdown().await;

    // An empty previous secret is a configuration error, not "anyone may sign": no
    // decoder, so no intake.
    let err = WebhookVerifier::new(LEDGER_SECRET)
        .unwrap()
        .with_previous_secret("")
        .unwrap_err();
    assert_eq!(err.context("field"), Some("previous_secret"), "{err}");
}

/// A delivery must say it is JSON: any other content type (or none) is refused 415
/// naming the header, before anything is verified or stored.
#[tokio::test]
async fn a_delivery_not_sent_as_json_is_refused_415_naming_the_header_with_nothing_stored() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    let url = receiver.webhook_url();
    let body = payout();
    for content_type in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let (status, answer) = post_signed(
            &url,
            "wh-ct",
            now(),
            LEDGER_SECRET,
            &body,
            body.clone(),
            &[("content-type", content_type)],
        )
        .await;
        assert_eq!(status, 415, "content-type {content_type:?}: {answer}");
        assert_eq!(answer["field"], "header content-type", "{answer}");
    }
    assert!(
        db.delivery_ids().is_empty(),
        "a refused delivery reached the store"
    );
    // JSON with parameters is JSON.
    let (status, _) = post_signed(
        &url,
        "wh-ct",
        now(),
        LEDGER_SECRET,
        &body,
        body.clone(),
        &[("content-type", "Application/JSON; charset=utf-8")],
    )
    .await;
    assert_eq!(status, 204);
    assert_only_the_payout(&db.stored().await);
    receiver.shutdown().await;
}

#[tokio::test]
async fn oversized_and_invalid_json_deliveries_are_refused_with_nothing_stored() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    let huge = format!("{{\"type\":\"x\",\"payload\":\"{}\"}}", "a".repeat(8192)).into_bytes();
    assert_eq!(deliver(&receiver, "wh-5", huge).await, 413);

    let url = receiver.webhook_url();
    let broken = b"{\"type\":".to_vec();
    let (status, json) = post_signed(
        &url,
        "wh-6",
        now(),
        LEDGER_SECRET,
        &broken,
        broken.clone(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (400, Some("body")),
        "{json}"
    );

    let without_ledger = String::from_utf8(payout())
        .unwrap()
        .replace(r#""ledger":"payouts","#, "")
        .into_bytes();
    let (status, json) = post_signed(
        &url,
        "wh-7",
        now(),
        LEDGER_SECRET,
        &without_ledger,
        without_ledger.clone(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (400, Some("payload.ledger")),
        "{json}"
    );

    assert_eq!(db.stored().await, [], "a refused delivery was stored");
    assert!(
        db.delivery_ids().is_empty(),
        "a refused delivery reached the store"
    );
    receiver.shutdown().await;
}

#[tokio::test]
async fn an_event_without_outbox_messages_is_acknowledged_without_an_append() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    let schema = br#"{"type":"ledger.inserted_schema","payload":{"ledger":"payouts","schema":{}}}"#;
    assert_eq!(deliver(&receiver, "wh-8", schema.to_vec()).await, 204);
    assert_eq!(db.stored().await, []);
    // No append at all: an empty append would still have recorded the webhook id.
    assert!(db.delivery_ids().is_empty(), "{:?}", db.delivery_ids());
    receiver.shutdown().await;
}

/// SQLite's write lock held by another connection (another process writing the same
/// file): the append waits out `busy_timeout`, gets BUSY (transient) and the intake
/// answers 503 with nothing stored; once the lock is released the ledger's retry of the
/// same signed delivery is stored and answered 2xx.
#[tokio::test]
async fn a_sqlite_store_locked_by_another_writer_makes_the_ledger_retry() {
    let db = Sqlite::open_with(|config| config.busy_timeout = Duration::from_millis(200)).await;
    let receiver = start(db.store.clone()).await;

    let locker = db.connection();
    locker
        .execute_batch(
            "BEGIN EXCLUSIVE;
             INSERT INTO fanout_cursors (transport, position, updated_at)
             VALUES ('lock-holder', 0, 0);",
        )
        .unwrap();
    let (status, json) = deliver_json(&receiver, "wh-9", payout()).await;
    assert_eq!(status, 503, "{json}");
    assert!(
        json["error"].as_str().is_some_and(|e| e.contains("busy")),
        "{json}"
    );
    // WAL: readers are not blocked by the writer, so the log can be checked now.
    assert_eq!(db.stored().await, [], "stored while the file was locked");

    locker.execute_batch("ROLLBACK").unwrap();
    drop(locker);
    assert_eq!(deliver(&receiver, "wh-9", payout()).await, 204);
    assert_only_the_payout(&db.stored().await);
    assert_eq!(db.delivery_ids(), ["wh-9"]);
    receiver.shutdown().await;
}

/// A permanent store error, from a real store: the fan-out table is renamed away under
/// the running store (a broken schema), so the append fails with "no such table", which
/// is not transient, and the intake answers 500 (the ledger retries 5xx too). The
/// append is all or nothing: not even the webhook id is kept, so once the table is back
/// the retry of the same delivery is stored.
#[tokio::test]
async fn a_sqlite_store_that_fails_permanently_answers_500_and_keeps_nothing() {
    let db = Sqlite::open().await;
    let receiver = start(db.store.clone()).await;
    let admin = db.connection();
    admin
        .execute_batch("ALTER TABLE fanout_messages RENAME TO fanout_messages_away")
        .unwrap();

    let (status, json) = deliver_json(&receiver, "wh-10", payout()).await;
    assert_eq!(status, 500, "{json}");
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.contains("no such table")),
        "{json}"
    );
    assert!(
        db.delivery_ids().is_empty(),
        "a failed append recorded its delivery"
    );

    admin
        .execute_batch("ALTER TABLE fanout_messages_away RENAME TO fanout_messages")
        .unwrap();
    assert_eq!(db.stored().await, [], "a failed append stored a message");
    assert_eq!(deliver(&receiver, "wh-10", payout()).await, 204);
    assert_only_the_payout(&db.stored().await);
    assert_eq!(db.delivery_ids(), ["wh-10"]);
    receiver.shutdown().await;
}

// --- PostgreSQL ---------------------------------------------------------------------

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn pg_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_PG_URL.to_owned())
}

fn pg_required() -> bool {
    std::env::var_os("OUTBOX_TEST_REQUIRE").is_some_and(|v| v == "1")
}

/// Written to the process's stderr past the harness's capture, so a skip shows.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Whether the server answers; unreachable with `OUTBOX_TEST_REQUIRE=1`: panics.
async fn pg_available() -> bool {
    let url = pg_url();
    let problem =
        match tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&url)).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                return true;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within 5 s".to_owned(),
        };
    assert!(
        !pg_required(),
        "no PostgreSQL at {url} ({problem}) and OUTBOX_TEST_REQUIRE=1"
    );
    say(&format!(
        "skipped: no PostgreSQL at {url} ({problem}); set OUTBOX_TEST_REQUIRE=1 to fail instead"
    ));
    false
}

/// This test's schema, dropped (CASCADE) when the test ends, failed or not.
#[derive(Debug)]
struct PgSchema(String);

impl PgSchema {
    fn fresh() -> Self {
        Self(format!(
            "outbox_pg_t_intake_{}",
            uuid::Uuid::now_v7().simple()
        ))
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let schema = self.0.clone();
        // Drop cannot await inside the test's runtime: a thread with its own runtime
        // does it, bounded by lock_timeout in case a test connection still holds a lock.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime
                .block_on(async {
                    let mut conn = PgConnection::connect(&pg_url()).await?;
                    sqlx::raw_sql(AssertSqlSafe(format!(
                        "SET lock_timeout = '3s'; DROP SCHEMA IF EXISTS {schema} CASCADE"
                    )))
                    .execute(&mut conn)
                    .await?;
                    conn.close().await
                })
                .ok()
        })
        .join();
        if !matches!(dropped, Ok(Some(()))) {
            say(&format!("note: schema {} was not dropped", self.0));
        }
    }
}

/// A `PgFanoutStore` opened on a live server, whose append lock (the advisory lock
/// every append of the schema takes first) another session holds, as a stalled
/// appender would: the append fails after its lock timeout with 55P03
/// `lock_not_available`, transient, and the intake answers 503 with nothing stored.
/// Once the session lets go, the ledger's retry is stored and answered 2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_that_cannot_take_its_append_lock_makes_the_ledger_retry() {
    if !pg_available().await {
        return;
    }
    let schema = PgSchema::fresh();
    let store = PgFanoutStore::open(PgConfig::new(pg_url()).with_schema(&schema.0))
        .await
        .unwrap()
        .with_append_lock_timeout(Duration::from_millis(200));
    let store = Arc::new(store);
    let receiver = start(store.clone()).await;

    let mut holder = PgConnection::connect(&pg_url()).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || '.fanout_append', 0))")
        .bind(&schema.0)
        .execute(&mut holder)
        .await
        .unwrap();

    let (status, json) = deliver_json(&receiver, "wh-pg-1", payout()).await;
    assert_eq!(status, 503, "{json}");
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.contains("lock timeout")),
        "{json}"
    );
    assert_eq!(store.read_after(0, 100).await.unwrap(), []);

    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    let _ = holder.close().await;
    assert_eq!(deliver(&receiver, "wh-pg-1", payout()).await, 204);
    let stored = store.read_after(0, 100).await.unwrap();
    assert_only_the_payout(&stored);
    assert_eq!(stored[0].message.ledger_tx_id, Some(1));
    // The retry was the first delivery the store recorded under that id: a second one
    // is recognised and stores nothing.
    assert_eq!(deliver(&receiver, "wh-pg-1", payout()).await, 204);
    assert_eq!(store.read_after(0, 100).await.unwrap(), stored);

    receiver.shutdown().await;
    store.pool().close().await;
    drop(schema);
}

/// A `PgFanoutStore` whose server does not answer (a pool pointed at a closed port):
/// the append cannot get a connection, which is transient, and the intake answers 503
/// rather than hang or 500. Needs no server.
#[tokio::test]
async fn a_postgres_store_whose_server_is_down_makes_the_ledger_retry() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let options = PgConfig::new(format!("postgres://postgres@127.0.0.1:{port}/test"))
        .connect_options()
        .unwrap();
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy_with(options);
    let store = Arc::new(PgFanoutStore::from_pool(pool));
    let receiver = start(store.clone()).await;

    let (status, json) = deliver_json(&receiver, "wh-pg-2", payout()).await;
    assert_eq!(status, 503, "{json}");
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("postgres")),
        "{json}"
    );
    let err = store.read_after(0, 100).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    receiver.shutdown().await;
}
