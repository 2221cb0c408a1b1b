//! The status views of a SQLite database (`SqliteAuditReader` as a `StatusReader`):
//! the testkit cases, and the gap queue read from rows a consumer's inbox wrote.

use outbox_core::status::StatusReader;
use outbox_store_sqlite::{
    SqliteAuditReader, SqliteConfig, SqliteFanoutStore, SqliteStore, connect, enqueue,
};
use outbox_testkit::fixtures::{account, payout, settlement};
use outbox_testkit::status_cases;
use tempfile::TempDir;

fn config(dir: &TempDir) -> SqliteConfig {
    SqliteConfig::new(dir.path().join("status.db"))
}

#[tokio::test]
async fn outbox_views() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(config(&dir)).await.unwrap();
    let mut conn = connect(&config(&dir)).unwrap();
    let tx = conn.transaction().unwrap();
    let events: Vec<_> = [settlement("1", 100), payout("1", 40), settlement("2", 100)]
        .iter()
        .map(|event| enqueue(&tx, event).unwrap())
        .collect();
    tx.commit().unwrap();
    let reader = SqliteAuditReader::open(&config(&dir)).await.unwrap();
    status_cases::outbox_views(&store, &events, &reader).await;
}

#[tokio::test]
async fn fanout_views() {
    let dir = TempDir::new().unwrap();
    let fanout = SqliteFanoutStore::open(config(&dir)).await.unwrap();
    let reader = SqliteAuditReader::open(&config(&dir)).await.unwrap();
    status_cases::fanout_views(&fanout, &reader).await;
}

#[tokio::test]
async fn gaps_name_the_consumer_the_account_and_the_last_applied_sequence() {
    let dir = TempDir::new().unwrap();
    drop(SqliteStore::open(config(&dir)).await.unwrap());
    let conn = connect(&config(&dir)).unwrap();
    // treasury applied merchants:1 through #2 and holds #4 and #5 (#3 is missing);
    // audit holds merchants:2 #2 with nothing applied.
    conn.execute_batch(
        "INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES ('treasury', 'merchants:1', 2);
         INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at) VALUES
             ('treasury', 'merchants:1', 5, 'i5', 'committed', x'00', 2000000),
             ('treasury', 'merchants:1', 4, 'i4', 'committed', x'00', 3000000),
             ('audit', 'merchants:2', 2, 'j2', 'committed', x'00', 1000000);",
    )
    .unwrap();
    let reader = SqliteAuditReader::open(&config(&dir)).await.unwrap();
    let gaps = reader.gaps().await.unwrap();
    assert_eq!(gaps.len(), 2, "{gaps:?}");
    let (audit, treasury) = (&gaps[0], &gaps[1]);
    assert_eq!(
        (audit.consumer.as_str(), &audit.account),
        ("audit", &account("merchants:2"))
    );
    assert_eq!(
        (audit.last_applied, audit.lowest_held, audit.held),
        (0, 2, 1)
    );
    assert_eq!(audit.oldest_held_at.timestamp(), 1);
    assert_eq!(treasury.consumer, "treasury");
    assert_eq!(
        (treasury.last_applied, treasury.lowest_held, treasury.held),
        (2, 4, 2)
    );
    assert_eq!(
        treasury.oldest_held_at.timestamp(),
        2,
        "the oldest hold of the account"
    );
}
