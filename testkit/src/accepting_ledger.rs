//! `AcceptingLedger`: an in-process `Ledger` that accepts every post once and answers
//! a repeated key as a replay, for store cases that run the real dispatcher without a
//! ledger server. It refuses nothing and keeps no balances.

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;
use outbox_core::{
    Account, Balances, EventId, Ledger, LedgerCapabilities, LedgerTransaction, Metadata,
    PostOutcome, Result,
};

/// See the module docs.
#[derive(Debug, Default)]
pub struct AcceptingLedger {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    keys: HashSet<EventId>,
    posts: Vec<EventId>,
}

impl AcceptingLedger {
    /// Every post's key, in arrival order, replays included.
    pub fn posts(&self) -> Vec<EventId> {
        self.state.lock().expect("ledger state").posts.clone()
    }

    fn answer(&self, key: EventId) -> PostOutcome {
        let mut state = self.state.lock().expect("ledger state");
        state.posts.push(key);
        let transaction_id = state.keys.len() as u64;
        if state.keys.insert(key) {
            PostOutcome::Accepted { transaction_id }
        } else {
            PostOutcome::Replayed { transaction_id }
        }
    }
}

#[async_trait]
impl Ledger for AcceptingLedger {
    fn capabilities(&self) -> LedgerCapabilities {
        LedgerCapabilities::new(0)
    }

    async fn post(&self, key: EventId, _body: &[u8]) -> Result<PostOutcome> {
        Ok(self.answer(key))
    }

    async fn revert(
        &self,
        key: EventId,
        _transaction_id: u64,
        _metadata: &Metadata,
    ) -> Result<PostOutcome> {
        Ok(self.answer(key))
    }

    async fn transaction_by_event_id(
        &self,
        _event_id: EventId,
    ) -> Result<Option<LedgerTransaction>> {
        Ok(None)
    }

    async fn save_account_metadata(
        &self,
        _key: &str,
        _account: &Account,
        _metadata: &Metadata,
    ) -> Result<()> {
        Ok(())
    }

    async fn rejection_notice(
        &self,
        _account: &Account,
        _event_id: EventId,
    ) -> Result<Option<String>> {
        Ok(None)
    }

    async fn aggregate_balances(&self, _address: &str) -> Result<Balances> {
        Ok(Balances::new())
    }
}
