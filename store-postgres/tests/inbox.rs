//! PgInbox under concurrency: several workers (each a `tokio::spawn`ed task, which
//! needs `Send` futures) accept one consumer's messages at once, shuffled and with
//! redeliveries; every account still ends up applied once per sequence, in order.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use outbox_core::{Accepted, Handler, InboxEngine, InboxMessage, MessageKind, Result, Store};
use outbox_store_postgres::{PgInbox, map_error};
use outbox_testkit::fixtures::{impact_of, message};
use sqlx::PgPool;

use common::open_store;

struct Treasury;

impl Handler<PgInbox<'_>> for Treasury {
    async fn apply(&mut self, inbox: &mut PgInbox<'_>, m: &InboxMessage) -> Result<()> {
        sqlx::query("INSERT INTO treasury (account, instruction_id, delta) VALUES ($1, $2, $3)")
            .bind(m.account.as_str())
            .bind(&m.instruction_id)
            .bind(impact_of(m)?)
            .execute(inbox.connection())
            .await
            .map_err(map_error)?;
        Ok(())
    }
}

async fn accept(pool: &PgPool, engine: &InboxEngine, m: InboxMessage) -> Result<Accepted> {
    let mut tx = pool.begin().await.map_err(map_error)?;
    let accepted = engine
        .accept(&mut PgInbox::new(&mut tx), m, &mut Treasury)
        .await?;
    tx.commit().await.map_err(map_error)?;
    Ok(accepted)
}

/// A fixed permutation (xorshift), so a failure replays the same order.
fn shuffle<T>(items: &mut [T]) {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_workers_apply_each_sequence_once_in_order() {
    let Some(db) = open_store().await else { return };
    let pool = db.pool().clone();
    sqlx::query(
        "CREATE TABLE treasury (id bigserial, account text NOT NULL, instruction_id text NOT NULL, delta bigint NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();

    const PER_ACCOUNT: u64 = 15;
    let accounts = ["merchants:1", "merchants:2"];
    let mut messages = Vec::new();
    for account in accounts {
        for seq in 1..=PER_ACCOUNT {
            let m = message(
                &format!("{account}/{seq}"),
                account,
                seq,
                MessageKind::Committed,
                seq as i64 * 10,
            );
            if seq % 3 == 0 {
                messages.push(m.clone()); // a redelivery
            }
            messages.push(m);
        }
    }
    shuffle(&mut messages);
    let queue = Arc::new(Mutex::new(VecDeque::from(messages)));

    let engine = InboxEngine::new("treasury");
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, engine, queue) = (pool.clone(), engine.clone(), Arc::clone(&queue));
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                loop {
                    let next = queue.lock().unwrap().pop_front();
                    let Some(m) = next else { return outcomes };
                    outcomes.push(accept(&pool, &engine, m).await.expect("accept"));
                }
            })
        })
        .collect();
    let mut duplicates = 0;
    for worker in workers {
        for outcome in worker.await.unwrap() {
            duplicates += usize::from(outcome == Accepted::Duplicate);
        }
    }
    assert_eq!(duplicates, 2 * (PER_ACCOUNT as usize / 3));

    for account in accounts {
        let expected: Vec<String> = (1..=PER_ACCOUNT)
            .map(|s| format!("{account}/{s}"))
            .collect();
        let applied: Vec<String> = sqlx::query_scalar(
            "SELECT instruction_id FROM inbox_messages WHERE consumer = 'treasury' AND account = $1 ORDER BY sequence",
        )
        .bind(account)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(applied, expected, "{account}: markers");
        // Impacts were written in sequence order (ids are taken under the account lock).
        let impacts: Vec<String> = sqlx::query_scalar(
            "SELECT instruction_id FROM treasury WHERE account = $1 ORDER BY id",
        )
        .bind(account)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(impacts, expected, "{account}: impacts");
        let total: i64 =
            sqlx::query_scalar("SELECT sum(delta)::bigint FROM treasury WHERE account = $1")
                .bind(account)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(total, (1..=PER_ACCOUNT as i64).map(|s| s * 10).sum::<i64>());
    }
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_held")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(held, 0);
    // A redelivery that races the release of its own held original is a duplicate
    // too (the inbox looks again once it holds the account's lock), not a stale
    // sequence: no exception at all.
    let exceptions = db.store.exceptions().await.unwrap();
    assert!(exceptions.is_empty(), "{exceptions:?}");
}
