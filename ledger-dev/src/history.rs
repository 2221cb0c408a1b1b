//! The ledger as it was at a point in time (`pit`): volumes by effective date or by
//! insertion date, metadata from its dated changes, transactions as they read then.
//!
//! Formance answers these from its moves and metadata-history tables
//! (docs/LEDGER.md#balances-and-address-patterns): a move counts at `pit` when its
//! transaction's timestamp (effective date) or its insertion date is at or before
//! it, and metadata is the last revision dated at or before it. A transaction posted
//! today with a timestamp in the past is in a past answer by effective date and not
//! by insertion date; asking both shows the backdating.

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::Metadata;

use crate::model::Volumes;
use crate::names::Names;
use crate::state::{AccountState, LedgerState, MetadataChange, Move};
use crate::stored_metadata::StoredMetadata;
use crate::stored_transaction::StoredTransaction;

/// Which date places a move before or after a point in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MoveDate {
    /// The transaction's `timestamp`, which a poster may set in the past.
    Effective,
    /// When the ledger inserted the transaction (`insertedAt`).
    Insertion,
}

impl MoveDate {
    fn of(self, m: &Move) -> DateTime<Utc> {
        match self {
            Self::Effective => m.timestamp,
            Self::Insertion => m.inserted_at,
        }
    }
}

/// Volumes per asset of `account` over its moves dated at or before `at` by `date`.
/// An asset with no such move is absent (Formance reads them from its moves).
pub(crate) fn volumes_at(
    account: &AccountState,
    at: DateTime<Utc>,
    date: MoveDate,
) -> BTreeMap<String, Volumes> {
    let mut out = BTreeMap::new();
    for (asset, moves) in &account.moves {
        let mut dated = moves.iter().filter(|m| date.of(m) <= at).peekable();
        if dated.peek().is_none() {
            continue;
        }
        let mut v = Volumes::default();
        for m in dated {
            v.credit(m.input);
            v.debit(m.output);
        }
        out.insert(asset.clone(), v);
    }
    out
}

/// The account's metadata as it was at `at`: its changes dated at or before it.
pub(crate) fn account_metadata_at(account: &AccountState, at: DateTime<Utc>) -> Metadata {
    fold(&account.metadata_history, at, Metadata::new())
}

/// Transaction `tx` as listed at `at`, or `None` when its timestamp is after `at`:
/// the metadata it had then, and not reverted if the revert came later.
pub(crate) fn transaction_at<'a>(
    state: &LedgerState,
    tx: &'a StoredTransaction,
    at: Option<DateTime<Utc>>,
) -> Option<Cow<'a, StoredTransaction>> {
    let Some(at) = at else {
        return Some(Cow::Borrowed(tx));
    };
    if tx.timestamp > at {
        return None;
    }
    let history = state.transaction_metadata_history.get(&tx.id);
    let reverted_later = tx.reverted_at.is_some_and(|r| r > at);
    if history.is_none() && !reverted_later {
        return Some(Cow::Borrowed(tx));
    }
    let mut view = tx.clone();
    if let Some(history) = history {
        // A view for one answer: its names need not be the ledger's shared ones.
        let metadata = fold(history, at, Metadata::new());
        view.metadata = StoredMetadata::new(&metadata, &mut Names::default());
    }
    if reverted_later {
        view.reverted = false;
        view.reverted_at = None;
    }
    Some(Cow::Owned(view))
}

/// Applies the changes dated at or before `at`, oldest first, to `metadata`.
fn fold(
    history: &[(DateTime<Utc>, MetadataChange)],
    at: DateTime<Utc>,
    mut metadata: Metadata,
) -> Metadata {
    for (_, change) in history.iter().filter(|(date, _)| *date <= at) {
        match change {
            MetadataChange::Set(values) => metadata.extend(values.clone()),
            MetadataChange::Delete(key) => {
                metadata.remove(key);
            }
        }
    }
    metadata
}
