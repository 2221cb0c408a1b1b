//! `Fleet`: takes a fair share of partitions, runs a dispatcher per owned partition,
//! gives partitions back when others join, takes over those of instances that died.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dispatch::{DispatchConfig, Dispatcher, RunMode, Summary};
use crate::error::{Error, ErrorKind, Result};
use crate::ledger::Ledger;
use crate::relay::Relay;
use crate::store::Store;

/// Exclusive, crash-released ownership of partitions (Postgres: session advisory locks).
///
/// # Contract
/// - A partition is owned by at most one live instance; the owner's death (its
///   database session ending) releases it without anyone's help.
/// - `still_held` is false as soon as ownership can no longer be guaranteed (the
///   session is gone); the fleet then stops every dispatcher.
#[async_trait]
pub trait PartitionLocks: Send + Sync + 'static {
    /// How many partitions the accounts are spread over.
    fn partitions(&self) -> u32;
    /// Live instances sharing the partitions, this one included.
    async fn live_instances(&self) -> Result<u32>;
    /// Tries to take `partition`; true when this instance now owns it.
    async fn try_acquire(&self, partition: u32) -> Result<bool>;
    /// Gives up `partition` so another instance can take it; called once its
    /// dispatcher has stopped (or could not start).
    async fn release(&self, partition: u32) -> Result<()>;
    /// Whether the locks taken are still held.
    async fn still_held(&self) -> Result<bool>;
}

/// Opens the store view and relay of one partition (cursor per partition).
#[async_trait]
pub trait PartitionRelays: Send + Sync + 'static {
    /// The store view and the relay of `partition`: only that partition's accounts,
    /// resuming after that partition's cursor, with cursor saves fenced on its
    /// ownership.
    async fn open(&self, partition: u32) -> Result<(Arc<dyn Store>, Box<dyn Relay>)>;
}

/// Fleet settings.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// How often ownership is checked and rebalanced; bounds takeover time together
    /// with how fast the database notices a dead session.
    pub check_interval: Duration,
    /// The settings of every partition's dispatcher.
    pub dispatch: DispatchConfig,
}

struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<Summary>>,
}

/// Runs the partitions this instance owns. See the module docs.
pub struct Fleet {
    locks: Arc<dyn PartitionLocks>,
    relays: Arc<dyn PartitionRelays>,
    ledger: Arc<dyn Ledger>,
    config: FleetConfig,
    running: BTreeMap<u32, Running>,
    total: Summary,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("owned", &self.running.keys().collect::<Vec<_>>())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// A fleet member that takes partitions through `locks`, opens each owned one
    /// through `relays` and posts to `ledger`. Nothing runs until [`run`](Self::run).
    pub fn new(
        locks: Arc<dyn PartitionLocks>,
        relays: Arc<dyn PartitionRelays>,
        ledger: Arc<dyn Ledger>,
        config: FleetConfig,
    ) -> Self {
        Self {
            locks,
            relays,
            ledger,
            config,
            running: BTreeMap::new(),
            total: Summary::default(),
        }
    }

    /// The partitions this instance runs now.
    pub fn owned(&self) -> Vec<u32> {
        self.running.keys().copied().collect()
    }

    /// Runs until `shutdown` turns true; then stops every dispatcher gracefully and
    /// releases its partitions. Returns the sum of the dispatchers' summaries.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<Summary> {
        let outcome = loop {
            if *shutdown.borrow() {
                break Ok(());
            }
            if let Err(e) = self.rebalance().await {
                break Err(e);
            }
            tokio::select! {
                _ = shutdown.changed() => {}
                () = tokio::time::sleep(self.config.check_interval) => {}
            }
        };
        let partitions: Vec<u32> = self.owned();
        for partition in partitions {
            self.stop(partition).await?;
        }
        outcome.map(|()| self.total)
    }

    /// One ownership pass: reap finished dispatchers, check the locks, move toward a
    /// fair share.
    async fn rebalance(&mut self) -> Result<()> {
        let finished: Vec<u32> = self
            .running
            .iter()
            .filter(|(_, r)| r.task.is_finished())
            .map(|(p, _)| *p)
            .collect();
        for partition in finished {
            // A dispatcher only ends early on an error: give the partition back so a
            // healthy instance (or this one, next pass) can take it.
            tracing::warn!(
                partition,
                "partition dispatcher ended; releasing the partition"
            );
            self.stop(partition).await?;
        }
        if !self.locks.still_held().await? {
            return Err(Error::new(
                ErrorKind::Storage,
                "partition locks lost (database session ended)",
            )
            .transient(None));
        }
        let partitions = self.locks.partitions();
        let live = self.locks.live_instances().await?.max(1);
        let fair = partitions.div_ceil(live) as usize;
        while self.running.len() > fair {
            let Some(&partition) = self.running.keys().next_back() else {
                break;
            };
            tracing::info!(partition, fair, "giving a partition back");
            self.stop(partition).await?;
        }
        for partition in 0..partitions {
            if self.running.len() >= fair {
                break;
            }
            if self.running.contains_key(&partition) || !self.locks.try_acquire(partition).await? {
                continue;
            }
            match self.start(partition).await {
                Ok(running) => {
                    tracing::info!(partition, "partition acquired");
                    self.running.insert(partition, running);
                }
                Err(e) => {
                    self.locks.release(partition).await?;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    async fn start(&self, partition: u32) -> Result<Running> {
        let (store, relay) = self.relays.open(partition).await?;
        let dispatcher = Dispatcher::open(
            store,
            relay,
            Arc::clone(&self.ledger),
            self.config.dispatch.clone(),
        )
        .await?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(dispatcher.run(RunMode::Daemon, stopped));
        Ok(Running { stop, task })
    }

    /// Stops a partition's dispatcher (its round in flight finishes and is recorded),
    /// then releases the lock.
    async fn stop(&mut self, partition: u32) -> Result<()> {
        if let Some(running) = self.running.remove(&partition) {
            let _ = running.stop.send(true);
            match running.task.await {
                Ok(Ok(summary)) => self.total += summary,
                Ok(Err(e)) => tracing::error!(partition, error = %e, "partition dispatcher failed"),
                Err(e) => tracing::error!(partition, error = %e, "partition dispatcher panicked"),
            }
        }
        self.locks.release(partition).await
    }
}
