//! The demo's steps, with progress lines and one summary at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use outbox_core::{
    Backoff, DeliveryOutcome, Error, ErrorKind, EventId, FanoutConfig, FanoutLoop, FanoutStore,
    Ledger, MessageSink, Result, RunMode, Store, Subscriber, Wakeup,
};
use outbox_ledger_dev::{
    DevLedger, DevLedgerConfig, RunningDevLedger, WebhookBackoff, WebhookTarget,
};
use outbox_ledger_formance::{
    FormanceConfig, FormanceLedger, FormanceWebhookDecoder, WebhookVerifier,
};
use outbox_store_sqlite::{
    SqliteConfig, SqliteFanoutStore, SqliteStore, connect, enqueue, map_error,
};
use outbox_transport_http::{
    FanoutIntake, HttpPublisher, HttpSubscriber, PublisherConfig, ReceiverConfig, SubscriberConfig,
    start_receiver,
};
use rusqlite::TransactionBehavior;
use tokio::sync::watch;

use super::hold_sink::HoldPostingUntilReversal;
use super::scenario::{REFERENCE_MERCHANT, Scenario};
use crate::consumer::{ConsumerStats, TreasuryConsumer};

const LEDGER: &str = "payouts";

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Working folder; its previous contents are replaced.
    #[arg(long, default_value = ".demo")]
    pub dir: PathBuf,
    /// Generated payouts, besides the reference scenario.
    #[arg(long, default_value_t = 1000)]
    pub payouts: usize,
    /// Merchants the generated payouts are spread over.
    #[arg(long, default_value_t = 50)]
    pub merchants: u32,
}

fn step(text: impl std::fmt::Display) {
    println!("\n==> {text}");
}

fn failed(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, what)
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let started = Instant::now();
    let dir = fresh_dir(&args.dir)?;
    let outbox_url = format!("sqlite://{}", dir.join("outbox.db").display());

    step(
        "Consumer: a treasury database whose inbox applies Hop 2 messages, behind a signed HTTP receiver",
    );
    let consumer = TreasuryConsumer::open(
        SqliteConfig::new(dir.join("treasury.db")),
        "treasury",
        Duration::from_secs(60),
    )
    .await?;
    let scenario = Scenario::build(args.payouts, args.merchants);
    let (stop, shutdown) = watch::channel(false);
    let publish_secret = format!("hop2-{}", EventId::new());
    let subscriber = HttpSubscriber::bind(SubscriberConfig::new(
        ([127, 0, 0, 1], 0).into(),
        publish_secret.clone(),
    ))
    .await?;
    let subscriber_url = subscriber.url();
    println!("    consumer receiver on {subscriber_url}");
    let consumer_sink: Arc<dyn MessageSink> = Arc::new(consumer.clone());
    let consuming = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { subscriber.run(consumer_sink, shutdown).await }
    });

    step(
        "Fan-out: the ledger's signed webhooks into a durable fan-out store, published to the consumer in per-account order",
    );
    let fanout_store: Arc<dyn FanoutStore> =
        Arc::new(SqliteFanoutStore::open(SqliteConfig::new(dir.join("fanout.db"))).await?);
    let wakeup = Wakeup::new();
    let secret = format!("whsec-{}", EventId::new());
    let intake = Arc::new(HoldPostingUntilReversal {
        inner: Arc::new(FanoutIntake::new(
            fanout_store.clone(),
            Some(wakeup.clone()),
        )),
        posting: scenario.payout_a,
        reversal: scenario.reversal,
        reversal_seen: AtomicBool::new(false),
    });
    let receiver = start_receiver(
        ReceiverConfig::new(([127, 0, 0, 1], 0).into()),
        Arc::new(FormanceWebhookDecoder::new(WebhookVerifier::new(
            secret.clone(),
        )?)),
        intake,
    )
    .await?;
    println!("    webhook intake on {}", receiver.webhook_url());
    let publisher = Arc::new(HttpPublisher::new(PublisherConfig::new(
        subscriber_url,
        publish_secret,
    ))?);
    let fanout_config = FanoutConfig {
        poll_interval: Duration::from_millis(50),
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(500),
        },
        ..FanoutConfig::default()
    };
    let fanout = FanoutLoop::open(fanout_store, publisher, fanout_config)
        .await?
        .with_wakeup(wakeup);
    let fanning_out = tokio::spawn(fanout.run(RunMode::Daemon, shutdown));

    step("Ledger: the local Formance-v2-compatible dev ledger, in process");
    let ledger = DevLedger::start(DevLedgerConfig {
        data: Some(dir.join("ledger.db")),
        webhooks: vec![WebhookTarget {
            url: receiver.webhook_url(),
            secret,
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            max_attempts: 200,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await?;
    println!("    ledger {LEDGER:?} at {}", ledger.url());
    let client = FormanceLedger::new(&FormanceConfig::new(ledger.url(), LEDGER))?;

    step(format!(
        "Enqueue: {} events, each with its payout intent in one SQLite transaction",
        scenario.events.len()
    ));
    let store = SqliteStore::open(SqliteConfig::from_url(&outbox_url)?).await?;
    let enqueue_started = Instant::now();
    enqueue_with_intents(store.config(), &scenario)?;
    println!(
        "    committed in {:.1} s",
        enqueue_started.elapsed().as_secs_f64()
    );
    println!(
        "    merchant {REFERENCE_MERCHANT}: settlement credit, payout A $485,000.00, payout B $485,000.00 (new instruction), reversal of A"
    );
    println!(
        "    merchant 1007: a payout larger than its balance (will be refused), then its regular payouts"
    );

    step("Relay #1 (child process): killed with SIGKILL right after the ledger accepts payout A");
    ledger
        .faults()
        .hold_after_commit_matching(&scenario.payout_a.to_string(), Duration::from_secs(60));
    let mut child = spawn_relay(&outbox_url, &ledger)?;
    let accepted_tx = wait_for_commit(&client, scenario.payout_a, &mut child).await?;
    child
        .kill()
        .await
        .map_err(|e| failed(format!("cannot kill the relay: {e}")))?;
    ledger.faults().clear();
    let a_records = store.deliveries(scenario.payout_a).await?;
    println!(
        "    the ledger committed payout A as transaction {accepted_tx}; relay killed before recording it (delivery records of A: {})",
        a_records.len()
    );
    println!("    relay cursor: {:?}", store.load_cursor("relay").await?);

    step("Relay #2: restarts, re-sends the uncertain window one by one, drains the rest");
    let output = spawn_relay(&outbox_url, &ledger)?
        .wait_with_output()
        .await
        .map_err(|e| failed(format!("relay #2: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!(
            "relay #2 failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    print!("    {}", String::from_utf8_lossy(&output.stdout));
    let a_records = store.deliveries(scenario.payout_a).await?;
    for record in &a_records {
        println!(
            "    payout A delivery: attempt {} → {} (ledger transaction {:?})",
            record.attempt,
            record.outcome.as_str(),
            record.ledger_tx_id
        );
    }
    for record in store.deliveries(scenario.payout_b).await? {
        println!(
            "    payout B (same merchant, same $485,000.00, new instruction): {} as ledger transaction {:?}",
            record.outcome.as_str(),
            record.ledger_tx_id
        );
    }
    if !a_records
        .iter()
        .any(|r| r.outcome == DeliveryOutcome::Replayed && r.ledger_tx_id == Some(accepted_tx))
    {
        return Err(failed(
            "payout A was not recorded as an Idempotency-Hit replay of its original transaction",
        ));
    }

    step("Hop 2: waiting for the treasury inbox to apply every instruction");
    let expected = scenario.events.len() as u64;
    wait_for_consumer(&consumer, &ledger, expected).await?;

    let report = Report::gather(&store, &client, &consumer, &ledger, &scenario).await?;
    report.print(&scenario, started.elapsed());
    receiver.shutdown().await;
    let _ = stop.send(true);
    let joined = |e: tokio::task::JoinError| failed(format!("demo task: {e}"));
    fanning_out.await.map_err(joined)??;
    consuming.await.map_err(joined)??;
    ledger.shutdown().await;
    report.check()
}

fn fresh_dir(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .map_err(|e| failed(format!("cannot clear {}: {e}", dir.display())))?;
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
    dir.canonicalize().map_err(|e| failed(e.to_string()))
}

/// The transactional-outbox pattern as a payment service writes it: intent and outbox
/// row commit together or not at all.
fn enqueue_with_intents(config: &SqliteConfig, scenario: &Scenario) -> Result<()> {
    let mut conn = connect(config)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS payout_intents (
             event_id TEXT PRIMARY KEY, merchant TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL)",
    )
    .map_err(map_error)?;
    for event in &scenario.events {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_error)?;
        let stored = enqueue(&tx, event)?;
        tx.execute(
            "INSERT INTO payout_intents (event_id, merchant, status, created_at) VALUES (?1, ?2, 'requested', datetime('now'))",
            (stored.event_id.to_string(), stored.account.as_str()),
        )
        .map_err(map_error)?;
        tx.commit().map_err(map_error)?;
    }
    Ok(())
}

fn spawn_relay(outbox_url: &str, ledger: &RunningDevLedger) -> Result<tokio::process::Child> {
    let exe = std::env::current_exe().map_err(|e| failed(e.to_string()))?;
    tokio::process::Command::new(exe)
        .args(["relay", "--once", "--database", outbox_url, "--ledger-url"])
        .arg(ledger.url())
        .args(["--ledger-name", LEDGER, "--poll-interval-ms", "100"])
        .env(
            "OUTBOX_LOG",
            std::env::var("OUTBOX_LOG").unwrap_or_else(|_| "error".to_owned()),
        )
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot start the relay: {e}")))
}

/// Polls the ledger until payout A is committed there; bounded.
async fn wait_for_commit(
    client: &FormanceLedger,
    id: EventId,
    child: &mut tokio::process::Child,
) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(tx) = client.transaction_by_event_id(id).await? {
            return Ok(tx.id);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failed(format!(
                "relay #1 exited ({status}) before payout A was posted"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(failed("payout A did not reach the ledger within 60 s"))
}

async fn wait_for_consumer(
    consumer: &TreasuryConsumer,
    ledger: &RunningDevLedger,
    expected: u64,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_print = Instant::now();
    loop {
        let applied = ConsumerStats::get(&consumer.stats().applied);
        let pending = ledger.stats().webhooks_pending;
        if applied >= expected && pending == 0 {
            println!("    applied {applied}/{expected}; no webhook pending");
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(failed(format!(
                "consumer applied {applied}/{expected} after 60 s ({pending} webhooks pending)"
            )));
        }
        if last_print.elapsed() > Duration::from_secs(1) {
            println!("    applied {applied}/{expected}, webhooks pending {pending}");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the summary prints, gathered from the outbox, the ledger and the treasury.
struct Report {
    enqueued: usize,
    outcomes: BTreeMap<&'static str, u64>,
    replays: u64,
    ledger_hits: u64,
    stats: [u64; 5],
    mismatched_accounts: Vec<String>,
    compared_accounts: usize,
    merchants_ledger: i128,
    merchants_treasury: i128,
    reference_ledger: i128,
    reference_treasury: i128,
    exceptions: Vec<String>,
    gaps: usize,
}

impl Report {
    async fn gather(
        store: &SqliteStore,
        client: &FormanceLedger,
        consumer: &TreasuryConsumer,
        ledger: &RunningDevLedger,
        scenario: &Scenario,
    ) -> Result<Self> {
        let mut outcomes = BTreeMap::new();
        let mut replays = 0;
        for event in &scenario.events {
            let id = event.event_id.unwrap_or_default();
            let records = store.deliveries(id).await?;
            replays += records
                .iter()
                .filter(|r| r.outcome == DeliveryOutcome::Replayed)
                .count() as u64;
            if let Some(last) = records.iter().rev().find(|r| r.outcome.is_terminal()) {
                *outcomes.entry(last.outcome.as_str()).or_insert(0) += 1;
            }
        }
        let treasury = consumer.balances()?;
        let mut mismatched_accounts = Vec::new();
        let mut compared_accounts = 0;
        for ((account, asset), balance) in &treasury {
            if account == "world" {
                continue;
            }
            compared_accounts += 1;
            let address = outbox_core::Account::parse(account)?;
            let on_ledger = client
                .account(&address)
                .await?
                .and_then(|a| {
                    a.volumes
                        .iter()
                        .find(|(k, _)| k.as_str() == asset)
                        .map(|(_, v)| v.balance.unwrap_or(v.input as i128 - v.output as i128))
                })
                .unwrap_or(0);
            if on_ledger != i128::from(*balance) {
                mismatched_accounts.push(format!(
                    "{account} {asset}: ledger {on_ledger}, treasury {balance}"
                ));
            }
        }
        let usd = outbox_core::Asset::parse("USD/2")?;
        let sum_treasury = |prefix: &str| -> i128 {
            treasury
                .iter()
                .filter(|((a, _), _)| a.starts_with(prefix))
                .map(|(_, b)| i128::from(*b))
                .sum()
        };
        let reference = format!("merchants:{REFERENCE_MERCHANT}:");
        let s = consumer.stats();
        let exceptions = store
            .exceptions()
            .await?
            .into_iter()
            .map(|e| {
                format!(
                    "{} {} seq {}: {}",
                    e.kind.as_str(),
                    e.account,
                    e.sequence,
                    e.detail
                )
            })
            .collect();
        Ok(Self {
            enqueued: scenario.events.len(),
            outcomes,
            replays,
            ledger_hits: ledger.stats().idempotency_hits,
            stats: [&s.applied, &s.duplicates, &s.held, &s.released, &s.stale]
                .map(ConsumerStats::get),
            mismatched_accounts,
            compared_accounts,
            merchants_ledger: client
                .aggregate_balances("merchants:...")
                .await?
                .get(&usd)
                .copied()
                .unwrap_or(0),
            merchants_treasury: sum_treasury("merchants:"),
            reference_ledger: client
                .aggregate_balances(&format!("{reference}..."))
                .await?
                .get(&usd)
                .copied()
                .unwrap_or(0),
            reference_treasury: sum_treasury(&reference),
            exceptions,
            gaps: consumer.check_gaps()?.len(),
        })
    }

    fn print(&self, scenario: &Scenario, elapsed: Duration) {
        let [applied, duplicates, held, released, stale] = self.stats;
        let get = |k: &str| self.outcomes.get(k).copied().unwrap_or(0);
        println!("\n================ summary ================");
        println!("enqueued                    {}", self.enqueued);
        println!("posted (accepted)           {}", get("accepted"));
        println!(
            "replays (Idempotency-Hit)   {} recorded by the relay, {} answered by the ledger",
            self.replays, self.ledger_hits
        );
        println!("terminal as replayed        {}", get("replayed"));
        println!(
            "rejections                  {} (payout {} refused: INSUFFICIENT_FUND; its merchant went on)",
            get("rejected"),
            scenario.refused
        );
        println!("applied by the inbox        {applied} (rejection notices included)");
        println!("duplicates absorbed         {duplicates}");
        println!(
            "held / released             {held} / {released} (webhooks arrive unordered; A's reversal came first and was held until A)"
        );
        println!("stale                       {stale}");
        println!("open gaps                   {}", self.gaps);
        println!(
            "balances compared           {} accounts, {} differ",
            self.compared_accounts,
            self.mismatched_accounts.len()
        );
        println!(
            "merchants:... USD/2         ledger {} / treasury {}",
            self.merchants_ledger, self.merchants_treasury
        );
        println!(
            "merchants:4471:... USD/2    ledger {} / treasury {}",
            self.reference_ledger, self.reference_treasury
        );
        for line in &self.mismatched_accounts {
            println!("  MISMATCH {line}");
        }
        for line in &self.exceptions {
            println!("exception: {line}");
        }
        println!("finished in {:.1} s", elapsed.as_secs_f64());
    }

    /// The demo fails loudly if the story did not hold.
    fn check(&self) -> Result<()> {
        let [applied, ..] = self.stats;
        let terminal: u64 = self.outcomes.values().sum();
        let problems = [
            (
                terminal != self.enqueued as u64,
                "not every event reached a terminal outcome",
            ),
            (
                applied != self.enqueued as u64,
                "the inbox did not apply every instruction exactly once",
            ),
            (self.replays == 0, "no Idempotency-Hit replay was recorded"),
            (
                self.outcomes.get("rejected") != Some(&1),
                "expected exactly one rejection",
            ),
            (
                !self.mismatched_accounts.is_empty(),
                "ledger and treasury balances differ",
            ),
            (
                self.merchants_ledger != self.merchants_treasury,
                "aggregate balances differ",
            ),
            (self.gaps != 0, "a sequence gap is still open"),
        ];
        match problems.iter().find(|(bad, _)| *bad) {
            Some((_, what)) => Err(failed(format!("demo check failed: {what}"))),
            None => {
                println!("all consistent.");
                Ok(())
            }
        }
    }
}
