//! Per-account queues and the completion frontier that decides how far the cursor may move.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Instant;

use crate::domain::{Account, EventId, OutboxEvent, Position};

/// An event waiting for a terminal outcome.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub event: OutboxEvent,
    /// Attempts already recorded for this event (across restarts).
    pub attempts: u32,
    /// Transient failures in this run, for the backoff.
    pub failures: u32,
    /// May have reached the ledger before a crash: sent alone, so a replay shows its hit.
    pub uncertain: bool,
    /// A plain post (not a revert, not unreadable): may go in a bulk call. Decided once
    /// when the event is read, not on every attempt.
    pub post: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccountState {
    Ready,
    /// A transient failure: retry the head after `until`; the other accounts go on.
    Parked {
        until: Instant,
    },
    /// A permanent error: nothing more is sent for this account in this run.
    Stopped,
}

#[derive(Debug)]
struct AccountQueue {
    events: VecDeque<Pending>,
    state: AccountState,
}

/// Events read but not yet terminal, by account, plus the read order.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    accounts: BTreeMap<Account, AccountQueue>,
    /// Every event read, in commit order, until it and all before it are terminal.
    frontier: VecDeque<(Position, EventId)>,
    done: HashSet<EventId>,
    queued: usize,
}

impl Queues {
    pub fn push(&mut self, pending: Pending) {
        self.frontier
            .push_back((pending.event.position, pending.event.event_id));
        self.queued += 1;
        self.accounts
            .entry(pending.event.account.clone())
            .or_insert_with(|| AccountQueue {
                events: VecDeque::new(),
                state: AccountState::Ready,
            })
            .events
            .push_back(pending);
    }

    /// An event that needs no sending (already terminal before a restart).
    pub fn push_done(&mut self, event: &OutboxEvent) {
        self.frontier.push_back((event.position, event.event_id));
        self.done.insert(event.event_id);
    }

    /// Events waiting in accounts that are not stopped (stopped ones do not count
    /// toward the read-ahead, so they cannot starve the others).
    pub fn active(&self) -> usize {
        let stopped: usize = self
            .accounts
            .values()
            .filter(|q| q.state == AccountState::Stopped)
            .map(|q| q.events.len())
            .sum();
        self.queued - stopped
    }

    /// The heads that may be sent now: one per account, ready or with its park expired.
    pub fn ready_heads(&self, now: Instant) -> Vec<Pending> {
        self.accounts
            .values()
            .filter(|q| match q.state {
                AccountState::Ready => true,
                AccountState::Parked { until } => until <= now,
                AccountState::Stopped => false,
            })
            .filter_map(|q| q.events.front().cloned())
            .collect()
    }

    /// The earliest time a parked account may retry.
    pub fn next_unpark(&self) -> Option<Instant> {
        self.accounts
            .values()
            .filter(|q| !q.events.is_empty())
            .filter_map(|q| match q.state {
                AccountState::Parked { until } => Some(until),
                _ => None,
            })
            .min()
    }

    /// True when every queued event belongs to a stopped account.
    pub fn only_stopped_left(&self) -> bool {
        self.accounts
            .values()
            .all(|q| q.events.is_empty() || q.state == AccountState::Stopped)
    }

    pub fn stopped_accounts(&self) -> Vec<Account> {
        self.accounts
            .iter()
            .filter(|(_, q)| q.state == AccountState::Stopped)
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// The head of `account` reached a terminal outcome: drop it, the account is ready.
    pub fn complete_head(&mut self, account: &Account) {
        if let Some(q) = self.accounts.get_mut(account)
            && let Some(head) = q.events.pop_front()
        {
            self.done.insert(head.event.event_id);
            self.queued -= 1;
            q.state = AccountState::Ready;
            if q.events.is_empty() {
                self.accounts.remove(account);
            }
        }
    }

    /// The head failed transiently: count it and park the account until `until`.
    pub fn park(&mut self, account: &Account, until: Instant) -> u32 {
        let Some(q) = self.accounts.get_mut(account) else {
            return 0;
        };
        q.state = AccountState::Parked { until };
        q.events.front_mut().map_or(0, |head| {
            head.failures += 1;
            head.attempts += 1;
            head.failures
        })
    }

    /// Counts an attempt of the head (a terminal one, or before a stop).
    pub fn count_attempt(&mut self, account: &Account) {
        if let Some(head) = self
            .accounts
            .get_mut(account)
            .and_then(|q| q.events.front_mut())
        {
            head.attempts += 1;
        }
    }

    pub fn stop(&mut self, account: &Account) {
        if let Some(q) = self.accounts.get_mut(account) {
            q.state = AccountState::Stopped;
        }
    }

    /// Pops every leading terminal event; returns the last popped position, the new
    /// cursor, if the frontier moved.
    pub fn advance_frontier(&mut self) -> Option<Position> {
        let mut moved = None;
        while let Some((position, id)) = self.frontier.front() {
            if !self.done.remove(id) {
                break;
            }
            moved = Some(*position);
            self.frontier.pop_front();
        }
        moved
    }
}
