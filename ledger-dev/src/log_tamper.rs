//! Corrupting the log as `GET /logs` serves it, for tests of log verifiers: one
//! entry's hash, or one entry's data under its original hash (the fault plan's
//! `corruptLogHash` / `corruptLogData`). The stored log itself is never touched: the
//! hashes are rebuilt from it at every start, so a rewritten row would simply be
//! hashed again.

use outbox_core::Amount;

use crate::log::{Log, LogData};
use crate::log_hash::LogHash;

/// Which log ids `GET /logs` serves corrupted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogCorruption {
    /// Served with its hash's first byte flipped.
    pub(crate) hash: Option<u64>,
    /// Served with altered data and its original hash.
    pub(crate) data: Option<u64>,
}

impl LogCorruption {
    /// Corrupts `log` (rendered for one answer) and its `hash` when this names it.
    pub(crate) fn apply(self, log: &mut Log, hash: &mut LogHash) {
        if self.hash == Some(log.id) {
            hash[0] ^= 0xff;
        }
        if self.data == Some(log.id) {
            alter(&mut log.data);
        }
    }
}

/// One minor unit more on the first posting, or one more metadata key.
fn alter(data: &mut LogData) {
    let transaction = match data {
        LogData::NewTransaction { transaction, .. } => transaction,
        LogData::RevertedTransaction { revert, .. } => revert,
        LogData::SetMetadata { metadata, .. } => {
            metadata.insert("tampered".to_owned(), "1".to_owned());
            return;
        }
        LogData::DeleteMetadata { key, .. } => {
            key.push_str("-tampered");
            return;
        }
    };
    if let Some(posting) = transaction.postings.first_mut() {
        posting.amount = Amount::new(posting.amount.minor_units().saturating_add(1));
    }
}
