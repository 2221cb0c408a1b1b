//! Hop 2 test parts: a probe consumer on the real SQLite inbox and a fresh SQLite
//! fan-out store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox_bins::consumer::TreasuryConsumer;
use outbox_core::{AppendOutcome, FanoutMessage, FanoutStore, MessageSink, Result, StoredMessage};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore};
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

/// A SQLite fan-out store in a directory that goes when the store does.
struct TempFanoutStore {
    store: SqliteFanoutStore,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl FanoutStore for TempFanoutStore {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        self.store.append(delivery_id, messages).await
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        self.store.read_after(after, limit).await
    }

    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        self.store.load_cursor(transport).await
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        self.store.save_cursor(transport, position).await
    }

    async fn append_dead_letters(
        &self,
        letters: &[outbox_core::NewDeadLetter],
    ) -> outbox_core::Result<Vec<u64>> {
        self.store.append_dead_letters(letters).await
    }

    async fn read_dead_letters(
        &self,
        query: &outbox_core::DeadLetterQuery<'_>,
    ) -> outbox_core::Result<Vec<outbox_core::DeadLetter>> {
        self.store.read_dead_letters(query).await
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &outbox_core::Account,
        after: u64,
        limit: usize,
    ) -> outbox_core::Result<Vec<StoredMessage>> {
        self.store
            .read_set_aside(destination, account, after, limit)
            .await
    }

    async fn request_replay(
        &self,
        destination: &str,
        account: &outbox_core::Account,
    ) -> outbox_core::Result<outbox_core::ReplayRequest> {
        self.store.request_replay(destination, account).await
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> outbox_core::Result<Vec<outbox_core::ReplayRequest>> {
        self.store.read_replay_requests(destination, after).await
    }
}

/// A fresh SQLite fan-out store in its own directory.
pub async fn sqlite_fanout_store() -> Arc<dyn FanoutStore> {
    let dir = tempfile::tempdir().unwrap();
    let config = SqliteConfig::new(dir.path().join("fanout.db"));
    let store = SqliteFanoutStore::open(config).await.unwrap();
    Arc::new(TempFanoutStore { store, _dir: dir })
}
