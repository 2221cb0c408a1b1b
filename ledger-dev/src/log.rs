//! The append-only log: every write of a ledger is one [`Log`], persisted before it
//! is applied, and replayed in order at start to rebuild the state. This is the
//! form written to the file and rendered by the API; the ledger keeps its entries
//! in memory in the compact form of `stored_log`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::Metadata;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::model::{Target, Transaction};

/// One entry of a ledger's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Log {
    /// Per-ledger sequence, from 1 (the bulk response's `logID`).
    pub(crate) id: u64,
    #[serde(with = "clock::serde_time")]
    pub(crate) date: DateTime<Utc>,
    /// The `Idempotency-Key` (or bulk `ik`) the write carried.
    pub(crate) idempotency_key: Option<String>,
    /// Hash of the normalised command stored with the key (see `idempotency`).
    pub(crate) idempotency_hash: Option<String>,
    pub(crate) data: LogData,
}

/// What a log entry records. Snapshots are kept as they were at commit time: an
/// idempotent replay answers with them, not with the current state (docs/LEDGER.md#idempotency-keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum LogData {
    NewTransaction {
        transaction: Box<Transaction>,
        #[serde(rename = "accountMetadata", default)]
        account_metadata: BTreeMap<String, Metadata>,
    },
    RevertedTransaction {
        /// The original, as marked reverted by this log.
        #[serde(rename = "revertedTransaction")]
        reverted: Box<Transaction>,
        /// The new reversing transaction.
        #[serde(rename = "revertTransaction")]
        revert: Box<Transaction>,
    },
    SetMetadata {
        target: Target,
        metadata: Metadata,
    },
    DeleteMetadata {
        target: Target,
        key: String,
    },
}

impl LogData {
    /// The log type name stored in its own column, for people reading the file.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::NewTransaction { .. } => "NEW_TRANSACTION",
            Self::RevertedTransaction { .. } => "REVERTED_TRANSACTION",
            Self::SetMetadata { .. } => "SET_METADATA",
            Self::DeleteMetadata { .. } => "DELETE_METADATA",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_log_round_trips() {
        let log = Log {
            id: 3,
            date: clock::now(),
            idempotency_key: Some("k".into()),
            idempotency_hash: Some("h".into()),
            data: LogData::SetMetadata {
                target: Target::Transaction(7),
                metadata: Metadata::from([("a".into(), "b".into())]),
            },
        };
        let json = serde_json::to_string(&log).unwrap();
        assert!(
            json.contains(r#""target":{"targetType":"TRANSACTION","targetId":7}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Log>(&json).unwrap(), log);
    }
}
