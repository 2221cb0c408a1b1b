//! The log as the ledger keeps it in memory: each entry with its place in the hash
//! chain, its transactions shared with the transaction map.
//!
//! A `NEW_TRANSACTION` entry holds the same `Arc` as the transaction map until that
//! transaction changes (reverted, metadata added or removed); the map then gets a
//! changed copy and the entry keeps the snapshot of commit time, which replays and
//! `GET /logs` answer (docs/LEDGER.md#idempotency-keys). [`ChainedLog::to_log`]
//! renders the entry back into the [`Log`] it was applied from.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use outbox_core::Metadata;

use crate::idempotency::StoredHash;
use crate::log::{Log, LogData};
use crate::log_hash::LogHash;
use crate::stored_transaction::StoredTransaction;

/// A log entry as `GET /logs` serves it: with its place in the hash chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainedLog {
    pub(crate) id: u64,
    pub(crate) date: DateTime<Utc>,
    /// Shared with the ledger's key index.
    pub(crate) idempotency_key: Option<Arc<str>>,
    pub(crate) idempotency_hash: Option<StoredHash>,
    pub(crate) data: StoredLogData,
    pub(crate) hash: LogHash,
}

/// What an entry records ([`LogData`], its transactions in their stored form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredLogData {
    NewTransaction {
        transaction: Arc<StoredTransaction>,
        /// `None` when empty (as the relay's are). Boxed so that every entry is
        /// one pointer smaller than with the map inline, at the cost of one more
        /// allocation for the few that have some.
        #[allow(clippy::box_collection)]
        account_metadata: Option<Box<BTreeMap<String, Metadata>>>,
    },
    RevertedTransaction {
        /// The original, as marked reverted by this log.
        reverted: Arc<StoredTransaction>,
        /// The new reversing transaction.
        revert: Arc<StoredTransaction>,
    },
    /// `SET_METADATA` and `DELETE_METADATA`, kept as written: they hold no
    /// transaction, and the relay writes few of them.
    Metadata(Box<LogData>),
}

impl StoredLogData {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::NewTransaction { .. } => "NEW_TRANSACTION",
            Self::RevertedTransaction { .. } => "REVERTED_TRANSACTION",
            Self::Metadata(data) => data.type_name(),
        }
    }

    /// The data as it was applied.
    pub(crate) fn to_model(&self) -> LogData {
        match self {
            Self::NewTransaction {
                transaction,
                account_metadata,
            } => LogData::NewTransaction {
                transaction: Box::new(transaction.to_model()),
                account_metadata: account_metadata.as_deref().cloned().unwrap_or_default(),
            },
            Self::RevertedTransaction { reverted, revert } => LogData::RevertedTransaction {
                reverted: Box::new(reverted.to_model()),
                revert: Box::new(revert.to_model()),
            },
            Self::Metadata(data) => (**data).clone(),
        }
    }
}

impl ChainedLog {
    /// The entry as it was applied.
    pub(crate) fn to_log(&self) -> Log {
        Log {
            id: self.id,
            date: self.date,
            idempotency_key: self.idempotency_key.as_deref().map(str::to_owned),
            idempotency_hash: self.idempotency_hash.as_ref().map(StoredHash::text),
            data: self.data.to_model(),
        }
    }
}
