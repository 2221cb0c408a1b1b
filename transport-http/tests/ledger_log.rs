//! Catch-up from the Formance ledger's log — `FormanceLedgerLog` + `CatchUp` — against
//! `outbox-ledger-dev` over real HTTP on loopback, into the real fan-out stores
//! (SQLite files; PostgreSQL when reachable).
//!
//! - A message built from a log entry is the message its webhook brought, payload
//!   bytes included, so catch-up after normal delivery appends nothing.
//! - Webhooks refused by the intake (signed with a secret it does not know; the ledger
//!   gives up on a 4xx) leave the store without those events; catch-up fills the gap.
//!
//! PostgreSQL: `OUTBOX_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); unreachable, that case says "skipped"
//! and passes, unless `OUTBOX_TEST_REQUIRE=1`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{
    Account, CatchUp, EventId, FanoutMessage, FanoutStore, Ledger, MessageKind, Metadata,
    OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY, OUTBOX_SEQUENCE_KEY, StoredMessage,
};
use outbox_ledger_dev::{
    DevLedger, DevLedgerConfig, RunningDevLedger, WebhookBackoff, WebhookTarget,
};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger, FormanceLedgerLog};
use outbox_store_postgres::{PgConfig, PgFanoutStore};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore};
use outbox_transport_http::{ReceiverConfig, RunningReceiver, start_intake};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use common::{LEDGER_SECRET, ledger_decoder};

const LEDGER: &str = "payouts";

/// A fan-out store on a fresh SQLite file.
async fn sqlite_store(dir: &tempfile::TempDir, name: &str) -> Arc<dyn FanoutStore> {
    let store = SqliteFanoutStore::open(SqliteConfig::new(dir.path().join(name)))
        .await
        .unwrap();
    Arc::new(store)
}

async fn intake(store: Arc<dyn FanoutStore>) -> RunningReceiver {
    start_intake(
        ReceiverConfig::new(([127, 0, 0, 1], 0).into()),
        ledger_decoder(LEDGER_SECRET),
        store,
        None,
    )
    .await
    .unwrap()
}

/// A dev ledger sending its webhooks to `receiver`, signed with `secret`, giving up
/// after two attempts.
async fn dev_ledger(receiver: &RunningReceiver, secret: &str) -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        webhooks: vec![WebhookTarget {
            url: receiver.webhook_url(),
            secret: secret.to_owned(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(50),
            max_attempts: 2,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap()
}

fn client(ledger: &RunningDevLedger) -> Arc<FormanceLedger> {
    Arc::new(FormanceLedger::new(&FormanceConfig::new(ledger.url(), LEDGER)).unwrap())
}

fn outbox_metadata(event: EventId, account: &str, sequence: u64) -> Metadata {
    Metadata::from([
        (OUTBOX_EVENT_ID_KEY.to_owned(), event.to_string()),
        (OUTBOX_ACCOUNT_KEY.to_owned(), account.to_owned()),
        (OUTBOX_SEQUENCE_KEY.to_owned(), sequence.to_string()),
        ("event_type".to_owned(), "payout.requested".to_owned()),
    ])
}

fn transfer(source: &str, destination: &str, amount: u64, metadata: &Metadata) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "postings": [{"source": source, "destination": destination, "amount": amount, "asset": "USD/2"}],
        "metadata": metadata,
    }))
    .unwrap()
}

/// What the relay would write for two merchants, plus writes no outbox made: 5 outbox
/// messages (committed ×3, reverted, rejected) out of 7 log entries.
async fn write_history(ledger: &FormanceLedger) -> usize {
    let fund = EventId::new();
    ledger
        .post(
            fund,
            &transfer(
                "world",
                "merchants:1:available",
                1_000,
                &outbox_metadata(fund, "merchants:1", 1),
            ),
        )
        .await
        .unwrap();
    let payout = EventId::new();
    let paid = ledger
        .post(
            payout,
            &transfer(
                "merchants:1:available",
                "merchants:1:payouts:pending",
                400,
                &outbox_metadata(payout, "merchants:1", 2),
            ),
        )
        .await
        .unwrap();
    let other = EventId::new();
    ledger
        .post(
            other,
            &transfer(
                "world",
                "merchants:2:available",
                7,
                &outbox_metadata(other, "merchants:2", 1),
            ),
        )
        .await
        .unwrap();
    // Not an outbox's: no message.
    ledger
        .post(
            EventId::new(),
            &transfer("world", "fees", 3, &Metadata::new()),
        )
        .await
        .unwrap();
    let revert = EventId::new();
    let outbox_core::PostOutcome::Accepted { transaction_id } = paid else {
        panic!("{paid:?}");
    };
    let reverted = ledger
        .revert(
            revert,
            transaction_id,
            &outbox_metadata(revert, "merchants:1", 3),
        )
        .await
        .unwrap();
    assert!(
        matches!(reverted, outbox_core::PostOutcome::Accepted { .. }),
        "{reverted:?}"
    );
    let refused = EventId::new();
    let mut notice = outbox_metadata(refused, "merchants:2", 2);
    notice.insert("outbox_rejected_code".into(), "INSUFFICIENT_FUND".into());
    ledger
        .save_account_metadata(
            &format!("{refused}:rejected"),
            &Account::parse("merchants:2").unwrap(),
            &notice,
        )
        .await
        .unwrap();
    // Metadata that is not a rejection notice: no message.
    ledger
        .save_account_metadata(
            "plain",
            &Account::parse("fees").unwrap(),
            &Metadata::from([("k".into(), "v".into())]),
        )
        .await
        .unwrap();
    5
}

/// Waits (bounded) until the ledger has settled every webhook delivery.
async fn webhooks_settled(ledger: &RunningDevLedger) -> outbox_ledger_dev::DevLedgerStats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = ledger.stats();
        if stats.webhooks_pending == 0 && stats.webhooks_delivered + stats.webhooks_failed >= 7 {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "webhooks never settled: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stored(store: &dyn FanoutStore) -> Vec<StoredMessage> {
    store.read_after(0, 1_000).await.unwrap()
}

/// The messages by dedup key, trace context aside (the log has only the metadata's).
fn by_key(stored: &[StoredMessage]) -> BTreeMap<String, FanoutMessage> {
    stored
        .iter()
        .map(|m| (m.message.dedup_key(), m.message.clone()))
        .collect()
}

async fn catch_up(
    store: Arc<dyn FanoutStore>,
    ledger: &RunningDevLedger,
) -> outbox_core::CatchUpReport {
    CatchUp::new(store, Arc::new(FormanceLedgerLog::new(client(ledger))))
        .with_page_size(3)
        .run_once(None, &mut |_, _| {})
        .await
        .unwrap()
}

#[tokio::test]
async fn a_log_entry_gives_byte_for_byte_the_message_its_webhook_brought() {
    let dir = tempfile::tempdir().unwrap();
    let from_webhooks = sqlite_store(&dir, "webhooks.db").await;
    let receiver = intake(from_webhooks.clone()).await;
    let ledger = dev_ledger(&receiver, LEDGER_SECRET).await;
    let expected = write_history(&client(&ledger)).await;
    let stats = webhooks_settled(&ledger).await;
    assert_eq!(stats.webhooks_failed, 0, "{stats:?}");
    let webhook_messages = by_key(&stored(from_webhooks.as_ref()).await);
    assert_eq!(webhook_messages.len(), expected, "{webhook_messages:#?}");
    let kinds: Vec<MessageKind> = webhook_messages.values().map(|m| m.kind).collect();
    assert!(kinds.contains(&MessageKind::Reverted) && kinds.contains(&MessageKind::Rejected));

    // The same events read from the log into an empty store: identical messages.
    let from_log = sqlite_store(&dir, "log.db").await;
    let report = catch_up(from_log.clone(), &ledger).await;
    assert_eq!(
        (
            report.logs,
            report.messages,
            report.appended,
            report.checkpoint
        ),
        (7, expected as u64, expected as u64, 7)
    );
    let log_messages = by_key(&stored(from_log.as_ref()).await);
    assert_eq!(log_messages, webhook_messages);
    for (key, message) in &log_messages {
        assert_eq!(
            message.payload, webhook_messages[key].payload,
            "{key}: the payload bytes differ between the log and the webhook"
        );
    }

    // After normal delivery, catch-up on the intake's own store appends nothing.
    let report = catch_up(from_webhooks.clone(), &ledger).await;
    assert_eq!(
        (report.appended, report.duplicates),
        (0, expected as u64),
        "{report:?}"
    );
    assert_eq!(stored(from_webhooks.as_ref()).await.len(), expected);
    receiver.shutdown().await;
    ledger.shutdown().await;
}

/// Webhooks signed with a secret the intake does not know are refused (401, which the
/// sender treats as final): nothing reaches the store. Catch-up brings every event,
/// and a webhook arriving later for one of them is a duplicate.
async fn refused_webhooks_are_filled_by_catch_up(store: Arc<dyn FanoutStore>) {
    let receiver = intake(store.clone()).await;
    let ledger = dev_ledger(&receiver, "a-secret-the-intake-does-not-know").await;
    let expected = write_history(&client(&ledger)).await;
    let stats = webhooks_settled(&ledger).await;
    assert_eq!(stats.webhooks_delivered, 0, "{stats:?}");
    assert!(
        stored(store.as_ref()).await.is_empty(),
        "a refused webhook was stored"
    );

    let report = catch_up(store.clone(), &ledger).await;
    assert_eq!(
        (report.appended, report.checkpoint),
        (expected as u64, 7),
        "{report:?}"
    );
    let messages = stored(store.as_ref()).await;
    assert_eq!(messages.len(), expected);
    // Per account, the sequences arrive in ledger order.
    let sequences: Vec<(String, u64)> = messages
        .iter()
        .map(|m| (m.message.account.to_string(), m.message.sequence))
        .collect();
    assert_eq!(
        sequences,
        [
            ("merchants:1".to_owned(), 1),
            ("merchants:1".to_owned(), 2),
            ("merchants:2".to_owned(), 1),
            ("merchants:1".to_owned(), 3),
            ("merchants:2".to_owned(), 2)
        ]
    );
    let again = catch_up(store.clone(), &ledger).await;
    assert_eq!((again.logs, again.appended), (0, 0), "{again:?}");
    receiver.shutdown().await;
    ledger.shutdown().await;
}

#[tokio::test]
async fn refused_webhooks_are_filled_by_catch_up_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    refused_webhooks_are_filled_by_catch_up(sqlite_store(&dir, "fanout.db").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_webhooks_are_filled_by_catch_up_on_postgres() {
    let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let reachable = tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&url))
        .await
        .is_ok_and(|c| c.is_ok());
    if !reachable {
        assert!(
            std::env::var_os("OUTBOX_TEST_REQUIRE").is_none_or(|v| v != "1"),
            "no PostgreSQL at {url} and OUTBOX_TEST_REQUIRE=1"
        );
        eprintln!("skipped: no PostgreSQL at {url}");
        return;
    }
    let schema = format!("outbox_t_catch_up_{}", uuid::Uuid::now_v7().simple());
    let store = PgFanoutStore::open(PgConfig::new(url.clone()).with_schema(&schema))
        .await
        .unwrap();
    let store: Arc<dyn FanoutStore> = Arc::new(store);
    let outcome = tokio::spawn(refused_webhooks_are_filled_by_catch_up(store.clone())).await;
    drop(store);
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    outcome.unwrap();
}
