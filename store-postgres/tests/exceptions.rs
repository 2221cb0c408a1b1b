//! The exception queue on PostgreSQL beyond the store suite: a raiser of a finding
//! that another transaction is recording waits for it and records nothing, and a
//! schema written by version 7 keeps its exceptions through migration 8.

mod common;

use std::time::Duration;

use outbox_core::{ExceptionKind, Inbox, NewException, Severity, Store};
use outbox_store_postgres::{MIGRATIONS_TABLE, PgInbox, PgStore};
use outbox_testkit::fixtures::account;
use sqlx::{AssertSqlSafe, Connection};

use common::{SchemaGuard, fresh_config, open_store, server_available};

fn gap() -> NewException {
    NewException::new(
        "treasury",
        ExceptionKind::Gap,
        account("merchants:4471"),
        3,
        "held for 301 s",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_raiser_behind_an_uncommitted_one_waits_and_records_nothing() {
    let Some(db) = open_store().await else { return };
    let pool = db.pool().clone();
    // The first raiser's transaction (a consumer's, as the inbox records it) stays open.
    let mut first = pool.begin().await.unwrap();
    assert!(
        PgInbox::new(&mut first)
            .record_exception(&gap())
            .await
            .unwrap()
    );
    let second = tokio::spawn({
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let recorded = PgInbox::new(&mut tx).record_exception(&gap()).await;
            tx.commit().await.unwrap();
            recorded
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !second.is_finished(),
        "the second raiser did not wait for the first one's row"
    );
    first.commit().await.unwrap();
    let recorded = tokio::time::timeout(Duration::from_secs(20), second)
        .await
        .expect("the second raiser still waits after the first committed")
        .unwrap()
        .unwrap();
    assert!(!recorded, "an open duplicate was recorded");
    assert_eq!(db.store.exceptions().await.unwrap().len(), 1);

    // A rolled-back first raiser leaves the finding to the next one.
    let id = db.store.exceptions().await.unwrap()[0].id;
    db.store
        .resolve_exception(id, "alice", "filled")
        .await
        .unwrap();
    let mut aborted = pool.begin().await.unwrap();
    assert!(
        PgInbox::new(&mut aborted)
            .record_exception(&gap())
            .await
            .unwrap()
    );
    aborted.rollback().await.unwrap();
    assert!(db.store.raise_exception(&gap()).await.unwrap());
    assert_eq!(db.store.exceptions().await.unwrap().len(), 2);
}

/// A connection to `schema` migrated to version 7 only, as a release before the
/// exception queue left it.
async fn schema_at_version_7(
    config: &outbox_store_postgres::PgConfig,
    schema: &str,
) -> sqlx::PgConnection {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.create_schema(schema.to_owned());
    migrator.dangerous_set_table_name(format!("{schema}.{MIGRATIONS_TABLE}"));
    let mut conn = sqlx::PgConnection::connect_with(&config.connect_options().unwrap())
        .await
        .unwrap();
    migrator
        .run_direct(Some(7), &mut conn, false)
        .await
        .unwrap();
    conn
}

/// The relay now names the event of what it raises. An exception it raised before the
/// upgrade, still open, stays the same finding: raised again after the upgrade (a
/// stopped account hits its mismatch again at every restart), it is the open one, not
/// a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_exception_from_before_the_upgrade_is_not_raised_twice() {
    if !server_available().await {
        return;
    }
    let config = fresh_config();
    let schema = config.schema.clone().unwrap();
    let _guard = SchemaGuard {
        schema: schema.clone(),
    };
    let (event_id, payload) = outbox_testkit::fixtures::payout("1007", 100)
        .encode(1)
        .unwrap();
    {
        let mut conn = schema_at_version_7(&config, &schema).await;
        sqlx::query(
            "INSERT INTO outbox_events (event_id, account, sequence, payload)
             VALUES ($1, 'merchants:1007', 1, $2)",
        )
        .bind(event_id.as_uuid())
        .bind(payload.as_bytes())
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO exceptions (source, kind, account, sequence, detail)
             VALUES ('relay', 'idempotency_mismatch', 'merchants:1007', 1, 'body changed')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }
    let store = PgStore::open(config).await.expect("migrate");
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

/// The audit readers never migrate. A schema an older release left (here at version
/// 7) is refused when opened, naming its version, this build's and the command that
/// upgrades it, instead of failing later on a column it does not have yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_reader_refuses_a_schema_behind_naming_outbox_migrate() {
    if !server_available().await {
        return;
    }
    let config = fresh_config();
    let schema = config.schema.clone().unwrap();
    let _guard = SchemaGuard {
        schema: schema.clone(),
    };
    schema_at_version_7(&config, &schema)
        .await
        .close()
        .await
        .unwrap();
    let err = outbox_store_postgres::PgAuditReader::open(&config)
        .await
        .expect_err("a schema at version 7 opened for the audit");
    let text = err.to_string();
    assert!(
        text.contains("version 7") && text.contains("outbox migrate"),
        "{text}"
    );
    drop(PgStore::open(config.clone()).await.unwrap());
    outbox_store_postgres::PgAuditReader::open(&config)
        .await
        .expect("opened once migrated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_7_schema_keeps_its_exceptions_and_dedupes_by_identity() {
    if !server_available().await {
        return;
    }
    let config = fresh_config();
    let schema = config.schema.clone().unwrap();
    let _guard = SchemaGuard {
        schema: schema.clone(),
    };
    // Versions 1 to 7 only, recorded as a release before the exception queue did.
    {
        let mut conn = schema_at_version_7(&config, &schema).await;
        for (source, kind, account, sequence, detail) in [
            (
                "relay",
                "rejected",
                "merchants:1007",
                2,
                "INSUFFICIENT_FUND",
            ),
            ("treasury", "gap", "merchants:4471", 3, "held for 301 s"),
            (
                "treasury",
                "conflicting_outcome",
                "merchants:4471",
                2,
                "committed after rejected",
            ),
        ] {
            sqlx::query(
                "INSERT INTO exceptions (source, kind, account, sequence, detail)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(source)
            .bind(kind)
            .bind(account)
            .bind(sequence as i64)
            .bind(detail)
            .execute(&mut conn)
            .await
            .unwrap();
        }
        let applied: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT max(version) FROM {schema}.{MIGRATIONS_TABLE}"
        )))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(applied, 7);
        conn.close().await.unwrap();
    }

    let store = PgStore::open(config.clone()).await.expect("migrate to 8");
    let all = store.exceptions().await.unwrap();
    let seen: Vec<_> = all
        .iter()
        .map(|e| {
            (
                e.source.as_str(),
                e.kind,
                e.severity,
                e.account.as_str(),
                e.sequence,
                e.detail.as_str(),
                e.event_id.as_deref(),
                e.is_open(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "relay",
                ExceptionKind::Rejected,
                Severity::Info,
                "merchants:1007",
                2,
                "INSUFFICIENT_FUND",
                None,
                true
            ),
            (
                "treasury",
                ExceptionKind::Gap,
                Severity::Warning,
                "merchants:4471",
                3,
                "held for 301 s",
                None,
                true
            ),
            (
                "treasury",
                ExceptionKind::ConflictingOutcome,
                Severity::Critical,
                "merchants:4471",
                2,
                "committed after rejected",
                None,
                true
            ),
        ]
    );
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "{all:?}");

    // The identity the migration computed is the one NewException computes.
    assert!(
        !store.raise_exception(&gap()).await.unwrap(),
        "an open duplicate"
    );
    // The old unique (source, kind, account, sequence) is gone: another event id at
    // the same account and sequence is another finding.
    assert!(
        store
            .raise_exception(&gap().with_event_id("01a23184-38b9-70de-ae6f-a8078bb71421"))
            .await
            .unwrap()
    );
    store
        .resolve_exception(all[1].id, "alice", "filled")
        .await
        .unwrap();
    assert!(
        store.raise_exception(&gap()).await.unwrap(),
        "back after its resolution"
    );
    assert_eq!(store.exceptions().await.unwrap().len(), 5);
}
