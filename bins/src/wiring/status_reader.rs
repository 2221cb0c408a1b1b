//! The read-only [`StatusReader`] of a database URL: the SQLite or PostgreSQL audit
//! reader, which never creates or migrates anything.

use std::sync::Arc;

use outbox_core::Result;
use outbox_core::status::StatusReader;

use super::{AuditStore, audit_store};

/// Opens the database `url` names for `outbox status` or the admin sampler; `flag`
/// is named in every error.
///
/// # Errors
/// As [`audit_store`].
pub async fn status_reader(flag: &str, url: &str) -> Result<Arc<dyn StatusReader>> {
    Ok(match audit_store(flag, url).await? {
        #[cfg(feature = "sqlite")]
        AuditStore::Sqlite(reader) => Arc::new(reader),
        #[cfg(feature = "postgres")]
        AuditStore::Postgres(reader) => Arc::new(reader),
    })
}
