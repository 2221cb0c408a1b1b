//! The cursor rule's fence on PostgreSQL: a fleet partition's view of the store moves
//! a cursor (its progress and its "@attempted" horizon) only while this instance holds
//! that partition's advisory lock; the plain store has no fence.

mod common;

use outbox_core::fleet::PartitionLocks;
use outbox_core::store::attempted_cursor;
use outbox_core::{ErrorKind, Position, Store};
use outbox_store_postgres::{AdvisoryLocks, PgPosition};
use uuid::Uuid;

use common::{open_store, server_url};

fn at(row: i64) -> Position {
    PgPosition::Snapshot { txid: 100, row }.encode()
}

#[tokio::test]
async fn a_partition_cursor_moves_only_while_its_lock_is_held() {
    let Some(db) = open_store().await else { return };
    // Lock keys derive from the relay name, not the schema: one name per run.
    let relay = format!("fence-{}", Uuid::now_v7().simple());
    let locks = AdvisoryLocks::connect(&server_url(), &relay, 2)
        .await
        .expect("lock session");
    let view = db
        .store
        .partition_view(1, 2, Some(locks.fence(1)))
        .expect("view");
    let name = format!("{relay}:g1:p1");
    let horizon = attempted_cursor(&name);
    let refused = |err: outbox_core::Error| {
        assert_eq!(err.kind(), &ErrorKind::Storage, "{err}");
        assert!(err.to_string().contains("no longer owned"), "{err}");
    };

    // Not owned: refused, nothing written.
    refused(view.save_cursor(&name, at(1)).await.unwrap_err());
    assert_eq!(db.store.load_cursor(&name).await.unwrap(), None);

    // Owned: forward only, the horizon as well.
    assert!(locks.try_acquire(1).await.unwrap());
    view.save_cursor(&name, at(2)).await.expect("owned: saved");
    view.save_cursor(&name, at(1))
        .await
        .expect("lower: no error");
    view.save_cursor(&horizon, at(3)).await.expect("horizon");
    assert_eq!(db.store.load_cursor(&name).await.unwrap(), Some(at(2)));
    assert_eq!(db.store.load_cursor(&horizon).await.unwrap(), Some(at(3)));

    // Given back (another instance may own it now): refused again, nothing moves.
    locks.release(1).await.unwrap();
    refused(view.save_cursor(&name, at(5)).await.unwrap_err());
    refused(view.save_cursor(&horizon, at(5)).await.unwrap_err());
    assert_eq!(db.store.load_cursor(&name).await.unwrap(), Some(at(2)));
    assert_eq!(db.store.load_cursor(&horizon).await.unwrap(), Some(at(3)));

    // The plain store runs no fleet: no fence, the same forward-only rule.
    db.store.save_cursor(&name, at(6)).await.expect("unfenced");
    db.store.save_cursor(&name, at(4)).await.expect("lower");
    assert_eq!(db.store.load_cursor(&name).await.unwrap(), Some(at(6)));
}
