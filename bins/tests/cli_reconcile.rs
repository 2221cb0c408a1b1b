//! `outbox reconcile balances` on the provider's files as the reconciliation function
//! receives them: a camt.053 statement with its IBAN mapping and a CSV statement,
//! checked by the real binary against a dev ledger over HTTP; and the refusals of
//! files it cannot read, each naming the flag, file, element or line.

#![cfg(all(feature = "sqlite", feature = "dev-ledger"))]

use std::path::Path;
use std::process::{Command, Output};

use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use serde_json::Value;

const PENDING: &str = "merchants:4471:payouts:pending";
const IBAN: &str = "DE89370400440532013000";

fn camt053(amount: &str, indicator: &str, at: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02">
  <BkToCstmrStmt>
    <GrpHdr><MsgId>M1</MsgId><CreDtTm>{at}</CreDtTm></GrpHdr>
    <Stmt>
      <Id>S1</Id>
      <CreDtTm>{at}</CreDtTm>
      <Acct><Id><IBAN>{IBAN}</IBAN></Id><Ccy>USD</Ccy></Acct>
      <Bal>
        <Tp><CdOrPrtry><Cd>CLBD</Cd></CdOrPrtry></Tp>
        <Amt Ccy="USD">{amount}</Amt>
        <CdtDbtInd>{indicator}</CdtDbtInd>
        <Dt><DtTm>{at}</DtTm></Dt>
      </Bal>
    </Stmt>
  </BkToCstmrStmt>
</Document>
"#
    )
}

struct Setup {
    dir: tempfile::TempDir,
    ledger: RunningDevLedger,
    database: String,
    at: String,
}

impl Setup {
    /// A dev ledger holding one $485,000.00 credit to 4471's pending payouts, an empty
    /// migrated outbox, and the statement time just after the credit.
    async fn new() -> Self {
        let ledger = DevLedger::start(DevLedgerConfig {
            create_ledgers: vec!["payouts".to_owned()],
            ..DevLedgerConfig::default()
        })
        .await
        .unwrap();
        let answer = reqwest::Client::new()
            .post(format!("{}/v2/payouts/transactions", ledger.url()))
            .json(&serde_json::json!({"postings": [
                {"source": "world", "destination": PENDING, "amount": 48_500_000, "asset": "USD/2"}
            ]}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success());
        // Statement times are whole seconds: the next whole second is after the credit.
        let at = (chrono::Utc::now() + chrono::TimeDelta::seconds(1))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let dir = tempfile::TempDir::new().unwrap();
        let database = format!("sqlite://{}", dir.path().join("outbox.db").display());
        assert!(run(&["migrate", "--database", &database]).status.success());
        std::fs::write(
            dir.path().join("mapping.csv"),
            format!("iban,account\nDE89 3704 0044 0532 0130 00,{PENDING}\n"),
        )
        .unwrap();
        Self {
            dir,
            ledger,
            database,
            at,
        }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn balances(&self, statement: &str, extra: &[&str]) -> Output {
        let mut args = vec![
            "reconcile",
            "balances",
            "--database",
            &self.database,
            "--ledger-url",
        ];
        let url = self.ledger.url();
        args.extend([
            url.as_str(),
            "--ledger-name",
            "payouts",
            "--statement",
            statement,
        ]);
        args.extend(extra);
        run(&args)
    }

    fn mapping(&self) -> String {
        self.dir.path().join("mapping.csv").display().to_string()
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("OUTBOX_LOG", "error")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn findings(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_camt053_closing_balance_is_compared_in_minor_units() {
    let s = Setup::new().await;
    let equal = s.file("equal.xml", &camt053("485000.00", "CRDT", &s.at));
    let out = s.balances(&equal, &["--mapping", &s.mapping()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("balances: no exception"));

    // A debit balance at the provider where the ledger holds a credit: both amounts
    // named, exactly, in minor units.
    let debit = s.file("debit.xml", &camt053("485000.00", "DBIT", &s.at));
    let out = s.balances(&debit, &["--mapping", &s.mapping(), "--json"]);
    assert!(!out.status.success());
    let found = findings(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["kind"], "balance_mismatch");
    assert_eq!(found[0]["account"], PENDING);
    assert_eq!(found[0]["asset"], "USD/2");
    assert_eq!(found[0]["ledger_amount"], "48500000");
    assert_eq!(found[0]["provider_amount"], "-48500000");
    assert!(stderr(&out).contains("ControlFailed"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_statement_within_the_tolerance_passes_and_beyond_it_fails() {
    let s = Setup::new().await;
    let csv = s.file(
        "statement.csv",
        &format!(
            "account,asset,balance,as_of\n{PENDING},USD/2,48500002,{}\n",
            s.at
        ),
    );
    assert!(!s.balances(&csv, &[]).status.success());
    let out = s.balances(&csv, &["--tolerance", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_statements_are_refused_naming_what_is_wrong() {
    let s = Setup::new().await;
    let xml = s.file("s.xml", &camt053("485000.00", "CRDT", &s.at));
    let err = stderr(&s.balances(&xml, &[]));
    assert!(err.contains("--mapping"), "{err}");

    let cut = camt053("485000.00", "CRDT", &s.at);
    let truncated = s.file("truncated.xml", &cut[..cut.find("<CdtDbtInd>").unwrap()]);
    let err = stderr(&s.balances(&truncated, &["--mapping", &s.mapping()]));
    assert!(
        err.contains("truncated.xml") && err.contains("Stmt"),
        "{err}"
    );

    let float = s.file(
        "float.csv",
        &format!(
            "account,asset,balance,as_of\n{PENDING},USD/2,485000.00,{}\n",
            s.at
        ),
    );
    let err = stderr(&s.balances(&float, &[]));
    assert!(err.contains("line 2") && err.contains("balance"), "{err}");

    let other = s.file("s.txt", "hello");
    let err = stderr(&s.balances(&other, &[]));
    assert!(err.contains("--statement") && err.contains(".csv"), "{err}");
    assert!(Path::new(&s.database.trim_start_matches("sqlite://")).exists());
}
