//! The retention API of whichever store a database URL names (each arm behind its
//! store's feature).

use outbox_core::{Result, RetentionPolicy, RetentionReport, StoredRetentionPolicy};

use super::Database;

impl Database {
    /// Records `policy` as the database's retention policy, set by `set_by`.
    pub async fn save_retention_policy(
        &self,
        policy: &RetentionPolicy,
        set_by: &str,
    ) -> Result<StoredRetentionPolicy> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                outbox_store_sqlite::SqliteStore::open(config.clone())
                    .await?
                    .save_retention_policy(policy, set_by)
                    .await
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                outbox_store_postgres::PgStore::open(config.clone())
                    .await?
                    .save_retention_policy(policy, set_by)
                    .await
            }
        }
    }

    /// The retention policy in force in the database, if any.
    pub async fn load_retention_policy(&self) -> Result<Option<StoredRetentionPolicy>> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                outbox_store_sqlite::SqliteStore::open(config.clone())
                    .await?
                    .load_retention_policy()
                    .await
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                outbox_store_postgres::PgStore::open(config.clone())
                    .await?
                    .load_retention_policy()
                    .await
            }
        }
    }

    /// Applies the stored policy to every record table the database holds.
    /// `outbox_older_than` overrides `keep` for PostgreSQL outbox partitions only; a
    /// SQLite database refuses it.
    pub async fn apply_retention(
        &self,
        granted_by: &str,
        outbox_older_than: Option<std::time::Duration>,
    ) -> Result<RetentionReport> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(config) => {
                if outbox_older_than.is_some() {
                    return Err(outbox_core::Error::invalid(
                        "older_than",
                        "--older-than overrides the age of PostgreSQL outbox partitions only; a SQLite \
                         database follows its stored policy (`outbox retention set`)",
                    ));
                }
                outbox_store_sqlite::SqliteStore::open(config.clone())
                    .await?
                    .apply_retention(granted_by)
                    .await
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(config) => {
                outbox_store_postgres::PgStore::open(config.clone())
                    .await?
                    .apply_retention(&outbox_store_postgres::RetentionOptions {
                        granted_by,
                        outbox_older_than,
                    })
                    .await
            }
        }
    }
}
