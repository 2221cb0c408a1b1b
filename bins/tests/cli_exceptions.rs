//! `outbox exceptions list | resolve` as an operator runs them: the real binary on a
//! SQLite file and on a PostgreSQL schema, over exceptions raised through the store
//! API the relay, the inbox and the checks use.

use std::process::{Command, Output};

use outbox_core::{Account, ExceptionKind, NewException, Store};

fn outbox(args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    command.args(args);
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command.output().expect("run outbox")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(args: &[&str]) -> String {
    let out = outbox(args, &[]);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The stderr of a run that must fail.
fn refused(args: &[&str], env: &[(&str, Option<&str>)]) -> String {
    let out = outbox(args, env);
    assert!(!out.status.success(), "{args:?} succeeded: {}", text(&out));
    String::from_utf8(out.stderr).expect("utf-8")
}

fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

/// $485,000.00 short at the provider, beyond what an i64 holds on the ledger's side.
const LEDGER: i128 = 9_223_372_036_854_775_807_000;
const PROVIDER: i128 = -48_500_000;
const EVENT: &str = "01a23184-38b9-70de-ae6f-a8078bb71421";

async fn seed(store: &dyn Store) {
    let account = |a: &str| Account::parse(a).unwrap();
    for exception in [
        NewException::new(
            "reconcile:balances",
            ExceptionKind::BalanceMismatch,
            account("merchants:4471:payouts:pending"),
            7,
            "statement line off by $485,000.00",
        )
        .with_event_id(EVENT)
        .with_ledger_tx(73)
        .with_asset("USD/2")
        .with_amounts(Some(LEDGER), Some(PROVIDER)),
        NewException::new(
            "treasury",
            ExceptionKind::Gap,
            account("merchants:4471"),
            3,
            "sequence 3 missing; 4 held for 301 s",
        ),
        NewException::new(
            "relay",
            ExceptionKind::Rejected,
            account("merchants:1007"),
            2,
            "INSUFFICIENT_FUND",
        ),
    ] {
        assert!(store.raise_exception(&exception).await.unwrap());
    }
}

/// Everything the commands promise, on the database `url` holding [`seed`]'s rows.
fn list_and_resolve(url: &str) {
    let table = ok(&["exceptions", "list", "--database", url]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three rows:\n{table}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("PROVIDER") && lines[0].ends_with("DETAIL"),
        "{table}"
    );
    let balance = lines[1];
    for cell in [
        "critical",
        "balance_mismatch",
        "reconcile:balances",
        "merchants:4471:payouts:pending",
        EVENT,
        " 73 ",
        "USD/2",
        &LEDGER.to_string(),
        &PROVIDER.to_string(),
        "open",
        "statement line off by $485,000.00",
    ] {
        assert!(balance.contains(cell), "{cell:?} missing from {balance:?}");
    }
    assert!(
        lines[2].contains("gap") && lines[2].contains("warning"),
        "{table}"
    );
    assert!(
        lines[3].contains("rejected") && lines[3].contains("info"),
        "{table}"
    );

    let all = json_lines(&ok(&["exceptions", "list", "--database", url, "--json"]));
    assert_eq!(all.len(), 3, "{all:?}");
    let first = &all[0];
    assert_eq!(
        first["ledger_amount"],
        LEDGER.to_string(),
        "exact, as a string"
    );
    assert_eq!(first["provider_amount"], PROVIDER.to_string());
    assert_eq!(
        (
            &first["kind"],
            &first["severity"],
            &first["account"],
            &first["sequence"]
        ),
        (
            &"balance_mismatch".into(),
            &"critical".into(),
            &"merchants:4471:payouts:pending".into(),
            &7.into()
        )
    );
    assert_eq!(
        (&first["event_id"], &first["ledger_tx"]),
        (&EVENT.into(), &73.into())
    );
    assert_eq!(
        (&first["open"], &first["resolution"]),
        (&true.into(), &serde_json::Value::Null)
    );
    assert_eq!(all[2]["ledger_amount"], serde_json::Value::Null);
    let id = |n: usize| all[n]["id"].as_i64().expect("id");

    let gaps = json_lines(&ok(&[
        "exceptions",
        "list",
        "--database",
        url,
        "--open",
        "--kind",
        "gap",
        "--json",
    ]));
    assert_eq!(
        gaps.iter().map(|e| e["id"].as_i64()).collect::<Vec<_>>(),
        [Some(id(1))]
    );
    let two_kinds = json_lines(&ok(&[
        "exceptions",
        "list",
        "--database",
        url,
        "--kind",
        "rejected",
        "--kind",
        "balance_mismatch",
        "--json",
    ]));
    assert_eq!(two_kinds.len(), 2, "{two_kinds:?}");
    let stderr = refused(
        &["exceptions", "list", "--database", url, "--kind", "gaps"],
        &[],
    );
    assert!(
        stderr.contains("kind")
            && stderr.contains("\"gaps\"")
            && stderr.contains("balance_mismatch"),
        "the valid kinds are listed: {stderr}"
    );

    let gap = id(1).to_string();
    let out = ok(&[
        "exceptions",
        "resolve",
        &gap,
        "--note",
        "fan-out redelivered sequence 3",
        "--by",
        "alice",
        "--database",
        url,
    ]);
    assert!(
        out.starts_with(&format!(
            "resolved exception {gap} (gap merchants:4471 #3) by alice at "
        )) && out.trim_end().ends_with(": fan-out redelivered sequence 3"),
        "{out}"
    );
    let open = json_lines(&ok(&[
        "exceptions",
        "list",
        "--database",
        url,
        "--open",
        "--json",
    ]));
    assert_eq!(
        open.iter().map(|e| e["id"].as_i64()).collect::<Vec<_>>(),
        [Some(id(0)), Some(id(2))]
    );
    let after = json_lines(&ok(&["exceptions", "list", "--database", url, "--json"]));
    assert_eq!(after[1]["open"], false);
    assert_eq!(after[1]["resolution"]["resolved_by"], "alice");
    assert_eq!(
        after[1]["resolution"]["note"],
        "fan-out redelivered sequence 3"
    );
    let table = ok(&["exceptions", "list", "--database", url]);
    assert!(
        table
            .lines()
            .nth(2)
            .unwrap()
            .contains("resolved by alice at "),
        "{table}"
    );
    let none = ok(&[
        "exceptions",
        "list",
        "--database",
        url,
        "--open",
        "--kind",
        "gap",
    ]);
    assert_eq!(none.trim(), "no open exceptions of kind gap");

    // Refusals, each naming what is wrong; none of them records anything.
    let again = refused(
        &[
            "exceptions",
            "resolve",
            &gap,
            "--note",
            "again",
            "--by",
            "mallory",
            "--database",
            url,
        ],
        &[],
    );
    assert!(again.contains("already resolved by alice"), "{again}");
    let unknown = refused(
        &[
            "exceptions",
            "resolve",
            "999999",
            "--note",
            "n",
            "--by",
            "alice",
            "--database",
            url,
        ],
        &[],
    );
    assert!(
        unknown.contains("id") && unknown.contains("no exception 999999"),
        "{unknown}"
    );
    let rejected = id(2).to_string();
    let empty = refused(
        &[
            "exceptions",
            "resolve",
            &rejected,
            "--note",
            " ",
            "--by",
            "alice",
            "--database",
            url,
        ],
        &[],
    );
    assert!(empty.contains("note"), "{empty}");
    let nobody = refused(
        &[
            "exceptions",
            "resolve",
            &rejected,
            "--note",
            "refund sent",
            "--database",
            url,
        ],
        &[("USER", None), ("USERNAME", None)],
    );
    assert!(nobody.contains("--by"), "{nobody}");
    let open = json_lines(&ok(&[
        "exceptions",
        "list",
        "--database",
        url,
        "--open",
        "--json",
    ]));
    assert_eq!(
        open.len(),
        2,
        "a refused resolution recorded something: {open:?}"
    );

    // --by defaults to $USER.
    let out = outbox(
        &[
            "exceptions",
            "resolve",
            &rejected,
            "--note",
            "refund sent",
            "--database",
            url,
        ],
        &[("USER", Some("bob"))],
    );
    assert!(out.status.success(), "{}", text(&out));
    let after = json_lines(&ok(&["exceptions", "list", "--database", url, "--json"]));
    assert_eq!(after[2]["resolution"]["resolved_by"], "bob");
}

#[tokio::test]
async fn sqlite_exceptions_are_listed_and_resolved() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("outbox.db");
    let url = format!("sqlite://{}", path.display());
    let store =
        outbox_store_sqlite::SqliteStore::open(outbox_store_sqlite::SqliteConfig::new(&path))
            .await
            .unwrap();
    seed(&store).await;
    list_and_resolve(&url);

    // A path with no database is an error, and stays without one.
    let missing = dir.path().join("nothing-here.db");
    let stderr = refused(
        &[
            "exceptions",
            "list",
            "--database",
            &format!("sqlite://{}", missing.display()),
        ],
        &[],
    );
    assert!(stderr.contains("no SQLite database"), "{stderr}");
    assert!(!missing.exists(), "listing created a database");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_exceptions_are_listed_and_resolved() {
    use outbox_store_postgres::{PgConfig, PgStore};
    use sqlx::Connection;

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
    let schema = format!("outbox_cli_exc_{}", uuid::Uuid::now_v7().simple());
    let store = PgStore::open(PgConfig::new(&server).with_schema(&schema))
        .await
        .unwrap();
    seed(&store).await;
    drop(store);
    let separator = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{separator}schema={schema}");
    let outcome = std::panic::catch_unwind(|| list_and_resolve(&url));
    let mut conn = sqlx::PgConnection::connect(&server).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&mut conn)
        .await
        .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
