//! The JSON shapes the ledger answers with: `Transaction`, volumes, accounts.
//!
//! Field order follows the Go structs (docs/LEDGER.md#creating-a-transaction) so responses read like the
//! real ledger's; clients must not depend on it, but diffs against captures are easier.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::{Metadata, Posting};
use serde::{Deserialize, Serialize};

use crate::clock;

/// Volumes of one asset on one account. `input`/`output` only grow; `balance` is
/// `input - output` and may be negative (`world`, overdrafts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Volumes {
    pub(crate) input: u128,
    pub(crate) output: u128,
    pub(crate) balance: i128,
}

impl Volumes {
    pub(crate) fn credit(&mut self, amount: u64) {
        self.input += u128::from(amount);
        self.balance += i128::from(amount);
    }

    pub(crate) fn debit(&mut self, amount: u64) {
        self.output += u128::from(amount);
        self.balance -= i128::from(amount);
    }
}

/// `{account: {asset: Volumes}}`, sorted like Go's map encoding.
pub(crate) type AccountVolumes = BTreeMap<String, BTreeMap<String, Volumes>>;

/// A committed transaction, as rendered by `GET /transactions/{id}` and in events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Transaction {
    pub(crate) postings: Vec<Posting>,
    pub(crate) metadata: Metadata,
    #[serde(with = "clock::serde_time")]
    pub(crate) timestamp: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reference: Option<String>,
    pub(crate) id: u64,
    #[serde(with = "clock::serde_time")]
    pub(crate) inserted_at: DateTime<Utc>,
    #[serde(with = "clock::serde_time")]
    pub(crate) updated_at: DateTime<Utc>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "clock::serde_opt_time"
    )]
    pub(crate) reverted_at: Option<DateTime<Utc>>,
    pub(crate) post_commit_volumes: AccountVolumes,
    pub(crate) post_commit_effective_volumes: AccountVolumes,
    pub(crate) reverted: bool,
    pub(crate) pre_commit_volumes: AccountVolumes,
    pub(crate) pre_commit_effective_volumes: AccountVolumes,
}

/// The key the ledger writes on a reversing transaction, naming the reverted id.
pub(crate) const REVERTS_METADATA_KEY: &str = "com.formance.spec/state/reverts";

/// What a metadata write targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "targetType",
    content = "targetId",
    rename_all = "SCREAMING_SNAKE_CASE"
)]
pub(crate) enum Target {
    Account(String),
    Transaction(u64),
}

impl Target {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::Account(_) => "ACCOUNT",
            Self::Transaction(_) => "TRANSACTION",
        }
    }

    /// The id as events render it: always a string (`fmt.Sprint` of the tx id).
    pub(crate) fn id_string(&self) -> String {
        match self {
            Self::Account(address) => address.clone(),
            Self::Transaction(id) => id.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_beyond_u64_round_trip() {
        let mut v = Volumes::default();
        for _ in 0..3 {
            v.credit(u64::MAX);
        }
        v.debit(1);
        let json = serde_json::to_string(&v).unwrap();
        let back: Volumes = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
        assert_eq!(back.balance, 3 * i128::from(u64::MAX) - 1);
    }
}
