//! In-memory state of one ledger, derived from its log by [`LedgerState::apply`].
//!
//! The state is only ever changed by applying a log entry, both live (after the
//! entry is persisted) and at start (replaying the file), so a restart rebuilds
//! exactly what was answered before it.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use outbox_core::{Metadata, Posting};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::idempotency::IdempotencyRecord;
use crate::log::{ChainedLog, Log, LogData};
use crate::model::{AccountVolumes, Target, Transaction, Volumes};

/// A ledger as created by `POST /v2/{ledger}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LedgerInfo {
    pub(crate) name: String,
    #[serde(with = "clock::serde_time")]
    pub(crate) added_at: DateTime<Utc>,
    pub(crate) bucket: String,
    #[serde(default)]
    pub(crate) metadata: Metadata,
    #[serde(default)]
    pub(crate) features: BTreeMap<String, String>,
    pub(crate) id: u64,
}

/// One movement of an asset on an account, kept to compute effective volumes
/// (volumes ordered by transaction timestamp rather than by insertion) and volumes
/// at a point in time by either date (`history`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Move {
    /// The transaction's effective date.
    pub(crate) timestamp: DateTime<Utc>,
    /// When the ledger inserted the transaction.
    pub(crate) inserted_at: DateTime<Utc>,
    pub(crate) input: u64,
    pub(crate) output: u64,
}

/// One change of metadata, dated, so metadata can be read as it was at a point in
/// time (Formance keeps such revisions with `*_METADATA_HISTORY=SYNC`, the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetadataChange {
    Set(Metadata),
    Delete(String),
}

#[derive(Debug, Clone)]
pub(crate) struct AccountState {
    pub(crate) address: String,
    pub(crate) metadata: Metadata,
    pub(crate) first_usage: DateTime<Utc>,
    pub(crate) insertion_date: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) volumes: BTreeMap<String, Volumes>,
    pub(crate) moves: BTreeMap<String, Vec<Move>>,
    /// Every metadata change, oldest first, dated by its log.
    pub(crate) metadata_history: Vec<(DateTime<Utc>, MetadataChange)>,
}

impl AccountState {
    fn new(address: &str, first_usage: DateTime<Utc>, at: DateTime<Utc>) -> Self {
        Self {
            address: address.to_owned(),
            metadata: Metadata::new(),
            first_usage,
            insertion_date: at,
            updated_at: at,
            volumes: BTreeMap::new(),
            moves: BTreeMap::new(),
            metadata_history: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LedgerState {
    pub(crate) info: LedgerInfo,
    pub(crate) transactions: BTreeMap<u64, Transaction>,
    pub(crate) accounts: BTreeMap<String, AccountState>,
    pub(crate) references: HashMap<String, u64>,
    pub(crate) idempotency: HashMap<String, IdempotencyRecord>,
    pub(crate) last_log_id: u64,
    /// Every log entry, oldest first, with its hash (`GET /logs`).
    pub(crate) logs: Vec<ChainedLog>,
    /// Metadata changes of the transactions whose metadata changed after they were
    /// committed, oldest first; the first entry is the metadata they were committed
    /// with, dated by their timestamp as Formance dates it. Transactions never
    /// changed have no entry.
    pub(crate) transaction_metadata_history: HashMap<u64, Vec<(DateTime<Utc>, MetadataChange)>>,
}

impl LedgerState {
    pub(crate) fn new(info: LedgerInfo) -> Self {
        Self {
            info,
            transactions: BTreeMap::new(),
            accounts: BTreeMap::new(),
            references: HashMap::new(),
            idempotency: HashMap::new(),
            last_log_id: 0,
            logs: Vec::new(),
            transaction_metadata_history: HashMap::new(),
        }
    }

    /// The highest transaction id, so the sequence resumes after a restart.
    pub(crate) fn last_transaction_id(&self) -> Option<u64> {
        self.transactions.keys().next_back().copied()
    }

    pub(crate) fn balance(&self, account: &str, asset: &str) -> i128 {
        self.volumes(account, asset).balance
    }

    pub(crate) fn volumes(&self, account: &str, asset: &str) -> Volumes {
        self.accounts
            .get(account)
            .and_then(|a| a.volumes.get(asset))
            .copied()
            .unwrap_or_default()
    }

    /// Volumes of `account`/`asset` over the moves dated at or before `at`.
    pub(crate) fn effective_volumes(
        &self,
        account: &str,
        asset: &str,
        at: DateTime<Utc>,
    ) -> Volumes {
        let mut v = Volumes::default();
        let moves = self.accounts.get(account).and_then(|a| a.moves.get(asset));
        for m in moves.into_iter().flatten().filter(|m| m.timestamp <= at) {
            v.credit(m.input);
            v.debit(m.output);
        }
        v
    }

    /// Pre- and post-commit volumes (plain and effective) of the accounts and assets
    /// that `postings` touch, as they would be if they were committed at `timestamp`.
    pub(crate) fn commit_volumes(
        &self,
        postings: &[Posting],
        timestamp: DateTime<Utc>,
    ) -> [AccountVolumes; 4] {
        let mut pre = AccountVolumes::new();
        let mut pre_effective = AccountVolumes::new();
        for p in postings {
            for account in [&p.source, &p.destination] {
                let (account, asset) = (account.as_str(), p.asset.as_str());
                pre.entry(account.to_owned())
                    .or_default()
                    .insert(asset.to_owned(), self.volumes(account, asset));
                pre_effective.entry(account.to_owned()).or_default().insert(
                    asset.to_owned(),
                    self.effective_volumes(account, asset, timestamp),
                );
            }
        }
        let mut post = pre.clone();
        let mut post_effective = pre_effective.clone();
        for p in postings {
            let amount = p.amount.minor_units();
            for volumes in [&mut post, &mut post_effective] {
                volume_of(volumes, p.source.as_str(), p.asset.as_str()).debit(amount);
                volume_of(volumes, p.destination.as_str(), p.asset.as_str()).credit(amount);
            }
        }
        [pre, pre_effective, post, post_effective]
    }

    /// Applies one log entry. The entry was checked when it was planned; applying
    /// it cannot fail.
    pub(crate) fn apply(&mut self, log: &Log) {
        self.last_log_id = self.last_log_id.max(log.id);
        let chained = ChainedLog::after(self.logs.last(), log.clone());
        self.logs.push(chained);
        if let (Some(key), Some(hash)) = (&log.idempotency_key, &log.idempotency_hash) {
            self.idempotency.insert(
                key.clone(),
                IdempotencyRecord {
                    hash: hash.clone(),
                    log_id: log.id,
                    data: log.data.clone(),
                },
            );
        }
        match &log.data {
            LogData::NewTransaction {
                transaction,
                account_metadata,
            } => {
                self.insert_transaction((**transaction).clone(), log.date);
                for (address, metadata) in account_metadata {
                    self.save_account_metadata(address, metadata, log.date);
                }
            }
            LogData::RevertedTransaction { reverted, revert } => {
                if let Some(original) = self.transactions.get_mut(&reverted.id) {
                    original.reverted = true;
                    original.reverted_at = reverted.reverted_at;
                    original.updated_at = reverted.updated_at;
                }
                self.insert_transaction((**revert).clone(), log.date);
            }
            LogData::SetMetadata { target, metadata } => match target {
                Target::Account(address) => self.save_account_metadata(address, metadata, log.date),
                Target::Transaction(id) => {
                    self.record_transaction_metadata(
                        *id,
                        log.date,
                        MetadataChange::Set(metadata.clone()),
                    );
                    if let Some(tx) = self.transactions.get_mut(id) {
                        tx.metadata.extend(metadata.clone());
                        tx.updated_at = log.date;
                    }
                }
            },
            LogData::DeleteMetadata { target, key } => match target {
                Target::Account(address) => {
                    if let Some(account) = self.accounts.get_mut(address) {
                        account.metadata.remove(key);
                        account.updated_at = log.date;
                        account
                            .metadata_history
                            .push((log.date, MetadataChange::Delete(key.clone())));
                    }
                }
                Target::Transaction(id) => {
                    self.record_transaction_metadata(
                        *id,
                        log.date,
                        MetadataChange::Delete(key.clone()),
                    );
                    if let Some(tx) = self.transactions.get_mut(id) {
                        tx.metadata.remove(key);
                        tx.updated_at = log.date;
                    }
                }
            },
        }
    }

    /// Records a metadata change of transaction `id`, starting its history with the
    /// metadata it was committed with on its first change.
    fn record_transaction_metadata(&mut self, id: u64, at: DateTime<Utc>, change: MetadataChange) {
        let Some(tx) = self.transactions.get(&id) else {
            return;
        };
        self.transaction_metadata_history
            .entry(id)
            .or_insert_with(|| vec![(tx.timestamp, MetadataChange::Set(tx.metadata.clone()))])
            .push((at, change));
    }

    fn insert_transaction(&mut self, tx: Transaction, at: DateTime<Utc>) {
        for p in &tx.postings {
            let amount = p.amount.minor_units();
            let asset = p.asset.as_str();
            let source = self.touch_account(p.source.as_str(), tx.timestamp, at);
            source
                .volumes
                .entry(asset.to_owned())
                .or_default()
                .debit(amount);
            source
                .moves
                .entry(asset.to_owned())
                .or_default()
                .push(Move {
                    timestamp: tx.timestamp,
                    inserted_at: tx.inserted_at,
                    input: 0,
                    output: amount,
                });
            let destination = self.touch_account(p.destination.as_str(), tx.timestamp, at);
            destination
                .volumes
                .entry(asset.to_owned())
                .or_default()
                .credit(amount);
            destination
                .moves
                .entry(asset.to_owned())
                .or_default()
                .push(Move {
                    timestamp: tx.timestamp,
                    inserted_at: tx.inserted_at,
                    input: amount,
                    output: 0,
                });
        }
        if let Some(reference) = &tx.reference {
            self.references.insert(reference.clone(), tx.id);
        }
        self.transactions.insert(tx.id, tx);
    }

    /// The account, created on first use; `first_usage` is the earliest
    /// transaction timestamp that touched it.
    fn touch_account(
        &mut self,
        address: &str,
        timestamp: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> &mut AccountState {
        let account = self
            .accounts
            .entry(address.to_owned())
            .or_insert_with(|| AccountState::new(address, timestamp, at));
        account.first_usage = account.first_usage.min(timestamp);
        account.updated_at = at;
        account
    }

    fn save_account_metadata(&mut self, address: &str, metadata: &Metadata, at: DateTime<Utc>) {
        let account = self
            .accounts
            .entry(address.to_owned())
            .or_insert_with(|| AccountState::new(address, at, at));
        account.metadata.extend(metadata.clone());
        account.updated_at = at;
        account
            .metadata_history
            .push((at, MetadataChange::Set(metadata.clone())));
    }
}

fn volume_of<'a>(volumes: &'a mut AccountVolumes, account: &str, asset: &str) -> &'a mut Volumes {
    volumes
        .entry(account.to_owned())
        .or_default()
        .entry(asset.to_owned())
        .or_default()
}
