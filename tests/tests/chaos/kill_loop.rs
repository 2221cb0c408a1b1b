//! The relay SIGKILL loop: relays run while the workload is enqueued; at random
//! moments (each after the relay has shown progress, so it dies mid-work) one is
//! killed with SIGKILL and started again, until the planned kills are done; then the
//! relays run until every event is terminal and stop on SIGTERM.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use outbox_core::NewEvent;

use crate::common::backend::Backend;
use crate::figures::Chaos;
use crate::relay_child::RelayChild;
use crate::target::{BATCH, enqueue_batched, terminal};

/// What to run and how hard to hit it.
pub struct KillPlan<'a> {
    pub backend: &'a Backend,
    pub ledger_url: String,
    /// Flags of every relay process (`--cdc`, `--partitions 6`, `--name …`).
    pub flags: Vec<String>,
    /// Relay processes running at once (1, or the fleet's members).
    pub members: usize,
    pub kills: usize,
    /// Longest wait after progress is seen before the kill.
    pub kill_within: Duration,
    pub log_dir: &'a Path,
}

/// Longest wait for a relay to make progress, or for the last events after the kills.
const PROGRESS_LIMIT: Duration = Duration::from_secs(180);
const DRAIN_LIMIT: Duration = Duration::from_secs(900);

impl KillPlan<'_> {
    fn start(&self) -> RelayChild {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        RelayChild::start(&self.backend.url(), &self.ledger_url, &flags, self.log_dir)
    }

    /// Enqueues `events` while the relays run and die; returns what was done to them.
    pub async fn run(&self, events: Vec<NewEvent>, rng: &mut fastrand::Rng) -> Chaos {
        let total = events.len();
        let enqueued = AtomicBool::new(false);
        let enqueue = async {
            enqueue_batched(self.backend, events, BATCH).await;
            enqueued.store(true, Ordering::SeqCst);
        };
        let (_, chaos) = tokio::join!(enqueue, self.kill_and_drain(total, &enqueued, rng));
        chaos
    }

    async fn kill_and_drain(
        &self,
        total: usize,
        enqueued: &AtomicBool,
        rng: &mut fastrand::Rng,
    ) -> Chaos {
        let mut chaos = Chaos::default();
        let mut members: Vec<RelayChild> = (0..self.members).map(|_| self.start()).collect();
        'kills: while chaos.kills < self.kills {
            let before = terminal(self.backend).await;
            let deadline = Instant::now() + PROGRESS_LIMIT;
            loop {
                let now = terminal(self.backend).await;
                if now == total && enqueued.load(Ordering::SeqCst) {
                    break 'kills; // drained: a kill now would test nothing
                }
                if now > before {
                    break;
                }
                for member in &mut members {
                    member.assert_running();
                }
                assert!(
                    Instant::now() < deadline,
                    "no relay progress within {PROGRESS_LIMIT:?} ({now} of {total} terminal)"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let within = self.kill_within.as_millis() as u64;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..=within))).await;
            let victim = members.swap_remove(rng.usize(..members.len()));
            victim.kill().await;
            chaos.kills += 1;
            if terminal(self.backend).await < total || !enqueued.load(Ordering::SeqCst) {
                chaos.kills_mid_drain += 1;
            }
            members.push(self.start());
        }
        let deadline = Instant::now() + DRAIN_LIMIT;
        while !(enqueued.load(Ordering::SeqCst) && terminal(self.backend).await == total) {
            for member in &mut members {
                member.assert_running();
            }
            assert!(
                Instant::now() < deadline,
                "not drained within {DRAIN_LIMIT:?} after the kills ({} of {total} terminal)",
                terminal(self.backend).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for member in members {
            member.terminate().await;
        }
        chaos
    }
}
