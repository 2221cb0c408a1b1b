//! The read-only store readers `outbox audit` uses, one per database URL: SQLite
//! (`outbox_store_sqlite::SqliteAuditReader`) or PostgreSQL
//! (`outbox_store_postgres::PgAuditReader`). Neither creates nor migrates anything.

use outbox_core::reconcile::sequences::AppliedMarker;
use outbox_core::{
    Account, DeadLetter, DeliveryRecord, EventId, Exception, HeldMessage, OutboxEvent, Result,
    StoredMessage,
};

use super::{Database, database};

/// An existing database, opened for the audit's lookups.
#[derive(Debug, Clone)]
pub enum AuditStore {
    #[cfg(feature = "sqlite")]
    Sqlite(outbox_store_sqlite::SqliteAuditReader),
    #[cfg(feature = "postgres")]
    Postgres(outbox_store_postgres::PgAuditReader),
}

/// Opens the database `url` names for reading; `flag` (`--database`,
/// `--fanout-database`, …) is named in every error.
///
/// # Errors
/// A bad URL or one whose adapter was not compiled in, a SQLite file that does not
/// exist, a server that cannot be reached.
pub async fn audit_store(flag: &str, url: &str) -> Result<AuditStore> {
    let opened = match database(url).map_err(|e| e.with("flag", flag))? {
        #[cfg(feature = "sqlite")]
        Database::Sqlite(config) => outbox_store_sqlite::SqliteAuditReader::open(&config)
            .await
            .map(AuditStore::Sqlite),
        #[cfg(feature = "postgres")]
        Database::Postgres(config) => outbox_store_postgres::PgAuditReader::open(&config)
            .await
            .map(AuditStore::Postgres),
    };
    opened.map_err(|e| e.with("flag", flag))
}

/// Forwards one lookup to whichever reader this is.
macro_rules! each {
    ($self:ident, $reader:ident => $call:expr) => {
        match $self {
            #[cfg(feature = "sqlite")]
            AuditStore::Sqlite($reader) => $call,
            #[cfg(feature = "postgres")]
            AuditStore::Postgres($reader) => $call,
        }
    };
}

impl AuditStore {
    pub async fn event(&self, event_id: EventId) -> Result<Option<OutboxEvent>> {
        each!(self, r => r.event(event_id).await)
    }

    pub async fn deliveries(&self, event_id: EventId) -> Result<Vec<DeliveryRecord>> {
        each!(self, r => r.deliveries(event_id).await)
    }

    pub async fn exceptions_naming(
        &self,
        account: &Account,
        sequence: u64,
        text: &str,
    ) -> Result<Vec<Exception>> {
        each!(self, r => r.exceptions_naming(account, sequence, text).await)
    }

    pub async fn fanout_messages(&self, instruction_id: &str) -> Result<Vec<StoredMessage>> {
        each!(self, r => r.fanout_messages(instruction_id).await)
    }

    pub async fn fanout_overtaken(
        &self,
        account: &Account,
        sequence: u64,
        position: u64,
    ) -> Result<Vec<(u64, u64)>> {
        each!(self, r => r.fanout_overtaken(account, sequence, position).await)
    }

    pub async fn fanout_cursors(&self) -> Result<Vec<(String, u64)>> {
        each!(self, r => r.fanout_cursors().await)
    }

    pub async fn dead_letters(&self, instruction_id: &str) -> Result<Vec<DeadLetter>> {
        each!(self, r => r.dead_letters(instruction_id).await)
    }

    pub async fn inbox_markers(&self, instruction_id: &str) -> Result<Vec<AppliedMarker>> {
        each!(self, r => r.inbox_markers(instruction_id).await)
    }

    pub async fn held(&self, instruction_id: &str) -> Result<Vec<HeldMessage>> {
        each!(self, r => r.held(instruction_id).await)
    }
}
