//! In-memory state of one ledger, derived from its log by [`LedgerState::apply`].
//!
//! The state is only ever changed by applying a log entry, both live (after the
//! entry is persisted) and at start (replaying the file), so a restart rebuilds
//! exactly what was answered before it.
//!
//! Each transaction is held once, in its stored form (`stored_transaction`): the
//! transaction map and the log entry that wrote it share one `Arc`, and a key's
//! index entry names that log. A change to the transaction (a revert, metadata)
//! replaces the map's `Arc` with a changed copy, so the log keeps its snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use outbox_core::{Metadata, Posting};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::idempotency::StoredHash;
use crate::log::{Log, LogData};
use crate::log_hash;
use crate::model::{AccountVolumes, Target, Transaction, Volumes};
use crate::names::Names;
use crate::stored_log::{ChainedLog, StoredLogData};
use crate::stored_metadata::StoredMetadata;
use crate::stored_transaction::StoredTransaction;

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
    /// The latest effective date among each asset's moves: volumes at or after it
    /// are the plain volumes, without summing the moves (`effective_volumes`).
    pub(crate) latest_move: BTreeMap<String, DateTime<Utc>>,
    /// Every metadata change, oldest first, dated by its log.
    pub(crate) metadata_history: Vec<(DateTime<Utc>, MetadataChange)>,
}

impl AccountState {
    /// Adds one move of `asset`: its volumes, its dated record, the latest date.
    fn record_move(&mut self, asset: &str, m: Move) {
        let volumes = self.volumes.entry(asset.to_owned()).or_default();
        volumes.credit(m.input);
        volumes.debit(m.output);
        let latest = self
            .latest_move
            .entry(asset.to_owned())
            .or_insert(m.timestamp);
        *latest = (*latest).max(m.timestamp);
        self.moves.entry(asset.to_owned()).or_default().push(m);
    }

    fn new(address: &str, first_usage: DateTime<Utc>, at: DateTime<Utc>) -> Self {
        Self {
            address: address.to_owned(),
            metadata: Metadata::new(),
            first_usage,
            insertion_date: at,
            updated_at: at,
            volumes: BTreeMap::new(),
            moves: BTreeMap::new(),
            latest_move: BTreeMap::new(),
            metadata_history: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LedgerState {
    pub(crate) info: LedgerInfo,
    /// Every transaction as it reads now.
    pub(crate) transactions: BTreeMap<u64, Arc<StoredTransaction>>,
    pub(crate) accounts: BTreeMap<String, AccountState>,
    pub(crate) references: HashMap<String, u64>,
    /// Each stored idempotency key to the id of the log it wrote; that log holds
    /// the key's hash and the answer a replay gives ([`Self::keyed_log`]).
    idempotency: HashMap<Arc<str>, u64>,
    pub(crate) last_log_id: u64,
    /// Every log entry, oldest first, with its hash (`GET /logs`).
    pub(crate) logs: Vec<ChainedLog>,
    /// Metadata changes of the transactions whose metadata changed after they were
    /// committed, oldest first; the first entry is the metadata they were committed
    /// with, dated by their timestamp as Formance dates it. Transactions never
    /// changed have no entry.
    pub(crate) transaction_metadata_history: HashMap<u64, Vec<(DateTime<Utc>, MetadataChange)>>,
    /// Addresses, assets, metadata and idempotency keys shared by the stored
    /// transactions and logs.
    names: Names,
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
            names: Names::default(),
        }
    }

    /// The log with id `id`.
    pub(crate) fn log(&self, id: u64) -> Option<&ChainedLog> {
        let at = self.logs.partition_point(|entry| entry.id < id);
        self.logs.get(at).filter(|entry| entry.id == id)
    }

    /// The log an idempotency key was stored with.
    pub(crate) fn keyed_log(&self, key: &str) -> Option<&ChainedLog> {
        self.idempotency.get(key).and_then(|id| self.log(*id))
    }

    /// Forgets `key` if log `log_id` stored it (undoing that log: `undo`).
    pub(crate) fn forget_key(&mut self, key: &str, log_id: u64) {
        if self.idempotency.get(key) == Some(&log_id) {
            self.idempotency.remove(key);
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
    ///
    /// When no move is dated after `at` (nothing was back-dated past it, the common
    /// case of a new transaction) these are the plain volumes: summing every move
    /// of `world` for each write made posting slower with every transaction.
    pub(crate) fn effective_volumes(
        &self,
        account: &str,
        asset: &str,
        at: DateTime<Utc>,
    ) -> Volumes {
        let Some(state) = self.accounts.get(account) else {
            return Volumes::default();
        };
        if state
            .latest_move
            .get(asset)
            .is_none_or(|latest| *latest <= at)
        {
            return state.volumes.get(asset).copied().unwrap_or_default();
        }
        let mut v = Volumes::default();
        for m in state
            .moves
            .get(asset)
            .into_iter()
            .flatten()
            .filter(|m| m.timestamp <= at)
        {
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
        let hash = log_hash::chain(self.logs.last().map(|entry| &entry.hash), log);
        let data = match &log.data {
            LogData::NewTransaction {
                transaction,
                account_metadata,
            } => {
                let transaction = self.insert_transaction(transaction, log.date);
                for (address, metadata) in account_metadata {
                    self.save_account_metadata(address, metadata, log.date);
                }
                StoredLogData::NewTransaction {
                    transaction,
                    account_metadata: (!account_metadata.is_empty())
                        .then(|| Box::new(account_metadata.clone())),
                }
            }
            LogData::RevertedTransaction { reverted, revert } => {
                let reverted = Arc::new(StoredTransaction::new(reverted, &mut self.names));
                self.mark_reverted(&reverted);
                let revert = self.insert_transaction(revert, log.date);
                StoredLogData::RevertedTransaction { reverted, revert }
            }
            LogData::SetMetadata { target, metadata } => {
                match target {
                    Target::Account(address) => {
                        self.save_account_metadata(address, metadata, log.date);
                    }
                    Target::Transaction(id) => {
                        self.record_transaction_metadata(
                            *id,
                            log.date,
                            MetadataChange::Set(metadata.clone()),
                        );
                        self.change_transaction_metadata(*id, log.date, |current| {
                            current.extend(metadata.clone());
                        });
                    }
                }
                StoredLogData::Metadata(Box::new(log.data.clone()))
            }
            LogData::DeleteMetadata { target, key } => {
                match target {
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
                        self.change_transaction_metadata(*id, log.date, |current| {
                            current.remove(key);
                        });
                    }
                }
                StoredLogData::Metadata(Box::new(log.data.clone()))
            }
        };
        // Interned: the relay's key is its event id, already interned as the
        // transaction's `outbox_event_id`; the log entry and the key index share it.
        let key = log
            .idempotency_key
            .as_deref()
            .map(|key| self.names.intern(key));
        if let (Some(key), Some(_)) = (&key, &log.idempotency_hash) {
            self.idempotency.insert(Arc::clone(key), log.id);
        }
        self.logs.push(ChainedLog {
            id: log.id,
            date: log.date,
            idempotency_key: key,
            idempotency_hash: log.idempotency_hash.as_deref().map(StoredHash::new),
            data,
            hash,
        });
    }

    /// Marks the transaction that `snapshot` (a revert log's copy) reverts as
    /// reverted in the map. The transaction then reads as the snapshot does, so
    /// the two share it unless something differs.
    fn mark_reverted(&mut self, snapshot: &Arc<StoredTransaction>) {
        let Some(current) = self.transactions.get_mut(&snapshot.id) else {
            return;
        };
        let mut marked = StoredTransaction::clone(current);
        marked.reverted = true;
        marked.reverted_at = snapshot.reverted_at;
        marked.updated_at = snapshot.updated_at;
        *current = if marked == **snapshot {
            Arc::clone(snapshot)
        } else {
            Arc::new(marked)
        };
    }

    /// Changes transaction `id`'s metadata with `change`, on a copy when its log
    /// (or a later snapshot) shares it: the log keeps the metadata of its time.
    fn change_transaction_metadata(
        &mut self,
        id: u64,
        at: DateTime<Utc>,
        change: impl FnOnce(&mut Metadata),
    ) {
        let Some(tx) = self.transactions.get_mut(&id) else {
            return;
        };
        let tx = Arc::make_mut(tx);
        let mut metadata = tx.metadata.to_model();
        change(&mut metadata);
        tx.metadata = StoredMetadata::new(&metadata, &mut self.names);
        tx.updated_at = at;
    }

    /// Records a metadata change of transaction `id`, starting its history with the
    /// metadata it was committed with on its first change.
    fn record_transaction_metadata(&mut self, id: u64, at: DateTime<Utc>, change: MetadataChange) {
        let Some(tx) = self.transactions.get(&id) else {
            return;
        };
        self.transaction_metadata_history
            .entry(id)
            .or_insert_with(|| vec![(tx.timestamp, MetadataChange::Set(tx.metadata.to_model()))])
            .push((at, change));
    }

    /// Adds `tx` to the map and its moves to its accounts; returns the stored form
    /// the map holds, for its log to share.
    fn insert_transaction(
        &mut self,
        tx: &Transaction,
        at: DateTime<Utc>,
    ) -> Arc<StoredTransaction> {
        for p in &tx.postings {
            let amount = p.amount.minor_units();
            let asset = p.asset.as_str();
            let (timestamp, inserted_at) = (tx.timestamp, tx.inserted_at);
            self.touch_account(p.source.as_str(), timestamp, at)
                .record_move(
                    asset,
                    Move {
                        timestamp,
                        inserted_at,
                        input: 0,
                        output: amount,
                    },
                );
            self.touch_account(p.destination.as_str(), timestamp, at)
                .record_move(
                    asset,
                    Move {
                        timestamp,
                        inserted_at,
                        input: amount,
                        output: 0,
                    },
                );
        }
        if let Some(reference) = &tx.reference {
            self.references.insert(reference.clone(), tx.id);
        }
        let stored = Arc::new(StoredTransaction::new(tx, &mut self.names));
        self.transactions.insert(tx.id, Arc::clone(&stored));
        stored
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
