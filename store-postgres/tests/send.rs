//! Compile-time check: the crate's futures are `Send` for any borrow, so callers can
//! `tokio::spawn` them and await them inside `#[async_trait]` methods. (sqlx's
//! `Acquire`-generic migrator once made `PgStore::open` fail this.)

use std::time::Duration;

use chrono::NaiveDate;
use outbox_core::{Account, Inbox, InboxMessage, NewEvent};
use outbox_store_postgres::{PgConfig, PgInbox, PgStore, connect, enqueue, migrate, partitions};
use sqlx::{PgConnection, PgPool};

fn send<T: Send>(_: T) {}

#[allow(dead_code)]
fn futures_are_send(
    config: PgConfig,
    pool: PgPool,
    store: PgStore,
    conn: &mut PgConnection,
    event: &NewEvent,
    message: &InboxMessage,
    account: &Account,
) {
    send(connect(&config));
    send(migrate(&pool, &config));
    send(PgStore::open(config.clone()));
    send(store.polling_relay("relay"));
    send(store.wakeup());
    send(store.horizon());
    send(store.partitions());
    send(store.ensure_partitions(NaiveDate::MIN, 1));
    send(partitions::ensure_partitions(
        &pool,
        NaiveDate::MIN,
        1,
        Duration::ZERO,
    ));
    send(enqueue(conn, event));
    let mut inbox = PgInbox::new(conn);
    send(inbox.processed_kind("consumer", "id"));
    send(inbox.last_applied("consumer", account));
    send(inbox.mark_applied("consumer", message));
    send(inbox.hold("consumer", message));
    send(inbox.take_held("consumer", account, 1));
    send(inbox.held_gaps("consumer"));
}

#[test]
fn public_futures_are_send() {
    // The check is that `futures_are_send` compiles.
    let _ = futures_are_send;
}
