//! Upgrading a database written by an older version: migration 5 rebuilds
//! `exceptions` (new columns, dedupe on identity and recurrence) without losing a row,
//! an id or the AUTOINCREMENT high-water mark, and with its triggers in place.

use outbox_core::{ErrorKind, ExceptionKind, NewException, Severity, Store};
use outbox_store_sqlite::{SqliteConfig, SqliteStore, connect, map_error};
use outbox_testkit::fixtures::account;
use rusqlite::params;
use tempfile::TempDir;

/// Schema versions 1 to 4, as a release before the exception queue left a file.
const UP_TO_4: [&str; 4] = [
    include_str!("../migrations/0001_outbox.sql"),
    include_str!("../migrations/0002_fanout.sql"),
    include_str!("../migrations/0003_fanout_dead_letters.sql"),
    include_str!("../migrations/0004_retention.sql"),
];

#[tokio::test]
async fn a_version_4_database_keeps_its_exceptions_and_dedupes_by_identity() {
    let dir = TempDir::new().unwrap();
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    {
        let conn = connect(&config).unwrap();
        for sql in UP_TO_4 {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        for (source, kind, account, sequence, detail, at) in [
            (
                "relay",
                "rejected",
                "merchants:1007",
                2,
                "INSUFFICIENT_FUND",
                1_000,
            ),
            (
                "treasury",
                "gap",
                "merchants:4471",
                3,
                "held for 301 s",
                2_000,
            ),
            (
                "treasury",
                "conflicting_outcome",
                "merchants:4471",
                2,
                "committed after rejected",
                3_000,
            ),
        ] {
            conn.execute(
                "INSERT INTO exceptions (source, kind, account, sequence, detail, detected_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![source, kind, account, sequence, detail, at],
            )
            .unwrap();
        }
        // Ids up to 9 were handed out once (retention removed 4 to 9).
        conn.execute(
            "UPDATE sqlite_sequence SET seq = 9 WHERE name = 'exceptions'",
            [],
        )
        .unwrap();
    }

    let store = SqliteStore::open(config.clone())
        .await
        .expect("migrate to 5");
    let conn = connect(&config).unwrap();
    let high_water: i64 = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'exceptions'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(high_water, 9, "AUTOINCREMENT kept its high-water mark");
    let all = store.exceptions().await.unwrap();
    let seen: Vec<_> = all
        .iter()
        .map(|e| {
            (
                e.id,
                e.source.as_str(),
                e.kind,
                e.severity,
                e.account.as_str(),
                e.sequence,
                e.detail.as_str(),
                e.detected_at.timestamp_micros(),
                e.event_id.as_deref(),
                e.is_open(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                1,
                "relay",
                ExceptionKind::Rejected,
                Severity::Info,
                "merchants:1007",
                2,
                "INSUFFICIENT_FUND",
                1_000,
                None,
                true
            ),
            (
                2,
                "treasury",
                ExceptionKind::Gap,
                Severity::Warning,
                "merchants:4471",
                3,
                "held for 301 s",
                2_000,
                None,
                true
            ),
            (
                3,
                "treasury",
                ExceptionKind::ConflictingOutcome,
                Severity::Critical,
                "merchants:4471",
                2,
                "committed after rejected",
                3_000,
                None,
                true
            ),
        ]
    );

    // The identity the migration computed is the one NewException computes: the same
    // open finding raised now is a duplicate.
    let gap = NewException::new(
        "treasury",
        ExceptionKind::Gap,
        account("merchants:4471"),
        3,
        "held for 302 s",
    );
    assert!(
        !store.raise_exception(&gap).await.unwrap(),
        "an open duplicate"
    );
    store.resolve_exception(2, "alice", "filled").await.unwrap();
    assert!(
        store.raise_exception(&gap).await.unwrap(),
        "back after its resolution"
    );
    let newest = store.exceptions().await.unwrap().pop().unwrap();
    assert!(
        newest.id > 9,
        "an id retention removed was handed out again: {newest:?}"
    );

    // The rebuilt table is append-only again.
    for sql in [
        "UPDATE exceptions SET detail = 'rewritten'",
        "DELETE FROM exceptions WHERE id = 1",
    ] {
        let err = conn.execute(sql, []).map_err(map_error).expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert!(version >= 5, "{version}");
}

/// The relay now names the event of what it raises. An exception it raised before the
/// upgrade, still open, must stay the same finding: raised again after the upgrade
/// (the stopped account hits its mismatch again at every restart), it is the open one,
/// not a second.
#[tokio::test]
async fn a_relay_exception_from_before_the_upgrade_is_not_raised_twice() {
    let dir = TempDir::new().unwrap();
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    let event = outbox_testkit::fixtures::payout("1007", 100);
    let (event_id, payload) = event.encode(1).unwrap();
    {
        let conn = connect(&config).unwrap();
        for sql in UP_TO_4 {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute(
            "INSERT INTO outbox_events (event_id, account, sequence, payload, created_at)
             VALUES (?1, 'merchants:1007', 1, ?2, 0)",
            params![event_id.to_string(), payload.as_bytes()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO exceptions (source, kind, account, sequence, detail, detected_at)
             VALUES ('relay', 'idempotency_mismatch', 'merchants:1007', 1, 'body changed', 1000)",
            [],
        )
        .unwrap();
    }
    let store = SqliteStore::open(config).await.expect("migrate");
    // As the dispatcher raises it today.
    let again = NewException::new(
        "relay",
        ExceptionKind::IdempotencyMismatch,
        account("merchants:1007"),
        1,
        "body changed",
    )
    .with_event_id(event_id.to_string());
    assert!(
        !store.raise_exception(&again).await.unwrap(),
        "the open pre-upgrade exception was recorded a second time"
    );
    let all = store.exceptions().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].event_id, Some(event_id.to_string()));
}

/// The audit readers never migrate. A database an older release left (here at version
/// 4) is refused when opened, naming its version, this build's and the command that
/// upgrades it, instead of failing later on a column it does not have yet.
#[tokio::test]
async fn the_audit_reader_refuses_a_database_behind_naming_outbox_migrate() {
    let dir = TempDir::new().unwrap();
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    {
        let conn = connect(&config).unwrap();
        for sql in UP_TO_4 {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
    }
    let err = outbox_store_sqlite::SqliteAuditReader::open(&config)
        .await
        .expect_err("a database at version 4 opened for the audit");
    let text = err.to_string();
    assert!(
        text.contains("version 4") && text.contains("outbox migrate"),
        "{text}"
    );
    drop(SqliteStore::open(config.clone()).await.unwrap());
    outbox_store_sqlite::SqliteAuditReader::open(&config)
        .await
        .expect("opened once migrated");
}
