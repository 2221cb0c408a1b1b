//! Shared set-up for the cross-crate tests: a dev ledger on loopback, a SQLite outbox,
//! the relay dispatcher, and the reference treasury consumer behind a webhook receiver.

#![allow(dead_code)] // each test binary uses a different part of this module

pub mod audit;
pub mod backend;
pub mod fanout_process;
pub mod hop2;
pub mod pipeline;
pub mod postgres;
pub mod process;

// Not every test binary audits; those that do reach the helpers through `common::*`.
#[allow(unused_imports)]
pub use audit::*;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_bins::consumer::TreasuryConsumer;
use outbox_core::{
    Account, Amount, Asset, Backoff, DispatchConfig, Dispatcher, EventId, LedgerCommand, Metadata,
    NewEvent, OutboxEvent, PostBody, PostCommand, Posting, RunMode, Summary,
};
use outbox_ledger_dev::{
    DevLedger, DevLedgerConfig, RunningDevLedger, WebhookBackoff, WebhookTarget,
};
use outbox_ledger_formance::{
    FormanceConfig, FormanceLedger, FormanceWebhookDecoder, WebhookVerifier,
};
use outbox_store_sqlite::{SqliteConfig, SqliteStore, connect, enqueue};
use outbox_transport_http::{ReceiverConfig, RunningReceiver, start_receiver};
use tokio::sync::watch;

pub const LEDGER: &str = "payouts";
pub const SECRET: &str = "test-webhook-secret";

pub fn account(text: &str) -> Account {
    Account::parse(text).unwrap()
}

pub fn transfer(aggregate: &str, source: &str, destination: &str, amount: u64) -> NewEvent {
    NewEvent::new(
        account(aggregate),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: account(source),
                destination: account(destination),
                amount: Amount::new(amount),
                asset: Asset::parse("USD/2").unwrap(),
            }]),
            reference: None,
            metadata: Metadata::from([("event_type".to_owned(), "test".to_owned())]),
        }),
    )
    .with_event_id(EventId::new())
}

/// A settlement credit from `world` to the merchant's available balance.
pub fn fund(merchant: &str, amount: u64) -> NewEvent {
    transfer(
        &format!("merchants:{merchant}"),
        "world",
        &format!("merchants:{merchant}:available"),
        amount,
    )
}

/// A reversal of the payout `target`, on `aggregate`'s sequence.
pub fn revert(aggregate: &str, target: EventId) -> NewEvent {
    NewEvent::new(
        account(aggregate),
        LedgerCommand::Revert(outbox_core::RevertCommand {
            event_id: target,
            metadata: Metadata::from([("event_type".to_owned(), "payout.reversed".to_owned())]),
        }),
    )
    .with_event_id(EventId::new())
}

/// A run's random generator, seeded from `OUTBOX_TEST_SEED` or a fresh seed, which
/// is printed with `scenario` so a failure can be replayed.
///
/// # Panics
/// When `OUTBOX_TEST_SEED` is not an unsigned integer.
pub fn seeded(scenario: &str) -> (u64, fastrand::Rng) {
    let seed = match std::env::var("OUTBOX_TEST_SEED") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            panic!("OUTBOX_TEST_SEED must be an unsigned integer, not {text:?}")
        }),
        Err(_) => fastrand::u64(..),
    };
    eprintln!("chaos {scenario}: seed {seed} (OUTBOX_TEST_SEED={seed} replays it)");
    (seed, fastrand::Rng::with_seed(seed))
}

/// A payout from available to pending payouts.
pub fn payout(merchant: &str, amount: u64) -> NewEvent {
    transfer(
        &format!("merchants:{merchant}"),
        &format!("merchants:{merchant}:available"),
        &format!("merchants:{merchant}:payouts:pending"),
        amount,
    )
}

pub struct Outbox {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub store: SqliteStore,
}

impl Outbox {
    pub async fn new() -> Self {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("outbox.db");
        let store = SqliteStore::open(SqliteConfig::new(&path)).await.unwrap();
        Self {
            _dir: dir,
            path,
            store,
        }
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// Enqueues each event in its own committed transaction.
    pub fn enqueue(&self, events: &[NewEvent]) -> Vec<OutboxEvent> {
        let mut conn = connect(self.store.config()).unwrap();
        events
            .iter()
            .map(|e| {
                let tx = conn.transaction().unwrap();
                let stored = enqueue(&tx, e).unwrap();
                tx.commit().unwrap();
                stored
            })
            .collect()
    }
}

/// A dev ledger on an ephemeral loopback port, optionally sending webhooks.
pub async fn dev_ledger(webhook: Option<&RunningReceiver>) -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        webhooks: webhook
            .map(|r| WebhookTarget {
                url: r.webhook_url(),
                secret: SECRET.to_owned(),
            })
            .into_iter()
            .collect(),
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            max_attempts: 100,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap()
}

/// A dev ledger that a test restarts on the same address and data file (keeping its
/// transactions and log), its webhooks to `webhook_url` signed with `secret`, given up
/// after three quick attempts.
pub async fn restartable_dev_ledger(
    listen: std::net::SocketAddr,
    data: PathBuf,
    webhook_url: String,
    secret: &str,
) -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        listen,
        data: Some(data),
        webhooks: vec![WebhookTarget {
            url: webhook_url,
            secret: secret.to_owned(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(100),
            max_attempts: 3,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap()
}

pub fn client(ledger: &RunningDevLedger, request_timeout: Duration) -> FormanceLedger {
    let mut config = FormanceConfig::new(ledger.url(), LEDGER);
    config.request_timeout_ms = request_timeout.as_millis() as u64;
    FormanceLedger::new(&config).unwrap()
}

pub fn quick_config() -> DispatchConfig {
    DispatchConfig {
        backoff: Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(200),
        },
        poll_interval: Duration::from_millis(20),
        max_attempts: Some(100),
        ..DispatchConfig::default()
    }
}

/// Runs the dispatcher in drain mode against `ledger`, bounded in time.
pub async fn drain(outbox: &Outbox, ledger: FormanceLedger, config: DispatchConfig) -> Summary {
    let relay = outbox.store.polling_relay("relay").await.unwrap();
    let dispatcher = Dispatcher::open(
        Arc::new(outbox.store.clone()),
        Box::new(relay),
        Arc::new(ledger),
        config,
    )
    .await
    .unwrap();
    let (_stop, stopped) = watch::channel(false);
    tokio::time::timeout(
        Duration::from_secs(120),
        dispatcher.run(RunMode::Drain, stopped),
    )
    .await
    .expect("the relay drained in time")
    .unwrap()
}

/// The treasury consumer behind a signed-webhook receiver on loopback.
pub async fn consumer(dir: &Path) -> (TreasuryConsumer, RunningReceiver) {
    let consumer = TreasuryConsumer::open(
        SqliteConfig::new(dir.join("treasury.db")),
        "treasury",
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let receiver = start_receiver(
        ReceiverConfig::new(([127, 0, 0, 1], 0).into()),
        Arc::new(FormanceWebhookDecoder::new(
            WebhookVerifier::new(SECRET).unwrap(),
        )),
        Arc::new(consumer.clone()),
    )
    .await
    .unwrap();
    (consumer, receiver)
}

/// Waits until `done` holds, polling; panics with `what` after `limit`.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, what: &str, mut done: F) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `outbox` binary built beside this test binary (`cargo test --workspace --all-features` builds it with the features these tests need).
pub fn outbox_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("outbox");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p outbox-bins --features all` first (`cargo test --workspace --all-features` builds it)",
        bin.display()
    );
    bin
}

/// Waits (bounded) until the ledger holds the transaction of `event`, while the relay
/// child that posts it is still alive; returns that transaction.
pub async fn wait_for_ledger_commit(
    ledger: &RunningDevLedger,
    event: EventId,
    child: &mut tokio::process::Child,
) -> outbox_core::LedgerTransaction {
    use outbox_core::Ledger;
    let reader = client(ledger, Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(tx) = reader.transaction_by_event_id(event).await.unwrap() {
            return tx;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "relay exited before posting {event}"
        );
        assert!(
            Instant::now() < deadline,
            "{event} never reached the ledger"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An `outbox relay` process against `ledger_url` (ledger `payouts`, 50 ms polls),
/// with `extra` arguments; output captured, killed if dropped.
pub fn relay_process(
    database_url: &str,
    ledger_url: &str,
    extra: &[&str],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(outbox_binary());
    cmd.args([
        "relay",
        "--database",
        database_url,
        "--ledger-url",
        ledger_url,
        "--ledger-name",
        LEDGER,
    ])
    .args(["--poll-interval-ms", "50"])
    .args(extra)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    cmd
}
