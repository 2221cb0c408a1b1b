//! Ownership and rebalancing of the fleet with in-memory locks.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::*;
use crate::dispatch::DispatchConfig;
use crate::error::Result;
use crate::relay::{PollingRelay, Relay};
use crate::store::Store;
use crate::testing::{FakeLedger, MemoryStore};

#[derive(Default)]
struct LockTable {
    owners: HashMap<u32, usize>,
    live: HashSet<usize>,
}

#[derive(Clone)]
struct FakeLocks {
    table: Arc<Mutex<LockTable>>,
    me: usize,
}

#[async_trait]
impl PartitionLocks for FakeLocks {
    fn partitions(&self) -> u32 {
        4
    }
    async fn live_instances(&self) -> Result<u32> {
        Ok(self.table.lock().unwrap().live.len() as u32)
    }
    async fn try_acquire(&self, partition: u32) -> Result<bool> {
        let mut t = self.table.lock().unwrap();
        Ok(*t.owners.entry(partition).or_insert(self.me) == self.me)
    }
    async fn release(&self, partition: u32) -> Result<()> {
        let mut t = self.table.lock().unwrap();
        if t.owners.get(&partition) == Some(&self.me) {
            t.owners.remove(&partition);
        }
        Ok(())
    }
    async fn still_held(&self) -> Result<bool> {
        Ok(self.table.lock().unwrap().live.contains(&self.me))
    }
}

struct Relays(MemoryStore);

#[async_trait]
impl PartitionRelays for Relays {
    async fn open(&self, partition: u32) -> Result<(Arc<dyn Store>, Box<dyn Relay>)> {
        let relay = PollingRelay::open(self.0.clone(), format!("relay:p{partition}"), None).await?;
        Ok((Arc::new(self.0.clone()), Box::new(relay)))
    }
}

fn owned_by(table: &Arc<Mutex<LockTable>>, who: usize) -> usize {
    table
        .lock()
        .unwrap()
        .owners
        .values()
        .filter(|o| **o == who)
        .count()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

fn fleet(table: &Arc<Mutex<LockTable>>, me: usize) -> Fleet {
    table.lock().unwrap().live.insert(me);
    let config = FleetConfig {
        check_interval: Duration::from_millis(10),
        dispatch: DispatchConfig {
            poll_interval: Duration::from_millis(10),
            ..DispatchConfig::default()
        },
    };
    Fleet::new(
        Arc::new(FakeLocks {
            table: table.clone(),
            me,
        }),
        Arc::new(Relays(MemoryStore::default())),
        Arc::new(FakeLedger::default()),
        config,
    )
}

#[tokio::test]
async fn partitions_are_shared_fairly_and_taken_over_when_an_instance_dies() {
    let table = Arc::new(Mutex::new(LockTable::default()));
    let (stop_a, stopped_a) = watch::channel(false);
    let a = tokio::spawn(fleet(&table, 1).run(stopped_a));
    until("A to own every partition", || owned_by(&table, 1) == 4).await;

    let (stop_b, stopped_b) = watch::channel(false);
    let b = tokio::spawn(fleet(&table, 2).run(stopped_b));
    until("A and B to hold two each", || {
        owned_by(&table, 1) == 2 && owned_by(&table, 2) == 2
    })
    .await;

    // A's database session ends: its locks vanish and it must stop.
    {
        let mut t = table.lock().unwrap();
        t.live.remove(&1);
        t.owners.retain(|_, owner| *owner != 1);
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), a)
        .await
        .unwrap()
        .unwrap();
    assert!(ended.is_err(), "A kept running without its locks");
    until("B to take over every partition", || {
        owned_by(&table, 2) == 4
    })
    .await;

    stop_b.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        owned_by(&table, 2),
        0,
        "B did not release its partitions on shutdown"
    );
    drop(stop_a);
}
