//! `outbox reconcile` as the three teams run it, on both stores: the reference
//! scenario plus generated payouts, relayed by the real `outbox relay` to the dev
//! ledger over HTTP and applied by a consumer's inbox, reconciles with no exception.
//! Then six breaks are seeded one at a time; after each, the three checks (the real
//! binary) report exactly that break, with its kind, account, sequence and amounts,
//! and nothing else.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use common::postgres::PgOutbox;
use common::*;
use outbox_bins::demo::Scenario;
use outbox_core::{
    DeliveryOutcome, EventId, Exception, InboxEngine, InboxMessage, Ledger, MessageKind, NewEvent,
    OutboxEvent, PayloadKind, Store,
};
use outbox_ledger_dev::RunningDevLedger;
use outbox_store_postgres::PgInbox;
use outbox_store_sqlite::{SqliteConfig, SqliteInbox, SqliteStore};
use rusqlite::Connection;
use serde_json::Value;

const CONSUMER: &str = "treasury";

enum Stores {
    Sqlite {
        outbox: Outbox,
        consumer: PathBuf,
    },
    Postgres {
        outbox: PgOutbox,
        consumer: PgOutbox,
    },
}

struct Deployment {
    stores: Stores,
    ledger: RunningDevLedger,
    events: Vec<OutboxEvent>,
    dir: tempfile::TempDir,
}

impl Deployment {
    async fn sqlite() -> Self {
        let outbox = Outbox::new().await;
        let consumer = outbox.dir().join("consumer.db");
        SqliteStore::open(SqliteConfig::new(&consumer))
            .await
            .unwrap();
        Self::start(Stores::Sqlite { outbox, consumer }).await
    }

    async fn postgres() -> Option<Self> {
        let outbox = PgOutbox::new().await?;
        let consumer = PgOutbox::new().await?;
        Some(Self::start(Stores::Postgres { outbox, consumer }).await)
    }

    /// The scenario enqueued, relayed and applied by the consumer, in order.
    async fn start(stores: Stores) -> Self {
        let mut d = Self {
            stores,
            ledger: dev_ledger(None).await,
            events: Vec::new(),
            dir: tempfile::TempDir::new().unwrap(),
        };
        let events = d.enqueue(&Scenario::build(60, 6).events).await;
        d.relay(&events).await;
        d.apply(&events).await;
        d.events = events;
        d
    }

    fn outbox_url(&self) -> String {
        match &self.stores {
            Stores::Sqlite { outbox, .. } => outbox.url(),
            Stores::Postgres { outbox, .. } => outbox.url(),
        }
    }

    fn consumer_url(&self) -> String {
        match &self.stores {
            Stores::Sqlite { consumer, .. } => format!("sqlite://{}", consumer.display()),
            Stores::Postgres { consumer, .. } => consumer.url(),
        }
    }

    fn store(&self) -> &dyn Store {
        match &self.stores {
            Stores::Sqlite { outbox, .. } => &outbox.store,
            Stores::Postgres { outbox, .. } => &outbox.store,
        }
    }

    async fn enqueue(&self, events: &[NewEvent]) -> Vec<OutboxEvent> {
        match &self.stores {
            Stores::Sqlite { outbox, .. } => outbox.enqueue(events),
            Stores::Postgres { outbox, .. } => outbox.enqueue(events).await,
        }
    }

    /// `outbox relay --once` until every one of `events` has a terminal record
    /// (bounded: a drain may end early while another test's long transaction holds
    /// the PostgreSQL reader's horizon back).
    async fn relay(&self, events: &[OutboxEvent]) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = relay_process(&self.outbox_url(), &self.ledger.url(), &["--once"])
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut undelivered = 0;
            for event in events {
                let records = self.store().deliveries(event.event_id).await.unwrap();
                undelivered += usize::from(!records.iter().any(|r| r.outcome.is_terminal()));
            }
            if undelivered == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the relay never delivered {undelivered} of {} events: {}\n{}",
                events.len(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What Hop 2 brings the consumer for `event`: the outcome the relay recorded.
    async fn message(&self, event: &OutboxEvent) -> InboxMessage {
        let records = self.store().deliveries(event.event_id).await.unwrap();
        let refused = records
            .iter()
            .any(|r| r.outcome == DeliveryOutcome::Rejected);
        let kind = match (refused, event.payload.split().unwrap().0) {
            (true, _) => MessageKind::Rejected,
            (false, PayloadKind::Post) => MessageKind::Committed,
            (false, PayloadKind::Revert { .. }) => MessageKind::Reverted,
        };
        InboxMessage {
            instruction_id: event.event_id.to_string(),
            account: event.account.clone(),
            sequence: event.sequence,
            kind,
            payload: b"{}".to_vec(),
        }
    }

    /// The consumer's inbox accepts each of `events` in its own transaction.
    async fn apply(&self, events: &[OutboxEvent]) {
        let engine = InboxEngine::new(CONSUMER);
        for event in events {
            let message = self.message(event).await;
            match &self.stores {
                Stores::Sqlite { consumer, .. } => {
                    let mut conn = Connection::open(consumer).unwrap();
                    let tx = conn.transaction().unwrap();
                    let mut impact = |_: &mut SqliteInbox<'_>, _: &InboxMessage| Ok(());
                    engine
                        .accept(&mut SqliteInbox::new(&tx), message, &mut impact)
                        .await
                        .unwrap();
                    tx.commit().unwrap();
                }
                Stores::Postgres { consumer, .. } => {
                    let mut tx = consumer.store.pool().begin().await.unwrap();
                    let mut impact = |_: &mut PgInbox<'_>, _: &InboxMessage| Ok(());
                    engine
                        .accept(&mut PgInbox::new(&mut tx), message, &mut impact)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
            }
        }
    }

    async fn consumer_sql(&self, sql: &str) {
        match &self.stores {
            Stores::Sqlite { consumer, .. } => {
                Connection::open(consumer)
                    .unwrap()
                    .execute_batch(sql)
                    .unwrap();
            }
            Stores::Postgres { consumer, .. } => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(consumer.store.pool())
                    .await
                    .unwrap();
            }
        }
    }

    /// Every queued exception, in the outbox database and the consumer's.
    async fn queued(&self) -> Vec<Exception> {
        let mut all = self.store().exceptions().await.unwrap();
        let consumer: Vec<Exception> = match &self.stores {
            Stores::Sqlite { consumer, .. } => SqliteStore::open(SqliteConfig::new(consumer))
                .await
                .unwrap()
                .exceptions()
                .await
                .unwrap(),
            Stores::Postgres { consumer, .. } => consumer.store.exceptions().await.unwrap(),
        };
        all.extend(consumer);
        all
    }

    /// A transaction posted straight to the ledger, around the outbox.
    async fn post_around_the_outbox(&self, body: Value) -> u64 {
        let answer = reqwest::Client::new()
            .post(format!("{}/v2/{LEDGER}/transactions", self.ledger.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            answer.status().is_success(),
            "{}",
            answer.text().await.unwrap()
        );
        let body: Value = answer.json().await.unwrap();
        body["data"]["id"].as_u64().unwrap()
    }

    /// The provider's statement as of `at`, taken from the ledger's balances of every
    /// merchant account the scenario moved (it matches the ledger to the unit).
    async fn statement(&self, at: DateTime<Utc>) -> Vec<(String, String, i128)> {
        let client = client(&self.ledger, Duration::from_secs(10));
        let mut accounts = BTreeSet::new();
        for event in &self.events {
            let body: Value = serde_json::from_slice(event.payload.split().unwrap().1).unwrap();
            for posting in body["postings"].as_array().into_iter().flatten() {
                for side in ["source", "destination"] {
                    let address = posting[side].as_str().unwrap();
                    if address != "world" {
                        accounts.insert(address.to_owned());
                    }
                }
            }
        }
        let mut lines = Vec::new();
        for account in accounts {
            for (asset, balance) in client
                .aggregate_balances_at(&account, at, outbox_core::BalanceDate::Effective)
                .await
                .unwrap()
            {
                lines.push((account.clone(), asset.as_str().to_owned(), balance));
            }
        }
        lines
    }

    fn write_statement(
        &self,
        name: &str,
        lines: &[(String, String, i128)],
        at: DateTime<Utc>,
    ) -> PathBuf {
        let path = self.dir.path().join(name);
        let mut csv = String::from("account,asset,balance,as_of\n");
        for (account, asset, balance) in lines {
            csv.push_str(&format!(
                "{account},{asset},{balance},{}\n",
                at.to_rfc3339_opts(SecondsFormat::Micros, true)
            ));
        }
        std::fs::write(&path, csv).unwrap();
        path
    }

    async fn drop(self) {
        if let Stores::Postgres { outbox, consumer } = self.stores {
            outbox.drop(None).await;
            consumer.drop(None).await;
        }
    }
}

/// One finding as the test compares it.
type Found = (String, String, u64);

/// Runs `outbox reconcile ARGS --json`; returns its findings and whether it exited 0.
async fn reconcile(args: &[String]) -> (bool, Vec<Value>) {
    let output = tokio::process::Command::new(outbox_binary())
        .arg("reconcile")
        .args(args)
        .arg("--json")
        .env("OUTBOX_LOG", "error")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let findings: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{stderr}")))
        .collect();
    if output.status.success() {
        assert!(findings.is_empty(), "exit 0 with findings: {stdout}");
    } else {
        assert!(
            stderr.contains("reconcile") && stderr.contains("exception"),
            "a failure names what it found: {stderr}"
        );
        assert!(
            !findings.is_empty(),
            "a non-zero exit without a finding: {stderr}"
        );
    }
    (output.status.success(), findings)
}

fn found(findings: &[Value]) -> Vec<Found> {
    let mut out: Vec<Found> = findings
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_owned(),
                f["account"].as_str().unwrap().to_owned(),
                f["sequence"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn expect(items: &[(&str, &str, u64)]) -> Vec<Found> {
    let mut out: Vec<Found> = items
        .iter()
        .map(|(k, a, s)| ((*k).to_owned(), (*a).to_owned(), *s))
        .collect();
    out.sort();
    out
}

struct Checks<'a> {
    d: &'a Deployment,
}

impl Checks<'_> {
    fn ledger_args(&self) -> Vec<String> {
        vec![
            "--ledger-url".into(),
            self.d.ledger.url(),
            "--ledger-name".into(),
            LEDGER.into(),
        ]
    }

    async fn sequences(&self) -> Vec<Value> {
        let args = vec![
            "sequences".into(),
            "--database".into(),
            self.d.consumer_url(),
            "--gap-alarm-secs".into(),
            "0".into(),
            "--page-size".into(),
            "7".into(),
        ];
        reconcile(&args).await.1
    }

    async fn ledger(&self) -> Vec<Value> {
        let mut args = vec![
            "ledger".into(),
            "--database".into(),
            self.d.outbox_url(),
            "--settle-secs".into(),
            "0".into(),
            "--page-size".into(),
            "16".into(),
        ];
        args.extend(self.ledger_args());
        reconcile(&args).await.1
    }

    async fn balances(&self, statement: &Path) -> Vec<Value> {
        let mut args = vec![
            "balances".into(),
            "--database".into(),
            self.d.outbox_url(),
            "--statement".into(),
            statement.display().to_string(),
        ];
        args.extend(self.ledger_args());
        reconcile(&args).await.1
    }
}

fn amount(finding: &Value, field: &str) -> i128 {
    finding[field].as_str().unwrap().parse().unwrap()
}

async fn seeded_breaks_are_each_found_and_nothing_else(d: Deployment) {
    let checks = Checks { d: &d };
    // The statement time: everything so far is before it, every break after it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let at = Utc::now();
    let statement = d.statement(at).await;
    assert!(statement.len() >= 12, "{statement:?}");
    let clean = d.write_statement("clean.csv", &statement, at);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // A clean run reconciles with no exception.
    assert_eq!(found(&checks.sequences().await), vec![]);
    assert_eq!(found(&checks.ledger().await), vec![]);
    assert_eq!(found(&checks.balances(&clean).await), vec![]);
    // The queue holds only what the relay raised: the scenario's refused payout.
    assert_eq!(
        d.queued()
            .await
            .iter()
            .map(|e| e.kind.as_str())
            .collect::<Vec<_>>(),
        vec!["rejected"]
    );

    let last = |merchant: &str| {
        d.events
            .iter()
            .filter(|e| e.account.as_str() == merchant)
            .map(|e| e.sequence)
            .max()
            .unwrap()
    };

    // 1. A message dropped before the consumer: three more payouts of merchant 1001
    //    are relayed; the consumer gets the second and third only, and holds them.
    let n = last("merchants:1001");
    let more = d
        .enqueue(&[payout("1001", 10), payout("1001", 11), payout("1001", 12)])
        .await;
    d.relay(&more).await;
    d.apply(&more[1..]).await;
    let mut expected = vec![("missing_sequence", "merchants:1001", n + 1)];
    let findings = checks.sequences().await;
    assert_eq!(found(&findings), expect(&expected));
    assert!(
        findings[0]["detail"]
            .as_str()
            .unwrap()
            .contains("2 later message(s)"),
        "{}",
        findings[0]
    );
    assert_eq!(
        found(&checks.ledger().await),
        vec![],
        "the relay posted all three"
    );
    assert_eq!(
        found(&checks.balances(&clean).await),
        vec![],
        "after the statement time"
    );

    // 2. An impact applied twice around the inbox: a second instruction marked at
    //    merchant 1002's sequence 2.
    d.consumer_sql(&format!(
        "INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
         VALUES ('{CONSUMER}', '{}', 'merchants:1002', 2, 'committed', {})",
        EventId::new(),
        match d.stores {
            Stores::Sqlite { .. } => "0".to_owned(),
            Stores::Postgres { .. } => "now()".to_owned(),
        }
    ))
    .await;
    expected.push(("repeated_sequence", "merchants:1002", 2));
    let findings = checks.sequences().await;
    assert_eq!(found(&findings), expect(&expected));
    let repeated = findings
        .iter()
        .find(|f| f["kind"] == "repeated_sequence")
        .unwrap();
    assert_eq!(repeated["new"], true);
    let first_seen = findings
        .iter()
        .find(|f| f["kind"] == "missing_sequence")
        .unwrap();
    assert_eq!(
        first_seen["new"], false,
        "an open exception is not raised twice"
    );
    assert_eq!(found(&checks.ledger().await), vec![]);

    // 3. An event never posted: enqueued, the relay never runs for it.
    let never = d.enqueue(&[payout("1003", 13)]).await.remove(0);
    let findings = checks.ledger().await;
    assert_eq!(
        found(&findings),
        expect(&[("missing_transaction", "merchants:1003", never.sequence)])
    );
    assert_eq!(findings[0]["event_id"], never.event_id.to_string());
    assert_eq!(found(&checks.sequences().await), expect(&expected));

    // 4. A transaction posted out of band with outbox metadata (an orphan).
    let stranger = EventId::new();
    let orphan_tx = d
        .post_around_the_outbox(serde_json::json!({
            "postings": [{"source": "world", "destination": "suspense:oob", "amount": 100, "asset": "USD/2"}],
            "metadata": {"outbox_event_id": stranger.to_string(), "outbox_account": "merchants:9999", "outbox_sequence": "1"}
        }))
        .await;
    let findings = checks.ledger().await;
    assert_eq!(
        found(&findings),
        expect(&[("orphan_transaction", "merchants:9999", 1)])
    );
    assert_eq!(findings[0]["ledger_tx"], orphan_tx);
    assert_eq!(findings[0]["event_id"], stranger.to_string());
    assert_eq!(found(&checks.balances(&clean).await), vec![]);

    // 5. A statement line off by $485,000.00 on merchant 4471's pending payout account.
    let pending = "merchants:4471:payouts:pending";
    let mut off = statement.clone();
    let line = off.iter_mut().find(|(a, _, _)| a == pending).unwrap();
    let ledger_pending = line.2;
    line.2 += 48_500_000;
    let off = d.write_statement("off.csv", &off, at);
    let findings = checks.balances(&off).await;
    let last_4471 = last("merchants:4471");
    assert_eq!(
        found(&findings),
        expect(&[("balance_mismatch", pending, last_4471)])
    );
    assert_eq!(findings[0]["asset"], "USD/2");
    assert_eq!(amount(&findings[0], "ledger_amount"), ledger_pending);
    assert_eq!(
        amount(&findings[0], "provider_amount"),
        ledger_pending + 48_500_000
    );
    let detail = findings[0]["detail"].as_str().unwrap();
    assert!(detail.contains("+48500000"), "{detail}");
    assert!(
        detail.contains(&format!("merchants:4471 #{last_4471}")),
        "{detail}"
    );
    assert_eq!(found(&checks.balances(&clean).await), vec![]);

    // 6. A transaction backdated before the statement time, posted after it.
    let backdated = (at - chrono::TimeDelta::hours(1)).to_rfc3339_opts(SecondsFormat::Secs, true);
    d.post_around_the_outbox(serde_json::json!({
        "postings": [{"source": "world", "destination": "merchants:1004:available", "amount": 12345, "asset": "USD/2"}],
        "timestamp": backdated,
        "metadata": {"event_type": "correction"}
    }))
    .await;
    let findings = checks.balances(&clean).await;
    let available = "merchants:1004:available";
    assert_eq!(
        found(&findings),
        expect(&[("balance_mismatch", available, last("merchants:1004"))])
    );
    let provider = statement.iter().find(|(a, _, _)| a == available).unwrap().2;
    assert_eq!(amount(&findings[0], "provider_amount"), provider);
    assert_eq!(amount(&findings[0], "ledger_amount"), provider + 12345);
    let detail = findings[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("by insertion date the ledger had {provider}")),
        "{detail}"
    );
    assert!(detail.contains("backdated"), "{detail}");
    assert_eq!(
        found(&checks.ledger().await),
        vec![],
        "no outbox metadata: not an orphan"
    );
    assert_eq!(found(&checks.sequences().await), expect(&expected));

    // The queue holds each finding once, every one open, beside the relay's refusal.
    let mut queued: Vec<Found> = d
        .queued()
        .await
        .iter()
        .filter(|e| e.source != "relay")
        .inspect(|e| assert!(e.is_open()))
        .map(|e| {
            (
                e.kind.as_str().to_owned(),
                e.account.as_str().to_owned(),
                e.sequence,
            )
        })
        .collect();
    queued.sort();
    assert_eq!(
        queued,
        expect(&[
            ("missing_sequence", "merchants:1001", n + 1),
            ("repeated_sequence", "merchants:1002", 2),
            ("missing_transaction", "merchants:1003", never.sequence),
            ("orphan_transaction", "merchants:9999", 1),
            ("balance_mismatch", pending, last_4471),
            ("balance_mismatch", available, last("merchants:1004")),
        ])
    );
    d.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_seeded_breaks_are_each_found_and_nothing_else() {
    seeded_breaks_are_each_found_and_nothing_else(Deployment::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_seeded_breaks_are_each_found_and_nothing_else() {
    let Some(d) = Deployment::postgres().await else {
        return;
    };
    seeded_breaks_are_each_found_and_nothing_else(d).await;
}
