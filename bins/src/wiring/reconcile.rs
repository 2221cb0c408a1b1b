//! What `outbox reconcile` opens: a database that is at once a store (the exception
//! queue) and the reader each check needs, and the Formance client.

use std::sync::Arc;

use outbox_core::reconcile::balances::PostedHistory;
use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_core::reconcile::sequences::InboxSequences;
use outbox_core::{Result, Store};
use outbox_ledger_formance::FormanceLedger;

use super::{Database, database};
use crate::cli::LedgerArgs;

/// Every store adapter that the reconciliation checks run on.
pub trait ReconcileDatabase: Store + InboxSequences + CompletenessStore + PostedHistory {}

impl<T: Store + InboxSequences + CompletenessStore + PostedHistory> ReconcileDatabase for T {}

/// Opens (and migrates: the checks keep a checkpoint and their findings) the database
/// `url` names; `flag` is named in every error.
pub async fn reconcile_database(flag: &str, url: &str) -> Result<Arc<dyn ReconcileDatabase>> {
    let opened: Result<Arc<dyn ReconcileDatabase>> =
        match database(url).map_err(|e| e.with("flag", flag))? {
            #[cfg(feature = "sqlite")]
            Database::Sqlite(config) => outbox_store_sqlite::SqliteStore::open(config)
                .await
                .map(|s| Arc::new(s) as Arc<dyn ReconcileDatabase>),
            #[cfg(feature = "postgres")]
            Database::Postgres(config) => outbox_store_postgres::PgStore::open(config)
                .await
                .map(|s| Arc::new(s) as Arc<dyn ReconcileDatabase>),
        };
    opened.map_err(|e| e.with("flag", flag))
}

/// The Formance client the ledger flags describe (bearer token if given).
pub fn formance_client(args: &LedgerArgs) -> Result<FormanceLedger> {
    FormanceLedger::new(&crate::config::ledger_with(args).formance_config()?)
}
