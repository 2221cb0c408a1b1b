//! The campaign's sizes (`OUTBOX_CHAOS_PROFILE=short|long`, short by default) and its
//! seed (`OUTBOX_TEST_SEED` reproduces a run; otherwise one is drawn and printed).

use std::time::Duration;

/// How big each scenario is.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub name: &'static str,
    /// Events of each relay SIGKILL scenario (SQLite, PostgreSQL polling, CDC, the
    /// fleet), and their accounts.
    pub kill_events: usize,
    pub kill_accounts: usize,
    /// SIGKILLs per relay scenario.
    pub kills: usize,
    /// Longest wait, after the relay has shown progress, before it is killed.
    pub kill_within: Duration,
    /// Events and accounts of the ledger-fault scenario, and its outage.
    pub fault_events: usize,
    pub fault_accounts: usize,
    pub outage: Duration,
    /// The held-transaction scenario: how long it is held, and how many others commit.
    pub held_for: Duration,
    pub held_others: usize,
}

impl Profile {
    const SHORT: Self = Self {
        name: "short",
        kill_events: 3_000,
        kill_accounts: 100,
        kills: 5,
        kill_within: Duration::from_millis(150),
        fault_events: 1_000,
        fault_accounts: 50,
        outage: Duration::from_secs(3),
        held_for: Duration::from_secs(3),
        held_others: 1_000,
    };

    const LONG: Self = Self {
        name: "long",
        kill_events: 100_000,
        kill_accounts: 1_000,
        kills: 100,
        kill_within: Duration::from_millis(400),
        fault_events: 5_000,
        fault_accounts: 200,
        outage: Duration::from_secs(60),
        held_for: Duration::from_secs(30),
        held_others: 10_000,
    };

    /// The profile named by `OUTBOX_CHAOS_PROFILE`.
    ///
    /// # Panics
    /// On a name other than `short` or `long`, naming the variable.
    pub fn from_env() -> Self {
        match std::env::var("OUTBOX_CHAOS_PROFILE").as_deref() {
            Err(_) | Ok("" | "short") => Self::SHORT,
            Ok("long") => Self::LONG,
            Ok(other) => panic!("OUTBOX_CHAOS_PROFILE must be short or long, not {other:?}"),
        }
    }
}

pub use crate::common::seeded;
