//! Undoing an atomic bulk's creates without copying the ledger.
//!
//! An atomic `_bulk` runs its elements one after another, each seeing the ones
//! before it, and keeps all or none. Running them on a copy of the state cost a
//! copy of every transaction per call, which made the relay's ordered runs (a hot
//! account's events as one atomic call) slower with every transaction the ledger
//! holds. A bulk of creates instead applies to the live state and, when an element
//! fails, undoes what it applied: each create only appends (a transaction, its log,
//! its key, its reference, moves) and changes the accounts it touches, whose
//! changes the checkpoint keeps.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::Metadata;

use crate::log::{Log, LogData};
use crate::model::Volumes;
use crate::state::{AccountState, LedgerState};

/// How the state stood before an atomic bulk's first create.
#[derive(Debug, Default)]
pub(crate) struct Checkpoint {
    last_log_id: u64,
    logs: usize,
    /// Each account a create touched, as it was before the first one did: `None`
    /// for an account the bulk created.
    accounts: BTreeMap<String, Option<AccountMark>>,
    /// The creates applied since, in order.
    applied: Vec<Log>,
}

/// What a create can change on an existing account.
#[derive(Debug)]
struct AccountMark {
    first_usage: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    volumes: BTreeMap<String, Volumes>,
    moves: BTreeMap<String, usize>,
    latest_move: BTreeMap<String, DateTime<Utc>>,
    metadata: Metadata,
    metadata_history: usize,
}

impl AccountMark {
    fn of(account: &AccountState) -> Self {
        Self {
            first_usage: account.first_usage,
            updated_at: account.updated_at,
            volumes: account.volumes.clone(),
            moves: account
                .moves
                .iter()
                .map(|(asset, m)| (asset.clone(), m.len()))
                .collect(),
            latest_move: account.latest_move.clone(),
            metadata: account.metadata.clone(),
            metadata_history: account.metadata_history.len(),
        }
    }

    fn restore(self, account: &mut AccountState) {
        account.first_usage = self.first_usage;
        account.updated_at = self.updated_at;
        account.volumes = self.volumes;
        account
            .moves
            .retain(|asset, _| self.moves.contains_key(asset));
        for (asset, moves) in &mut account.moves {
            moves.truncate(self.moves[asset]);
        }
        account.latest_move = self.latest_move;
        account.metadata = self.metadata;
        account.metadata_history.truncate(self.metadata_history);
    }
}

impl LedgerState {
    pub(crate) fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            last_log_id: self.last_log_id,
            logs: self.logs.len(),
            ..Checkpoint::default()
        }
    }

    /// Applies `log`, a create, keeping in `checkpoint` what undoing it needs.
    pub(crate) fn apply_undoable(&mut self, log: &Log, checkpoint: &mut Checkpoint) {
        if let LogData::NewTransaction {
            transaction,
            account_metadata,
        } = &log.data
        {
            let touched = transaction
                .postings
                .iter()
                .flat_map(|p| [p.source.as_str(), p.destination.as_str()])
                .chain(account_metadata.keys().map(String::as_str));
            for address in touched {
                if !checkpoint.accounts.contains_key(address) {
                    let mark = self.accounts.get(address).map(AccountMark::of);
                    checkpoint.accounts.insert(address.to_owned(), mark);
                }
            }
        }
        self.apply(log);
        checkpoint.applied.push(log.clone());
    }

    /// Puts the state back as it was at `checkpoint`.
    pub(crate) fn undo(&mut self, checkpoint: Checkpoint) {
        for log in checkpoint.applied.iter().rev() {
            if let Some(key) = &log.idempotency_key {
                self.forget_key(key, log.id);
            }
            if let LogData::NewTransaction { transaction, .. } = &log.data {
                self.transactions.remove(&transaction.id);
                if let Some(reference) = &transaction.reference
                    && self.references.get(reference) == Some(&transaction.id)
                {
                    self.references.remove(reference);
                }
            }
        }
        for (address, mark) in checkpoint.accounts {
            match mark {
                None => {
                    self.accounts.remove(&address);
                }
                Some(mark) => {
                    if let Some(account) = self.accounts.get_mut(&address) {
                        mark.restore(account);
                    }
                }
            }
        }
        self.logs.truncate(checkpoint.logs);
        self.last_log_id = checkpoint.last_log_id;
    }
}
