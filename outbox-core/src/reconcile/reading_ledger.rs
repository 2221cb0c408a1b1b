//! A ledger fake for the reconciliation checks' unit tests: it only reads (lists
//! transactions, finds one by event id, answers balances at a point in time) and
//! refuses every write.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{
    Account, EventId, LedgerCommand, Metadata, OUTBOX_EVENT_ID_KEY, OutboxEvent, PostBody, Posting,
};
use crate::error::{Error, ErrorKind, Result};
use crate::ledger::{
    BalanceDate, Balances, Ledger, LedgerCapabilities, LedgerTransaction, PostOutcome,
};

#[derive(Default)]
pub(crate) struct ReadingLedger {
    pub txs: Mutex<Vec<LedgerTransaction>>,
    /// Calls of `transaction_by_event_id`.
    pub lookups: Mutex<u32>,
    /// What `aggregate_balances_at` answers per (address, date); empty otherwise.
    pub balances: HashMap<(String, BalanceDate), Balances>,
    /// Whether it answers by insertion date (`Unsupported` otherwise).
    pub by_insertion: bool,
    /// The times `aggregate_balances_at` was asked at.
    pub asked_at: Mutex<Vec<DateTime<Utc>>>,
}

impl ReadingLedger {
    /// Commits `event` as the relay would: its postings and metadata, the next id.
    pub fn commit(&self, event: &OutboxEvent) -> u64 {
        let LedgerCommand::Post(post) = event.payload.command().unwrap() else {
            panic!("a post")
        };
        let PostBody::Postings(postings) = post.body else {
            panic!("postings")
        };
        self.push(postings, post.reference, post.metadata)
    }

    pub fn push(
        &self,
        postings: Vec<Posting>,
        reference: Option<String>,
        metadata: Metadata,
    ) -> u64 {
        let mut txs = self.txs.lock().unwrap();
        let id = txs.len() as u64 + 1;
        txs.push(LedgerTransaction {
            id,
            postings,
            reference,
            metadata,
            reverted: false,
            timestamp: None,
            inserted_at: None,
        });
        id
    }
}

fn unsupported<T>() -> Result<T> {
    Err(Error::new(ErrorKind::Unsupported, "not in this fake"))
}

#[async_trait]
impl Ledger for ReadingLedger {
    fn capabilities(&self) -> LedgerCapabilities {
        LedgerCapabilities::new(1)
    }
    async fn post(&self, _: EventId, _: &[u8]) -> Result<PostOutcome> {
        unsupported()
    }
    async fn revert(&self, _: EventId, _: u64, _: &Metadata) -> Result<PostOutcome> {
        unsupported()
    }
    async fn transaction_by_event_id(&self, id: EventId) -> Result<Option<LedgerTransaction>> {
        *self.lookups.lock().unwrap() += 1;
        let txs = self.txs.lock().unwrap();
        Ok(txs
            .iter()
            .find(|tx| tx.metadata.get(OUTBOX_EVENT_ID_KEY) == Some(&id.to_string()))
            .cloned())
    }
    async fn save_account_metadata(&self, _: &str, _: &Account, _: &Metadata) -> Result<()> {
        unsupported()
    }
    async fn rejection_notice(&self, _: &Account, _: EventId) -> Result<Option<String>> {
        unsupported()
    }
    async fn aggregate_balances(&self, _: &str) -> Result<Balances> {
        unsupported()
    }
    async fn aggregate_balances_at(
        &self,
        address: &str,
        at: DateTime<Utc>,
        date: BalanceDate,
    ) -> Result<Balances> {
        if date == BalanceDate::Insertion && !self.by_insertion {
            return unsupported();
        }
        self.asked_at.lock().unwrap().push(at);
        Ok(self
            .balances
            .get(&(address.to_owned(), date))
            .cloned()
            .unwrap_or_default())
    }
    async fn transactions_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<LedgerTransaction>> {
        let txs = self.txs.lock().unwrap();
        Ok(txs
            .iter()
            .filter(|tx| after.is_none_or(|a| tx.id > a))
            .take(limit)
            .cloned()
            .collect())
    }
}
