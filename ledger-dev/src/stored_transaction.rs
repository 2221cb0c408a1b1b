//! A committed transaction as the ledger keeps it in memory, and the rendering back
//! into the [`Transaction`] the API answers with.
//!
//! `model::Transaction` is the wire shape: four nested volume maps, a metadata map
//! and owned strings for every name, about ten kilobytes for a relay-shaped
//! transaction. Kept like that — and three times over, in the transaction map, in
//! its log and in its idempotency record — the dev ledger held about 25 KB per
//! transaction. The stored form holds each name once per ledger (`names`), the
//! metadata as a sorted slice (`stored_metadata`) and the volumes as a few rows
//! (`stored_volumes`), and one `Arc` of it is shared by the transaction map and the
//! log that wrote it. [`StoredTransaction::to_model`] renders exactly the
//! `Transaction` it was made from, so every answer is unchanged.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use outbox_core::{Account, Amount, Asset, Posting};

use crate::model::Transaction;
use crate::names::Names;
use crate::stored_metadata::StoredMetadata;
use crate::stored_volumes::StoredVolumes;

/// A posting with its names interned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredPosting {
    pub(crate) source: Arc<str>,
    pub(crate) destination: Arc<str>,
    pub(crate) asset: Arc<str>,
    pub(crate) amount: u64,
}

impl StoredPosting {
    fn new(posting: &Posting, names: &mut Names) -> Self {
        Self {
            source: names.intern(posting.source.as_str()),
            destination: names.intern(posting.destination.as_str()),
            asset: names.intern(posting.asset.as_str()),
            amount: posting.amount.minor_units(),
        }
    }

    /// The posting as the API renders it. The names were valid when the ledger
    /// accepted the posting (or decoded it from its file), so they parse again.
    pub(crate) fn to_model(&self) -> Posting {
        Posting {
            source: Account::parse(&self.source).expect("a stored address is valid"),
            destination: Account::parse(&self.destination).expect("a stored address is valid"),
            amount: Amount::new(self.amount),
            asset: Asset::parse(&self.asset).expect("a stored asset is valid"),
        }
    }
}

/// A transaction as it reads at one moment (at commit, in its log; now, in the
/// transaction map). Field meanings are those of [`Transaction`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredTransaction {
    pub(crate) id: u64,
    pub(crate) timestamp: DateTime<Utc>,
    pub(crate) inserted_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) reverted_at: Option<DateTime<Utc>>,
    pub(crate) reverted: bool,
    pub(crate) reference: Option<Box<str>>,
    pub(crate) postings: Box<[StoredPosting]>,
    pub(crate) metadata: StoredMetadata,
    volumes: StoredVolumes,
}

impl StoredTransaction {
    /// The stored form of `tx`, its names interned in `names`.
    pub(crate) fn new(tx: &Transaction, names: &mut Names) -> Self {
        let postings: Box<[StoredPosting]> = tx
            .postings
            .iter()
            .map(|p| StoredPosting::new(p, names))
            .collect();
        let volumes = StoredVolumes::new(
            [
                &tx.pre_commit_volumes,
                &tx.pre_commit_effective_volumes,
                &tx.post_commit_volumes,
                &tx.post_commit_effective_volumes,
            ],
            &postings,
        );
        let stored = Self {
            id: tx.id,
            timestamp: tx.timestamp,
            inserted_at: tx.inserted_at,
            updated_at: tx.updated_at,
            reverted_at: tx.reverted_at,
            reverted: tx.reverted,
            reference: tx.reference.as_deref().map(Box::from),
            postings,
            metadata: StoredMetadata::new(&tx.metadata, names),
            volumes,
        };
        // Every test runs every transaction it commits through this check.
        debug_assert_eq!(&stored.to_model(), tx, "the stored form renders back");
        stored
    }

    /// The transaction as the API renders it.
    pub(crate) fn to_model(&self) -> Transaction {
        let [pre, pre_effective, post, post_effective] = self.volumes.to_model(&self.postings);
        Transaction {
            postings: self.postings.iter().map(StoredPosting::to_model).collect(),
            metadata: self.metadata.to_model(),
            timestamp: self.timestamp,
            reference: self.reference.as_deref().map(str::to_owned),
            id: self.id,
            inserted_at: self.inserted_at,
            updated_at: self.updated_at,
            reverted_at: self.reverted_at,
            post_commit_volumes: post,
            post_commit_effective_volumes: post_effective,
            reverted: self.reverted,
            pre_commit_volumes: pre,
            pre_commit_effective_volumes: pre_effective,
        }
    }
}

#[cfg(test)]
mod tests {
    use outbox_core::Metadata;

    use super::*;
    use crate::clock;
    use crate::model::{AccountVolumes, Volumes};

    fn posting(source: &str, destination: &str, amount: u64) -> Posting {
        Posting {
            source: Account::parse(source).unwrap(),
            destination: Account::parse(destination).unwrap(),
            amount: Amount::new(amount),
            asset: Asset::parse("USD/2").unwrap(),
        }
    }

    fn one(account: &str, input: u64, output: u64) -> AccountVolumes {
        let mut v = Volumes::default();
        v.credit(input);
        v.debit(output);
        AccountVolumes::from([(account.to_owned(), [("USD/2".to_owned(), v)].into())])
    }

    #[test]
    fn renders_the_transaction_it_was_made_from() {
        let at = clock::parse("2025-01-15T10:00:00.12Z").unwrap();
        let mut pre = one("merchants:1:available", 500, 0);
        pre.extend(one("merchants:1:payouts:pending", 0, 0));
        let mut post = one("merchants:1:available", 500, 300);
        post.extend(one("merchants:1:payouts:pending", 300, 0));
        let tx = Transaction {
            postings: vec![posting(
                "merchants:1:available",
                "merchants:1:payouts:pending",
                300,
            )],
            metadata: Metadata::from([
                ("outbox_event_id".into(), "0190f2a0-7b1c".into()),
                ("outbox_sequence".into(), "2".into()),
            ]),
            timestamp: at,
            reference: Some("payout:1".into()),
            id: 7,
            inserted_at: at,
            updated_at: at,
            reverted_at: Some(at),
            post_commit_volumes: post.clone(),
            post_commit_effective_volumes: post,
            reverted: true,
            pre_commit_volumes: pre.clone(),
            pre_commit_effective_volumes: pre,
        };
        let mut names = Names::default();
        let stored = StoredTransaction::new(&tx, &mut names);
        assert_eq!(stored.to_model(), tx);
        assert_eq!(
            serde_json::to_string(&stored.to_model()).unwrap(),
            serde_json::to_string(&tx).unwrap()
        );
        // A second transaction naming the same accounts shares their names.
        let again = StoredTransaction::new(&tx, &mut names);
        assert!(Arc::ptr_eq(
            &stored.postings[0].source,
            &again.postings[0].source
        ));
    }
}
