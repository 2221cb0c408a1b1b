//! The fan-out loop's view of its destination's dead letters: which accounts are
//! parked behind a refusal, which are being replayed, and what of theirs is already in
//! the record (so the cursor may pass it).
//!
//! Invariant: an account's messages are recorded in position order, so every position
//! of the account at or below `recorded_through` is in the record; the loop passes
//! such a message without sending it (it was set aside or is the refusal itself, and
//! a replay re-publishes it from the record).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::dead_letter::DeadLetterState;
use super::{FanoutStore, StoredMessage};
use crate::domain::Account;
use crate::error::Result;
use crate::retry::RetryPolicy;

/// What the loop does with a message it read after its cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Disposition {
    /// The account flows: send it.
    Send,
    /// Already in the dead-letter record: pass it.
    Recorded,
    /// The account is parked or being replayed: record it behind the refusal.
    SetAside,
}

/// One account with dead letters at this destination.
#[derive(Debug)]
struct Aside {
    /// The dead letter of the refusal that parks the account, while it does.
    parked_by: Option<u64>,
    refused_sequence: u64,
    refused_position: u64,
    /// Every position of the account up to here is in the record.
    recorded_through: u64,
    /// The highest position a replay re-published and the destination confirmed.
    replayed_through: u64,
    saved_through: u64,
    /// Recorded messages read for the replay, not yet sent.
    queue: VecDeque<StoredMessage>,
    /// A replay round of the account is in flight.
    in_flight: bool,
}

impl Aside {
    /// Parked, or released with recorded messages not yet re-published.
    fn active(&self) -> bool {
        self.parked_by.is_some() || self.recorded_through > self.replayed_through
    }

    fn replaying(&self) -> bool {
        self.parked_by.is_none() && self.recorded_through > self.replayed_through
    }
}

#[derive(Debug)]
pub(super) struct SetAside {
    destination: String,
    accounts: HashMap<Account, Aside>,
    /// The highest replay request id already acted on.
    last_request: u64,
}

impl SetAside {
    /// Where the destination's accounts stood when the loop last ran: a restart keeps
    /// a parked account parked and resumes a replay where its progress was saved.
    pub(super) async fn load(
        store: &Arc<dyn FanoutStore>,
        destination: &str,
        cursor: u64,
        retry: &RetryPolicy,
    ) -> Result<Self> {
        let accounts = retry
            .run("dead_letter_accounts", || {
                store.dead_letter_accounts(destination)
            })
            .await?;
        let requests = retry
            .run("read_replay_requests", || {
                store.read_replay_requests(destination, 0)
            })
            .await?;
        let mut set_aside = Self {
            destination: destination.to_owned(),
            accounts: HashMap::new(),
            last_request: requests.last().map_or(0, |r| r.id),
        };
        for account in accounts {
            let state = account.state();
            // A replayed account matters only while the cursor may still meet its
            // recorded messages.
            if state == DeadLetterState::Replayed && account.last_position <= cursor {
                continue;
            }
            if state == DeadLetterState::Parked {
                tracing::warn!(
                    destination, account = %account.account.as_str(),
                    sequence = account.refused_sequence, position = account.refused_position,
                    "account parked behind a dead letter: its messages are set aside until `outbox fanout replay`"
                );
            }
            set_aside.accounts.insert(
                account.account.clone(),
                Aside {
                    parked_by: (state == DeadLetterState::Parked).then_some(account.refusal_id),
                    refused_sequence: account.refused_sequence,
                    refused_position: account.refused_position,
                    recorded_through: account.last_position,
                    replayed_through: account.replayed_through,
                    saved_through: account.replayed_through,
                    queue: VecDeque::new(),
                    in_flight: false,
                },
            );
        }
        Ok(set_aside)
    }

    /// Whether no account is set aside (parked, replayed or recorded past the cursor).
    pub(super) fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    pub(super) fn disposition(&self, account: &Account, position: u64) -> Disposition {
        match self.accounts.get(account) {
            Some(aside) if position <= aside.recorded_through => Disposition::Recorded,
            Some(aside) if aside.active() => Disposition::SetAside,
            _ => Disposition::Send,
        }
    }

    /// Why a set-aside message waits, for its dead letter.
    pub(super) fn behind(&self, account: &Account) -> String {
        self.accounts.get(account).map_or_else(String::new, |a| {
            format!(
                "set aside behind the refused sequence {} (position {})",
                a.refused_sequence, a.refused_position
            )
        })
    }

    /// A message of `account` is now in the record (set aside or refused).
    pub(super) fn recorded(&mut self, account: &Account, position: u64) {
        if let Some(aside) = self.accounts.get_mut(account) {
            aside.recorded_through = aside.recorded_through.max(position);
        }
    }

    /// The destination refused `account`'s message for good (dead letter `id`): the
    /// account is parked until a replay request covers this refusal.
    pub(super) fn refused(&mut self, account: &Account, sequence: u64, position: u64, id: u64) {
        let aside = self.accounts.entry(account.clone()).or_insert(Aside {
            parked_by: None,
            refused_sequence: sequence,
            refused_position: position,
            recorded_through: 0,
            replayed_through: 0,
            saved_through: 0,
            queue: VecDeque::new(),
            in_flight: false,
        });
        aside.parked_by = Some(id);
        aside.refused_sequence = sequence;
        aside.refused_position = position;
        aside.recorded_through = aside.recorded_through.max(position);
        aside.queue.clear();
    }

    /// Acts on replay requests made since the last look; returns how many accounts
    /// were released.
    pub(super) async fn poll_requests(
        &mut self,
        store: &Arc<dyn FanoutStore>,
        retry: &RetryPolicy,
    ) -> Result<usize> {
        let (destination, after) = (self.destination.clone(), self.last_request);
        let requests = retry
            .run("read_replay_requests", || {
                store.read_replay_requests(&destination, after)
            })
            .await?;
        let mut released = 0;
        for request in requests {
            self.last_request = self.last_request.max(request.id);
            let account = request.account.as_str();
            match self.accounts.get_mut(&request.account) {
                Some(aside) if aside.parked_by.is_some_and(|id| id <= request.refusal_id) => {
                    aside.parked_by = None;
                    aside.queue.clear();
                    released += 1;
                    tracing::warn!(
                        destination,
                        account,
                        request = request.id,
                        "replay requested: the account's dead letters are re-published in order"
                    );
                }
                Some(aside) if aside.parked_by.is_some() => tracing::warn!(
                    destination,
                    account,
                    request = request.id,
                    "replay request ignored: the account was refused again after it was made; request again"
                ),
                _ => tracing::info!(
                    destination,
                    account,
                    request = request.id,
                    "replay request: the account is not parked"
                ),
            }
        }
        Ok(released)
    }

    /// Accounts whose recorded messages wait to be re-published, with none in flight.
    pub(super) fn replay_ready(&self) -> Vec<Account> {
        let mut ready: Vec<Account> = self
            .accounts
            .iter()
            .filter(|(_, a)| a.replaying() && !a.in_flight)
            .map(|(account, _)| account.clone())
            .collect();
        ready.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        ready
    }

    /// Whether any released account still has recorded messages to re-publish.
    pub(super) fn replay_pending(&self) -> bool {
        self.accounts.values().any(Aside::replaying)
    }

    /// The next recorded messages of `account` to re-publish (at most `limit`), read
    /// from the store `page` at a time; marks the account in flight.
    pub(super) async fn take_replay(
        &mut self,
        store: &Arc<dyn FanoutStore>,
        retry: &RetryPolicy,
        account: &Account,
        limit: usize,
        page: usize,
    ) -> Result<Vec<StoredMessage>> {
        let destination = self.destination.clone();
        let Some(aside) = self.accounts.get_mut(account) else {
            return Ok(Vec::new());
        };
        if aside.queue.is_empty() {
            let after = aside.replayed_through;
            let read = retry
                .run("read_set_aside", || {
                    store.read_set_aside(&destination, account, after, page)
                })
                .await?;
            if read.is_empty() {
                // The record holds nothing past the progress: the replay is complete.
                aside.replayed_through = aside.recorded_through;
                return Ok(Vec::new());
            }
            aside.queue.extend(read);
        }
        let take = limit.min(aside.queue.len());
        let messages: Vec<_> = aside.queue.drain(..take).collect();
        aside.in_flight = !messages.is_empty();
        Ok(messages)
    }

    /// A re-published message was confirmed.
    pub(super) fn replay_confirmed(&mut self, account: &Account, position: u64) {
        if let Some(aside) = self.accounts.get_mut(account) {
            aside.replayed_through = aside.replayed_through.max(position);
            if !aside.active() {
                tracing::warn!(
                    destination = self.destination, account = %account.as_str(),
                    "replay complete: the account flows again"
                );
            }
        }
    }

    /// A re-published message failed: the rest is read again from the record.
    pub(super) fn replay_failed(&mut self, account: &Account) {
        if let Some(aside) = self.accounts.get_mut(account) {
            aside.queue.clear();
        }
    }

    pub(super) fn replay_settled(&mut self, account: &Account) {
        if let Some(aside) = self.accounts.get_mut(account) {
            aside.in_flight = false;
        }
    }

    /// Makes the replay progress durable (a crash re-publishes at most what was
    /// confirmed since: at least once).
    pub(super) async fn save_progress(
        &mut self,
        store: &Arc<dyn FanoutStore>,
        retry: &RetryPolicy,
    ) -> Result<()> {
        let destination = self.destination.clone();
        for (account, aside) in &mut self.accounts {
            if aside.replayed_through > aside.saved_through {
                let position = aside.replayed_through;
                retry
                    .run("save_replay_progress", || {
                        store.save_replay_progress(&destination, account, position)
                    })
                    .await?;
                aside.saved_through = position;
            }
        }
        Ok(())
    }

    /// Accounts parked behind a refusal, sorted.
    pub(super) fn parked(&self) -> Vec<Account> {
        let mut parked: Vec<Account> = self
            .accounts
            .iter()
            .filter(|(_, a)| a.parked_by.is_some())
            .map(|(account, _)| account.clone())
            .collect();
        parked.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        parked
    }
}
