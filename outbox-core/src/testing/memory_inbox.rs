//! An in-memory `Inbox`, for unit tests of the inbox engine's logic (the SQLite and
//! Postgres inboxes pass the testkit's inbox suite).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use crate::domain::Account;
use crate::error::Result;
use crate::exception::NewException;
use crate::inbox::{HeldGap, HoldResult, Inbox, InboxMessage, MessageKind};

/// One consumer database: the inbox tables and the consumer's own impact rows.
///
/// `Clone` is the transaction: a test clones it before a delivery and puts the clone
/// back when the delivery fails, as a rollback would.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryInbox {
    /// (consumer, instruction id) → the kind its processed marker recorded.
    pub processed: HashMap<(String, String), MessageKind>,
    /// (consumer, account) → the account's high-water mark.
    pub last_applied: HashMap<(String, Account), u64>,
    /// The gap queue, by (consumer, account, sequence).
    pub held: BTreeMap<(String, Account, u64), (InboxMessage, DateTime<Utc>)>,
    pub exceptions: Vec<NewException>,
    /// What the handlers wrote through this "transaction", in order (the treasury).
    pub impacts: Vec<InboxMessage>,
}

impl MemoryInbox {
    /// The held sequences of `account` for `consumer`, ascending.
    pub fn held_of(&self, consumer: &str, account: &Account) -> Vec<u64> {
        self.held
            .keys()
            .filter(|(c, a, _)| c == consumer && a == account)
            .map(|(_, _, sequence)| *sequence)
            .collect()
    }
}

impl Inbox for MemoryInbox {
    async fn processed_kind(
        &mut self,
        consumer: &str,
        instruction_id: &str,
    ) -> Result<Option<MessageKind>> {
        Ok(self
            .processed
            .get(&(consumer.to_owned(), instruction_id.to_owned()))
            .copied())
    }

    async fn last_applied(&mut self, consumer: &str, account: &Account) -> Result<u64> {
        Ok(self
            .last_applied
            .get(&(consumer.to_owned(), account.clone()))
            .copied()
            .unwrap_or(0))
    }

    async fn mark_applied(&mut self, consumer: &str, message: &InboxMessage) -> Result<()> {
        self.processed.insert(
            (consumer.to_owned(), message.instruction_id.clone()),
            message.kind,
        );
        self.last_applied.insert(
            (consumer.to_owned(), message.account.clone()),
            message.sequence,
        );
        Ok(())
    }

    async fn hold(&mut self, consumer: &str, message: &InboxMessage) -> Result<HoldResult> {
        let slot = (
            consumer.to_owned(),
            message.account.clone(),
            message.sequence,
        );
        if let Some((holder, _)) = self.held.get(&slot) {
            return Ok(HoldResult::Occupied {
                instruction_id: holder.instruction_id.clone(),
                kind: holder.kind,
            });
        }
        self.held.insert(slot, (message.clone(), Utc::now()));
        Ok(HoldResult::Held)
    }

    async fn take_held(
        &mut self,
        consumer: &str,
        account: &Account,
        sequence: u64,
    ) -> Result<Option<InboxMessage>> {
        Ok(self
            .held
            .remove(&(consumer.to_owned(), account.clone(), sequence))
            .map(|(message, _)| message))
    }

    async fn record_exception(&mut self, exception: &NewException) -> Result<bool> {
        let same = |e: &NewException| {
            (&e.source, e.kind, &e.account, e.sequence)
                == (
                    &exception.source,
                    exception.kind,
                    &exception.account,
                    exception.sequence,
                )
        };
        if self.exceptions.iter().any(same) {
            return Ok(false);
        }
        self.exceptions.push(exception.clone());
        Ok(true)
    }

    async fn held_gaps(&mut self, consumer: &str) -> Result<Vec<HeldGap>> {
        let mut gaps: BTreeMap<Account, HeldGap> = BTreeMap::new();
        // Ascending keys: the first entry seen of an account is its lowest held.
        for ((c, account, sequence), (_, held_at)) in &self.held {
            if c != consumer || gaps.contains_key(account) {
                continue;
            }
            let last_applied = self
                .last_applied
                .get(&(consumer.to_owned(), account.clone()))
                .copied()
                .unwrap_or(0);
            gaps.insert(
                account.clone(),
                HeldGap {
                    account: account.clone(),
                    last_applied,
                    lowest_held: *sequence,
                    held_at: *held_at,
                },
            );
        }
        Ok(gaps.into_values().collect())
    }
}
