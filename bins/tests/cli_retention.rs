//! `outbox retention set | show` and `outbox retention` as an operator runs them: real
//! processes on a real SQLite file. Old rows are written straight into the tables with
//! old timestamps (the store stamps its own rows with the current time).

use std::path::Path;
use std::process::{Command, Output};

use chrono::{Days, NaiveDate, Utc};
use rusqlite::{Connection, params};

fn outbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .output()
        .expect("run outbox")
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn migrated(dir: &Path) -> String {
    let url = format!("sqlite://{}", dir.join("outbox.db").display());
    let out = outbox(&["migrate", "--database", &url]);
    assert!(out.status.success(), "{}", text(&out));
    url
}

fn day(days_ago: u64) -> NaiveDate {
    Utc::now().date_naive() - Days::new(days_ago)
}

fn noon(days_ago: u64) -> i64 {
    day(days_ago)
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_micros()
}

fn event(conn: &Connection, id: &str, sequence: i64, days_ago: u64, outcome: Option<&str>) {
    conn.execute(
        "INSERT INTO outbox_events (event_id, account, sequence, payload, created_at)
         VALUES (?1, 'merchants:4471', ?2, x'7b7d', ?3)",
        params![id, sequence, noon(days_ago)],
    )
    .unwrap();
    if let Some(outcome) = outcome {
        conn.execute(
            "INSERT INTO outbox_deliveries (event_id, attempt, outcome, at) VALUES (?1, 1, ?2, 0)",
            params![id, outcome],
        )
        .unwrap();
    }
}

#[test]
fn retention_set_refuses_a_keep_shorter_than_the_ledgers() {
    let dir = tempfile::TempDir::new().unwrap();
    let url = migrated(dir.path());
    for (keep, ledger) in [("90d", "400d"), ("400d", "forever")] {
        let out = outbox(&[
            "retention",
            "set",
            "--database",
            &url,
            "--keep",
            keep,
            "--ledger-keeps",
            ledger,
            "--by",
            "alice",
        ]);
        assert!(!out.status.success(), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("keep") && stderr.contains("shorter than the ledger's"),
            "{}",
            text(&out)
        );
    }
    let out = outbox(&["retention", "show", "--database", &url]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no retention policy"),
        "{}",
        text(&out)
    );
    let out = outbox(&[
        "retention",
        "set",
        "--database",
        &url,
        "--keep",
        "400",
        "--ledger-keeps",
        "400d",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("keep"),
        "{}",
        text(&out)
    );
}

#[test]
fn retention_set_then_show_prints_the_policy_in_force() {
    let dir = tempfile::TempDir::new().unwrap();
    let url = migrated(dir.path());
    for (keep, ledger, by) in [("30d", "30d", "alice"), ("400d", "400d", "bob")] {
        let out = outbox(&[
            "retention",
            "set",
            "--database",
            &url,
            "--keep",
            keep,
            "--ledger-keeps",
            ledger,
            "--by",
            by,
        ]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = outbox(&["retention", "show", "--database", &url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("keep 400d")
            && stdout.contains("ledger keeps 400d")
            && stdout.contains("set by bob"),
        "{}",
        text(&out)
    );
    let out = outbox(&["retention", "show", "--database", &url, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("show --json");
    assert_eq!(json["keep"], "400d");
    assert_eq!(json["keep_seconds"], 400 * 86_400);
    assert_eq!(json["ledger_keeps"], "400d");
    assert_eq!(json["set_by"], "bob");
}

#[test]
fn retention_drops_expired_delivered_days_and_says_why_it_keeps_the_others() {
    let dir = tempfile::TempDir::new().unwrap();
    let url = migrated(dir.path());
    let conn = Connection::open(dir.path().join("outbox.db")).unwrap();
    event(
        &conn,
        "0190a6f0-0000-7000-8000-000000000001",
        1,
        40,
        Some("accepted"),
    );
    event(
        &conn,
        "0190a6f0-0000-7000-8000-000000000002",
        2,
        39,
        Some("failed"),
    );
    event(&conn, "0190a6f0-0000-7000-8000-000000000003", 3, 0, None);
    conn.execute(
        "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind, ledger,
             payload, received_at)
         VALUES ('k', 'i', 'merchants:4471', 1, 'committed', 'payouts', x'7b7d', ?1)",
        [noon(40)],
    )
    .unwrap();

    let out = outbox(&["retention", "--database", &url]);
    assert!(!out.status.success(), "without a policy: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("outbox retention set"),
        "{}",
        text(&out)
    );

    let set = outbox(&[
        "retention",
        "set",
        "--database",
        &url,
        "--keep",
        "30d",
        "--ledger-keeps",
        "30d",
        "--by",
        "ops",
    ]);
    assert!(set.status.success(), "{}", text(&set));
    let out = outbox(&["retention", "--database", &url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains(&format!("outbox: dropped {} (2 rows)", day(40))),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!(
            "outbox: kept {}: 1 events without a terminal delivery record",
            day(39)
        )),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!(
            "fanout: kept {}: no destination has a cursor",
            day(40)
        )),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("keep 30d"),
        "the policy applied is named: {}",
        text(&out)
    );
    let left: i64 = conn
        .query_row("SELECT count(*) FROM outbox_events", [], |row| row.get(0))
        .unwrap();
    assert_eq!(left, 2);

    let out = outbox(&["retention", "--database", &url, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("retention --json");
    let periods = json["periods"].as_array().expect("periods");
    assert!(
        periods.iter().any(|p| p["family"] == "outbox"
            && p["day"] == day(39).to_string()
            && p["kept"].as_str().is_some_and(|r| r.contains("1 events"))),
        "{json}"
    );

    // The override is for PostgreSQL outbox partitions; SQLite follows the policy.
    let out = outbox(&["retention", "--database", &url, "--older-than", "90d"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("older_than"),
        "{}",
        text(&out)
    );
}
