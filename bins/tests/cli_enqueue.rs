//! `outbox migrate` and `outbox enqueue` as a user runs them: real processes on a real file.

use std::path::Path;
use std::process::{Command, Output};

use rusqlite::Connection;

fn outbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .output()
        .expect("run outbox")
}

fn payout_line(merchant: u32, amount: &str) -> String {
    format!(
        r#"{{"account":"merchants:{merchant}","postings":[{{"source":"merchants:{merchant}:available","destination":"merchants:{merchant}:payouts:pending","amount":{amount},"asset":"USD/2"}}],"reference":"payout:{merchant}:{amount}:{}","metadata":{{"event_type":"payout.requested"}}}}"#,
        uuid_like()
    )
}

fn uuid_like() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    u128::from(N.fetch_add(1, Ordering::SeqCst)) + u128::from(std::process::id()) * 1_000_000
}

fn count(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[test]
fn migrate_then_enqueue_a_file() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("outbox.db");
    let url = format!("sqlite://{}", db.display());
    let out = outbox(&["migrate", "--database", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox_events"), 0);

    let file = dir.path().join("payouts.jsonl");
    let lines: Vec<String> = (0..6)
        .map(|i| payout_line(4471 + i % 2, "48500000"))
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n\n").unwrap();
    let out = outbox(&[
        "enqueue",
        "--database",
        &url,
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("enqueued 6 events for 2 accounts"));
    assert_eq!(count(&db, "SELECT count(*) FROM outbox_events"), 6);
    assert_eq!(
        count(
            &db,
            "SELECT max(sequence) FROM outbox_events WHERE account = 'merchants:4471'"
        ),
        3
    );
}

#[test]
fn a_bad_line_is_named_and_nothing_is_committed() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("outbox.db");
    let url = format!("sqlite://{}", db.display());
    let file = dir.path().join("payouts.jsonl");
    let lines = [
        payout_line(1, "100"),
        payout_line(1, "200"),
        payout_line(1, "4850.5"),
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = outbox(&[
        "enqueue",
        "--database",
        &url,
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid postings[0].amount") && stderr.contains("[line=3]"),
        "{stderr}"
    );
    assert!(!db.exists() || count(&db, "SELECT count(*) FROM outbox_events") == 0);
}

#[test]
fn a_duplicate_event_id_rolls_back_the_whole_file() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("outbox.db");
    let url = format!("sqlite://{}", db.display());
    let file = dir.path().join("payouts.jsonl");
    let id = "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59";
    let with_id = |amount: u32| {
        format!(
            r#"{{"account":"merchants:1","event_id":"{id}","postings":[{{"source":"world","destination":"merchants:1","amount":{amount},"asset":"USD/2"}}]}}"#
        )
    };
    std::fs::write(
        &file,
        [payout_line(1, "5"), with_id(1), with_id(2)].join("\n"),
    )
    .unwrap();
    let out = outbox(&[
        "enqueue",
        "--database",
        &url,
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid event_id") && stderr.contains("[line=3]"),
        "{stderr}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox_events"), 0);
}

#[test]
fn an_unknown_database_scheme_is_named() {
    let out = outbox(&["migrate", "--database", "mysql://x"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid database") && stderr.contains("sqlite://PATH or postgres://"),
        "{stderr}"
    );
}

/// Only meaningful in a build without the `postgres` feature (CI builds all features).
#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_url_without_the_feature_names_the_feature() {
    let out = outbox(&["migrate", "--database", "postgres://127.0.0.1/test"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--features postgres"), "{stderr}");
}

#[test]
fn several_processes_write_one_file_without_gaps() {
    const PROCESSES: u32 = 4;
    const LINES: u32 = 250;
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("outbox.db");
    let url = format!("sqlite://{}", db.display());
    assert!(outbox(&["migrate", "--database", &url]).status.success());
    let mut children = Vec::new();
    for p in 0..PROCESSES {
        // Each process commits its own file in chunks, so the writers interleave.
        for chunk in 0..5 {
            let file = dir.path().join(format!("p{p}-{chunk}.jsonl"));
            let lines: Vec<String> = (0..LINES / 5)
                .map(|i| payout_line(i % 10, &(1 + p * 1000 + i).to_string()))
                .collect();
            std::fs::write(&file, lines.join("\n")).unwrap();
        }
        let url = url.clone();
        let dir = dir.path().to_path_buf();
        children.push(std::thread::spawn(move || {
            (0..5)
                .map(|chunk| {
                    let file = dir.join(format!("p{p}-{chunk}.jsonl"));
                    Command::new(env!("CARGO_BIN_EXE_outbox"))
                        .args([
                            "enqueue",
                            "--database",
                            &url,
                            "--file",
                            file.to_str().unwrap(),
                        ])
                        .output()
                        .expect("run outbox")
                })
                .collect::<Vec<_>>()
        }));
    }
    for child in children {
        for out in child.join().unwrap() {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM outbox_events"),
        i64::from(PROCESSES * LINES)
    );
    let conn = Connection::open(&db).unwrap();
    let mut stmt = conn.prepare("SELECT account, count(*), max(sequence), min(sequence) FROM outbox_events GROUP BY account").unwrap();
    let rows: Vec<(String, i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 10);
    for (account, n, max, min) in rows {
        assert_eq!((min, max), (1, n), "{account}: sequences not gapless");
    }
    // Position order is sequence order for every account (commit order = sequence order).
    let disorder: i64 = count(
        &db,
        "SELECT count(*) FROM outbox_events a JOIN outbox_events b ON a.account = b.account AND a.position < b.position AND a.sequence > b.sequence",
    );
    assert_eq!(disorder, 0);
}
