//! Per-account queues and the completion frontier that decides how far the cursor may move.
//!
//! Memory stays bounded when an account stops: nothing after a stopped head can be
//! acknowledged in this run (the cursor may not pass it), so the frontier keeps no
//! entry beyond the earliest stopped head, and a stopped account keeps only its head
//! (its later events are dropped as they are read; a restart reads them again).

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
    /// The ledger refused the event and the refusal is durable in the store: only its
    /// rejection notice is left to send (never the post again).
    pub refused: Option<Refusal>,
}

/// A ledger refusal, recorded, whose notice is still to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub code: String,
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
    /// After a run failed, its events go one by one through this position (the
    /// element that failed, or the whole run when its fate is unknown), so a refusal,
    /// a replay or a retry is handled exactly as for a single post.
    singles_through: Option<Position>,
}

impl Pending {
    /// Whether this event may go in an ordered run of its account: a plain post, not
    /// refused, whose outcome no crash left unknown.
    fn runnable(&self) -> bool {
        self.post && !self.uncertain && self.refused.is_none()
    }
}

/// Events read but not yet terminal, by account, plus the read order.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    accounts: BTreeMap<Account, AccountQueue>,
    /// Every event read, in commit order, until it and all before it are terminal.
    frontier: VecDeque<(Position, EventId)>,
    done: HashSet<EventId>,
    queued: usize,
    /// The earliest stopped head: the frontier can never pass it in this run.
    cap: Option<Position>,
}

impl Queues {
    pub fn push(&mut self, pending: Pending) {
        if self.is_stopped(&pending.event.account) {
            // Behind a stopped head: never sent in this run, re-read after a restart.
            return;
        }
        if !self.beyond_cap(pending.event.position) {
            self.frontier
                .push_back((pending.event.position, pending.event.event_id));
        }
        self.queued += 1;
        self.accounts
            .entry(pending.event.account.clone())
            .or_insert_with(|| AccountQueue {
                events: VecDeque::new(),
                state: AccountState::Ready,
                singles_through: None,
            })
            .events
            .push_back(pending);
    }

    /// An event that needs no sending (already terminal before a restart).
    pub fn push_done(&mut self, event: &OutboxEvent) {
        if self.beyond_cap(event.position) {
            return;
        }
        self.frontier.push_back((event.position, event.event_id));
        self.done.insert(event.event_id);
    }

    fn beyond_cap(&self, position: Position) -> bool {
        self.cap.is_some_and(|cap| position > cap)
    }

    pub fn is_stopped(&self, account: &Account) -> bool {
        self.accounts
            .get(account)
            .is_some_and(|q| q.state == AccountState::Stopped)
    }

    /// Entries the bookkeeping holds (frontier, done set, queued events), for the
    /// memory-bound tests.
    #[cfg(test)]
    pub fn footprint(&self) -> usize {
        self.frontier.len() + self.done.len() + self.queued
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

    /// What may be sent now, per account that is ready or whose park expired: its
    /// head, followed by up to `max_run - 1` more of its events when the head and they
    /// may go in one ordered run (consecutive runnable posts, past any fallback to
    /// single posts). A `max_run` of 1 or less gives the heads alone.
    pub fn ready_runs(&self, now: Instant, max_run: usize) -> Vec<Vec<Pending>> {
        self.accounts
            .values()
            .filter(|q| match q.state {
                AccountState::Ready => true,
                AccountState::Parked { until } => until <= now,
                AccountState::Stopped => false,
            })
            .filter_map(|q| {
                let head = q.events.front()?;
                let alone =
                    !head.runnable() || q.singles_through.is_some_and(|s| head.event.position <= s);
                let take = if alone { 1 } else { max_run.max(1) };
                Some(
                    q.events
                        .iter()
                        .take(take)
                        .enumerate()
                        .take_while(|(i, e)| *i == 0 || e.runnable())
                        .map(|(_, e)| e.clone())
                        .collect(),
                )
            })
            .collect()
    }

    /// A run of `account` failed: its events through `through` go one by one from
    /// now on, so a refusal is recorded and announced as for a single post. When the
    /// run's fate is unknown (`possibly_posted`: all of it may have committed), they
    /// are also sent alone rather than in a bulk, whose answer has no hit flag, so a
    /// committed one is seen as a replay.
    pub fn fall_back_to_singles(
        &mut self,
        account: &Account,
        through: Position,
        possibly_posted: bool,
    ) {
        let Some(q) = self.accounts.get_mut(account) else {
            return;
        };
        q.singles_through = Some(q.singles_through.map_or(through, |s| s.max(through)));
        if possibly_posted {
            for event in q.events.iter_mut().filter(|e| e.event.position <= through) {
                event.uncertain = true;
            }
        }
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

    /// How many accounts wait for a retry (parked, with an event to send) and how
    /// many are stopped, for the relay's gauges.
    pub fn parked_and_stopped(&self) -> (usize, usize) {
        let mut counts = (0, 0);
        for queue in self.accounts.values() {
            match queue.state {
                AccountState::Parked { .. } if !queue.events.is_empty() => counts.0 += 1,
                AccountState::Stopped => counts.1 += 1,
                _ => {}
            }
        }
        counts
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
        let cap = self.cap;
        if let Some(q) = self.accounts.get_mut(account)
            && let Some(head) = q.events.pop_front()
        {
            if cap.is_none_or(|cap| head.event.position <= cap) {
                self.done.insert(head.event.event_id);
            }
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

    /// The head's notice failed transiently: park the account, counting only failures
    /// (a notice is not a delivery attempt of the event).
    pub fn park_notice(&mut self, account: &Account, until: Instant) {
        if let Some(q) = self.accounts.get_mut(account) {
            q.state = AccountState::Parked { until };
            if let Some(head) = q.events.front_mut() {
                head.failures += 1;
            }
        }
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

    /// The head of `account` was refused and the refusal recorded: it stays the head,
    /// ready at once, until its notice is written.
    pub fn refuse_head(&mut self, account: &Account, refusal: Refusal) {
        if let Some(q) = self.accounts.get_mut(account) {
            q.state = AccountState::Ready;
            if let Some(head) = q.events.front_mut() {
                head.refused = Some(refusal);
                head.attempts += 1;
                head.failures = 0;
            }
        }
    }

    /// Stops `account` for this run: keeps only its head, and caps the frontier there.
    pub fn stop(&mut self, account: &Account) {
        let Some(q) = self.accounts.get_mut(account) else {
            return;
        };
        q.state = AccountState::Stopped;
        let dropped = q.events.len().saturating_sub(1);
        q.events.truncate(1);
        self.queued -= dropped;
        let Some(head) = q.events.front().map(|h| h.event.position) else {
            return;
        };
        if self.cap.is_none_or(|cap| head < cap) {
            self.cap = Some(head);
            while self.frontier.back().is_some_and(|(p, _)| *p > head) {
                if let Some((_, id)) = self.frontier.pop_back() {
                    self.done.remove(&id);
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{
        Amount, Asset, LedgerCommand, Metadata, NewEvent, PostBody, PostCommand, Posting,
    };
    use crate::testing::MemoryStore;

    fn event(store: &MemoryStore, merchant: &str) -> OutboxEvent {
        store.add(&NewEvent::new(
            Account::parse(&format!("merchants:{merchant}")).unwrap(),
            LedgerCommand::Post(PostCommand {
                body: PostBody::Postings(vec![Posting {
                    source: Account::parse("world").unwrap(),
                    destination: Account::parse("merchants:x").unwrap(),
                    amount: Amount::new(1),
                    asset: Asset::parse("USD/2").unwrap(),
                }]),
                reference: None,
                metadata: Metadata::new(),
            }),
        ))
    }

    fn pending(event: OutboxEvent) -> Pending {
        Pending {
            event,
            attempts: 0,
            failures: 0,
            uncertain: false,
            post: true,
            refused: None,
        }
    }

    /// A stopped account pins the cursor for the rest of the run; what is read after
    /// it (its own later events, and the other accounts' completed ones) must not
    /// pile up in memory.
    #[test]
    fn a_stopped_account_keeps_the_bookkeeping_bounded() {
        let store = MemoryStore::default();
        let mut queues = Queues::default();
        let stopped = event(&store, "stopped");
        let account = stopped.account.clone();
        queues.push(pending(stopped.clone()));
        queues.stop(&account);
        let healthy = Account::parse("merchants:healthy").unwrap();
        for i in 0..5_000 {
            let e = event(&store, if i % 2 == 0 { "stopped" } else { "healthy" });
            queues.push(pending(e));
            queues.complete_head(&healthy);
            assert_eq!(
                queues.advance_frontier(),
                None,
                "the cursor passed a stopped head"
            );
        }
        assert!(
            queues.footprint() <= 4,
            "{} entries kept for 5,000 events read behind a stopped account",
            queues.footprint()
        );
        assert_eq!(queues.stopped_accounts(), vec![account]);
        assert!(queues.only_stopped_left());
    }
}
