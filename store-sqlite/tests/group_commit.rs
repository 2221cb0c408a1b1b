//! `GroupCommit` on its own, as a team's SQLite consumer would use it: requests that
//! wait together share one transaction, a failing one leaves nothing and fails alone.

use std::sync::{Arc, Mutex};

use outbox_core::Error;
use outbox_store_sqlite::{GroupCommit, SqliteConfig, connect};
use outbox_testkit::write_lock::behind_the_write_lock;
use rusqlite::params;

/// Writes `(id, now)`; an id that is negative is refused after its row was written,
/// so a kept row would show that the failure was not rolled back.
fn write(conn: &rusqlite::Connection, id: &i64, now: i64) -> outbox_core::Result<i64> {
    conn.execute(
        "INSERT INTO seen (id, at) VALUES (?1, ?2)",
        params![id, now],
    )
    .map_err(outbox_store_sqlite::map_error)?;
    if *id < 0 {
        return Err(Error::invalid("id", "negative"));
    }
    Ok(*id * 10)
}

fn rows(config: &SqliteConfig) -> Vec<(i64, i64)> {
    let conn = connect(config).expect("connect");
    let mut stmt = conn
        .prepare("SELECT id, at FROM seen ORDER BY id")
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_requests_share_one_transaction_and_fail_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = SqliteConfig::new(dir.path().join("group.db"));
    let conn = connect(&config).expect("connect");
    conn.execute_batch("CREATE TABLE seen (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)")
        .expect("schema");
    let group = GroupCommit::new(Arc::new(Mutex::new(conn)), Box::new(write));

    let outcomes = behind_the_write_lock(&config.path, || {
        [1_i64, 2, -3, 4]
            .into_iter()
            .map(|id| {
                let group = Arc::clone(&group);
                tokio::spawn(async move { group.submit(id).await })
            })
            .collect()
    })
    .await;
    let answers: Vec<Option<i64>> = outcomes.iter().map(|o| o.as_ref().ok().copied()).collect();
    // The first request may have been taken alone before the blocker was seen; the
    // others waited together.
    assert_eq!(answers, [Some(10), Some(20), None, Some(40)]);
    let err = outcomes[2].as_ref().expect_err("refused");
    assert_eq!(err.field(), Some("id"), "{err}");

    let stored = rows(&config);
    let ids: Vec<i64> = stored.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2, 4], "the refused request's row was rolled back");
    assert_eq!(
        stored[1].1, stored[2].1,
        "2 and 4 were written in one transaction"
    );

    // At an idle connection a request is written at once, in a transaction of its own.
    assert_eq!(group.submit(5).await.expect("lone"), 50);
    let lone = rows(&config);
    assert_eq!(lone.len(), 4);
    assert!(lone[3].1 > lone[2].1, "a later group has a later timestamp");
}
