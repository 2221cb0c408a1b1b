//! `MemoryLedger`: the books behind a lock, faults on the next write, and the
//! `Ledger` trait over them.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use outbox_core::dispatch::notice::rejection_marker_key;
use outbox_core::{
    Account, Balances, BulkItem, Error, ErrorKind, EventId, Ledger, LedgerCapabilities,
    LedgerTransaction, Metadata, PostOutcome, Result, RunOutcome,
};

use crate::books::Books;
use crate::fault::Fault;

/// Most elements one bulk call or run takes.
pub const MAX_BULK: usize = 100;

/// A small ledger in memory, with bulk, ordered runs, revert, lookups and balances.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    books: Mutex<Books>,
    faults: Mutex<VecDeque<Fault>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next write call meet `fault` (faults queue up, one per call).
    pub fn inject(&self, fault: Fault) {
        self.faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push_back(fault);
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // A panic elsewhere while holding the lock leaves whole books: every write
        // changes them only after its checks passed.
        self.books
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one write call: a refusal fault answers before it runs, a lost answer
    /// after it committed.
    fn write<T>(&self, run: impl FnOnce(&mut Books) -> Result<T>) -> Result<T> {
        let fault = self
            .faults
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop_front();
        match fault {
            Some(fault @ (Fault::Unavailable { .. } | Fault::Throttled { .. })) => {
                Err(fault.error())
            }
            Some(fault @ Fault::AnswerLostAfterCommit) => {
                run(&mut self.books())?;
                Err(fault.error())
            }
            None => run(&mut self.books()),
        }
    }
}

fn check_size(items: &[BulkItem<'_>]) -> Result<()> {
    if items.len() > MAX_BULK {
        return Err(Error::new(
            ErrorKind::Ledger,
            format!(
                "{} elements exceed the bulk limit of {MAX_BULK}",
                items.len()
            ),
        ));
    }
    Ok(())
}

#[async_trait]
impl Ledger for MemoryLedger {
    fn capabilities(&self) -> LedgerCapabilities {
        LedgerCapabilities::new(MAX_BULK).with_ordered_runs()
    }

    async fn post(&self, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        self.write(|books| books.create(key, body))
    }

    /// Each element on its own: one's refusal or error leaves the others alone.
    async fn post_bulk(&self, items: &[BulkItem<'_>]) -> Result<Vec<Result<PostOutcome>>> {
        check_size(items)?;
        self.write(|books| {
            Ok(items
                .iter()
                .map(|item| books.create(item.key, item.body))
                .collect())
        })
    }

    /// In order on a copy of the books, kept only when every element committed.
    async fn post_run(&self, items: &[BulkItem<'_>]) -> Result<RunOutcome> {
        check_size(items)?;
        self.write(|books| {
            let mut run = books.clone();
            let mut ids = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let reason = match run.create(item.key, item.body) {
                    Ok(
                        PostOutcome::Accepted { transaction_id }
                        | PostOutcome::Replayed { transaction_id },
                    ) => {
                        ids.push(transaction_id);
                        continue;
                    }
                    Ok(PostOutcome::Rejected { code, message }) => format!("{code}: {message}"),
                    Err(e) => e.to_string(),
                };
                return Ok(RunOutcome::RolledBack { index, reason });
            }
            *books = run;
            Ok(RunOutcome::Committed(ids))
        })
    }

    async fn revert(
        &self,
        key: EventId,
        transaction_id: u64,
        metadata: &Metadata,
    ) -> Result<PostOutcome> {
        self.write(|books| books.revert(key, transaction_id, metadata))
    }

    async fn transaction_by_event_id(
        &self,
        event_id: EventId,
    ) -> Result<Option<LedgerTransaction>> {
        self.books().by_event_id(event_id)
    }

    async fn save_account_metadata(
        &self,
        key: &str,
        account: &Account,
        metadata: &Metadata,
    ) -> Result<()> {
        self.write(|books| books.save_account_metadata(key, account, metadata))
    }

    async fn rejection_notice(
        &self,
        account: &Account,
        event_id: EventId,
    ) -> Result<Option<String>> {
        Ok(self
            .books()
            .account_metadata(account, &rejection_marker_key(event_id)))
    }

    async fn aggregate_balances(&self, address: &str) -> Result<Balances> {
        Ok(self.books().aggregate(address))
    }

    async fn transactions_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<LedgerTransaction>> {
        Ok(self.books().after(after, limit))
    }
}
