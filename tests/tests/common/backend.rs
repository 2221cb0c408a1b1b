//! The outbox under test on either store, for the cases that run on both.

use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_core::{DeliveryOutcome, EventId, NewEvent, OutboxEvent, Store};

use super::Outbox;
use super::postgres::PgOutbox;

/// The outbox under test, on either store.
pub enum Backend {
    Sqlite(Outbox),
    Postgres(PgOutbox),
}

/// A write lock on the delivery records, held by the test: the relay's next record
/// waits behind it.
pub enum RecordLock {
    Sqlite(rusqlite::Connection),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Backend {
    pub fn url(&self) -> String {
        match self {
            Self::Sqlite(o) => o.url(),
            Self::Postgres(o) => o.url(),
        }
    }

    pub async fn enqueue(&self, events: &[NewEvent]) -> Vec<OutboxEvent> {
        match self {
            Self::Sqlite(o) => o.enqueue(events),
            Self::Postgres(o) => o.enqueue(events).await,
        }
    }

    /// The store the auditor reads the outbox from.
    pub fn completeness(&self) -> &dyn CompletenessStore {
        match self {
            Self::Sqlite(o) => &o.store,
            Self::Postgres(o) => &o.store,
        }
    }

    pub async fn outcomes(&self, id: EventId) -> Vec<DeliveryOutcome> {
        let records = match self {
            Self::Sqlite(o) => o.store.deliveries(id).await,
            Self::Postgres(o) => o.store.deliveries(id).await,
        };
        records.unwrap().into_iter().map(|r| r.outcome).collect()
    }

    pub async fn lock_records(&self) -> RecordLock {
        match self {
            Self::Sqlite(o) => {
                let conn = o.store.connect().unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                RecordLock::Sqlite(conn)
            }
            Self::Postgres(o) => {
                let mut tx = o.store.pool().begin().await.unwrap();
                sqlx::query("LOCK TABLE outbox_deliveries IN EXCLUSIVE MODE")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                RecordLock::Postgres(tx)
            }
        }
    }

    pub async fn cleanup(self) {
        if let Self::Postgres(o) = self {
            o.drop(None).await;
        }
    }
}

impl RecordLock {
    pub async fn release(self) {
        match self {
            Self::Sqlite(conn) => conn.execute_batch("ROLLBACK").unwrap(),
            Self::Postgres(tx) => tx.rollback().await.unwrap(),
        }
    }
}

pub async fn sqlite() -> Backend {
    Backend::Sqlite(Outbox::new().await)
}

pub async fn postgres() -> Option<Backend> {
    PgOutbox::new().await.map(Backend::Postgres)
}
