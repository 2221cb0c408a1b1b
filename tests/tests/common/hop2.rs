//! Hop 2 test parts: a probe on the reference treasury consumer (SQLite inbox) and a
//! fresh SQLite fan-out store. The transport suite's own probe is testkit's
//! `SqliteProbe`; this one drives the binary's consumer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_bins::consumer::TreasuryConsumer;
use outbox_core::{FanoutMessage, MessageSink, Result};
use outbox_store_sqlite::SqliteConfig;
use outbox_testkit::ProbeConsumer;

/// The reference treasury consumer (SQLite inbox) that also remembers what it was handed.
pub struct Probe {
    treasury: TreasuryConsumer,
    received: Mutex<Vec<FanoutMessage>>,
    _dir: tempfile::TempDir,
}

impl Probe {
    pub async fn new() -> Arc<Self> {
        let dir = tempfile::tempdir().unwrap();
        let config = SqliteConfig::new(dir.path().join("consumer.db"));
        let treasury = TreasuryConsumer::open(config, "probe", Duration::from_secs(300))
            .await
            .unwrap();
        Arc::new(Self {
            treasury,
            received: Mutex::default(),
            _dir: dir,
        })
    }
}

#[async_trait]
impl MessageSink for Probe {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        self.received
            .lock()
            .unwrap()
            .extend(messages.iter().cloned());
        self.treasury.accept(delivery_id, messages).await
    }
}

impl ProbeConsumer for Probe {
    fn received(&self) -> Vec<FanoutMessage> {
        self.received.lock().unwrap().clone()
    }

    fn applied(&self) -> Vec<(String, u64, String)> {
        self.treasury
            .applied()
            .unwrap()
            .into_iter()
            .map(|(account, sequence, id, _)| (account, sequence, id))
            .collect()
    }

    fn balance(&self, account: &str, asset: &str) -> i64 {
        let balances = self.treasury.balances().unwrap();
        balances
            .get(&(account.to_owned(), asset.to_owned()))
            .copied()
            .unwrap_or(0)
    }
}

/// A fresh SQLite fan-out store in its own directory (the transport suite's default).
pub use outbox_testkit::sqlite_fanout_store;
