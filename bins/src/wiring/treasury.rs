//! The Hop 2 stores by URL: the fan-out store of `outbox fanout` and the treasury
//! consumer database of `outbox consume`.

use std::sync::Arc;
use std::time::Duration;

use outbox_core::{FanoutStore, GapAlarm, MessageSink, Result};

use super::{Database, database};
use crate::consumer::ConsumerStats;

/// The fan-out store named by a `sqlite://` or `postgres://` URL (migrated).
pub async fn fanout_store(url: &str) -> Result<Arc<dyn FanoutStore>> {
    match database(url)? {
        #[cfg(feature = "sqlite")]
        Database::Sqlite(config) => Ok(Arc::new(
            outbox_store_sqlite::SqliteFanoutStore::open(config).await?,
        )),
        #[cfg(feature = "postgres")]
        Database::Postgres(config) => Ok(Arc::new(
            outbox_store_postgres::PgFanoutStore::open(config).await?,
        )),
    }
}

/// The reference treasury consumer on the database a URL names.
#[derive(Debug, Clone)]
pub enum Treasury {
    #[cfg(feature = "sqlite")]
    Sqlite(crate::consumer::TreasuryConsumer),
    #[cfg(feature = "postgres")]
    Postgres(crate::consumer::PgTreasuryConsumer),
}

/// Opens (and migrates) the consumer database; `name` keys its inbox.
pub async fn treasury(url: &str, name: &str, gap_alarm_after: Duration) -> Result<Treasury> {
    match database(url)? {
        #[cfg(feature = "sqlite")]
        Database::Sqlite(config) => Ok(Treasury::Sqlite(
            crate::consumer::TreasuryConsumer::open(config, name, gap_alarm_after).await?,
        )),
        #[cfg(feature = "postgres")]
        Database::Postgres(config) => Ok(Treasury::Postgres(
            crate::consumer::PgTreasuryConsumer::open(config, name, gap_alarm_after).await?,
        )),
    }
}

impl Treasury {
    pub fn sink(&self) -> Arc<dyn MessageSink> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(c) => Arc::new(c.clone()),
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => Arc::new(c.clone()),
        }
    }

    pub fn stats(&self) -> &ConsumerStats {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(c) => c.stats(),
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => c.stats(),
        }
    }

    pub async fn check_gaps(&self) -> Result<Vec<GapAlarm>> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(c) => {
                let c = c.clone();
                tokio::task::spawn_blocking(move || c.check_gaps())
                    .await
                    .map_err(|e| {
                        outbox_core::Error::new(outbox_core::ErrorKind::Internal, e.to_string())
                    })?
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => c.check_gaps().await,
        }
    }
}
