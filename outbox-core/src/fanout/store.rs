//! `FanoutStore`: the durable log the webhook intake appends to and the fan-out loop
//! reads, with one cursor per transport kept apart from the (immutable) messages, and
//! the dead letters each destination refused.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::FanoutMessage;
use super::dead_letter::{
    DeadLetter, DeadLetterAccount, DeadLetterQuery, DeadLetterReason, NewDeadLetter, ReplayRequest,
    replay_progress_key,
};
use crate::domain::Account;
use crate::error::Result;

/// A message as the fan-out store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Strictly increasing in commit order; may have gaps.
    pub position: u64,
    /// The message, as appended.
    pub message: FanoutMessage,
    /// When the store appended it (from a webhook, or from catch-up).
    pub received_at: DateTime<Utc>,
}

/// What an `append` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppendOutcome {
    /// Messages newly stored.
    pub stored: usize,
    /// Messages already stored under their dedup key (a ledger replay's re-emit).
    pub duplicates: usize,
    /// The webhook id had been appended before (a retried delivery): nothing was stored.
    pub delivery_seen: bool,
}

/// The fan-out log.
///
/// # Contract
/// - `append` is atomic and durable when it returns `Ok`: either the delivery id and
///   every new message are stored, or nothing is. It dedupes on the delivery id
///   (the one the intake's webhook decoder returned) and on each message's
///   [`FanoutMessage::dedup_key`].
///   Stored messages are never updated or deleted.
/// - Positions are assigned so that a reader never sees position `p` committed after
///   it has read a higher one: `read_after(cursor)` must not skip a late commit.
/// - `read_after` returns messages with `position > after`, ascending, at most `limit`.
/// - Per account, position order is append order: the store keeps the order the
///   messages reached it and never sorts them by sequence. That is the account's
///   sequence order as long as the ledger's webhooks arrive in order; a late one (a
///   retried delivery, a message catch-up found missing) is stored after later
///   sequences, and the consumer's inbox holds those until it arrives
///   ([`crate::InboxEngine`]).
/// - Cursors are per transport name; `load_cursor` is 0 when none was saved. A name is
///   one destination: the store cannot tell apart two destinations given one name
///   (they would move one forward-only cursor, and the slower would lose what the
///   faster confirmed), so [`super::Publisher::name`] must be unique among the
///   destinations of one store, and whoever runs several loops on a store checks it
///   (`outbox fanout` refuses two `--to` with one identity). They
///   follow the relay-side cursor rule ([`crate::Store`], "Cursors") with `u64`
///   positions: monotonic (a save at or below the saved value succeeds and changes
///   nothing), durable when `save_cursor` returns, independent per name. The fan-out
///   runs no fleet, so no save is fenced. The replay progress and the ledger-log
///   checkpoint are cursors too and follow the same rule.
/// - A store that cannot be reached fails with a transient error, so the intake
///   answers 5xx and the ledger retries.
/// - Dead letters ([`super::dead_letter`]) and replay requests are append-only, like
///   the messages (the database refuses UPDATE and DELETE); their ids increase in
///   append order. `append_dead_letters` is atomic: all of its records or none.
/// - `read_set_aside` returns the stored messages that have a dead letter of that
///   destination and account, each once, ascending by position.
/// - `request_replay` records the account's latest refusal (the highest id of its
///   `Refused` dead letters at that destination) in the same statement that appends
///   the request, and fails with `NotFound` naming the account when there is none.
#[async_trait]
pub trait FanoutStore: Send + Sync + 'static {
    /// Stores the messages of one delivery (a webhook's delivery id, or
    /// `ledger-log:<ledger>:<log id>` for catch-up) atomically, deduplicated on the
    /// delivery id and on each message's dedup key.
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome>;

    /// Up to `limit` stored messages with a position above `after`, ascending (0: from
    /// the first).
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>>;

    /// The saved position of cursor `transport` (a destination's identity, a replay
    /// progress or the ledger-log checkpoint); 0 before its first save.
    async fn load_cursor(&self, transport: &str) -> Result<u64>;

    /// Saves `position` as cursor `transport`: only forward (an equal or lower value
    /// succeeds and changes nothing), durable on return.
    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()>;

    /// Appends dead letters in one transaction, in order; returns their ids.
    async fn append_dead_letters(&self, letters: &[NewDeadLetter]) -> Result<Vec<u64>>;

    /// Dead letters matching `query`, ascending by id.
    async fn read_dead_letters(&self, query: &DeadLetterQuery<'_>) -> Result<Vec<DeadLetter>>;

    /// The messages dead-lettered for `account` at `destination` with a position
    /// above `after`, ascending, at most `limit`.
    async fn read_set_aside(
        &self,
        destination: &str,
        account: &Account,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>>;

    /// Asks the running fan-out loop of `destination` to re-publish `account`'s dead
    /// letters.
    ///
    /// # Errors
    /// `NotFound` when the account has no refused message at that destination.
    async fn request_replay(&self, destination: &str, account: &Account) -> Result<ReplayRequest>;

    /// Replay requests of `destination` with an id above `after`, ascending.
    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> Result<Vec<ReplayRequest>>;

    /// The highest position a replay of `account` at `destination` re-published
    /// (kept as a cursor named [`replay_progress_key`] unless the store says otherwise).
    async fn load_replay_progress(&self, destination: &str, account: &Account) -> Result<u64> {
        self.load_cursor(&replay_progress_key(destination, account))
            .await
    }

    /// Moves that position forward (a lower value is ignored).
    async fn save_replay_progress(
        &self,
        destination: &str,
        account: &Account,
        position: u64,
    ) -> Result<()> {
        self.save_cursor(&replay_progress_key(destination, account), position)
            .await
    }

    /// Every account with dead letters at `destination` and where it stands, by
    /// account. The default reads the whole record; a store may answer it in one query.
    async fn dead_letter_accounts(&self, destination: &str) -> Result<Vec<DeadLetterAccount>> {
        let mut accounts: BTreeMap<String, DeadLetterAccount> = BTreeMap::new();
        let mut after_id = 0;
        loop {
            let page = self
                .read_dead_letters(&DeadLetterQuery {
                    destination: Some(destination),
                    after_id,
                    ..DeadLetterQuery::default()
                })
                .await?;
            let Some(last) = page.last() else { break };
            after_id = last.id;
            for letter in page {
                let entry = accounts
                    .entry(letter.account.as_str().to_owned())
                    .or_insert_with(|| DeadLetterAccount {
                        account: letter.account.clone(),
                        refusal_id: 0,
                        refused_sequence: 0,
                        refused_position: 0,
                        last_position: 0,
                        replayed_through: 0,
                        released: false,
                        records: 0,
                    });
                entry.records += 1;
                entry.last_position = entry.last_position.max(letter.position);
                if letter.reason == DeadLetterReason::Refused {
                    entry.refusal_id = letter.id;
                    entry.refused_sequence = letter.sequence;
                    entry.refused_position = letter.position;
                }
            }
        }
        let mut released: HashMap<String, u64> = HashMap::new();
        for request in self.read_replay_requests(destination, 0).await? {
            let covered = released
                .entry(request.account.as_str().to_owned())
                .or_default();
            *covered = (*covered).max(request.refusal_id);
        }
        let mut out = Vec::with_capacity(accounts.len());
        for (name, mut account) in accounts {
            account.released = released
                .get(&name)
                .is_some_and(|covered| *covered >= account.refusal_id);
            account.replayed_through = self
                .load_replay_progress(destination, &account.account)
                .await?;
            out.push(account);
        }
        Ok(out)
    }
}

// Every method forwarded, defaults too: a wrapped store's own answers must not be
// replaced by the trait's defaults.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<T: FanoutStore + ?Sized> FanoutStore for std::sync::Arc<T> {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        (**self).append(delivery_id, messages).await
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        (**self).read_after(after, limit).await
    }

    async fn load_cursor(&self, transport: &str) -> Result<u64> {
        (**self).load_cursor(transport).await
    }

    async fn save_cursor(&self, transport: &str, position: u64) -> Result<()> {
        (**self).save_cursor(transport, position).await
    }

    async fn append_dead_letters(&self, letters: &[NewDeadLetter]) -> Result<Vec<u64>> {
        (**self).append_dead_letters(letters).await
    }

    async fn read_dead_letters(&self, query: &DeadLetterQuery<'_>) -> Result<Vec<DeadLetter>> {
        (**self).read_dead_letters(query).await
    }

    async fn read_set_aside(
        &self,
        destination: &str,
        account: &Account,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        (**self)
            .read_set_aside(destination, account, after, limit)
            .await
    }

    async fn request_replay(&self, destination: &str, account: &Account) -> Result<ReplayRequest> {
        (**self).request_replay(destination, account).await
    }

    async fn read_replay_requests(
        &self,
        destination: &str,
        after: u64,
    ) -> Result<Vec<ReplayRequest>> {
        (**self).read_replay_requests(destination, after).await
    }

    async fn load_replay_progress(&self, destination: &str, account: &Account) -> Result<u64> {
        (**self).load_replay_progress(destination, account).await
    }

    async fn save_replay_progress(
        &self,
        destination: &str,
        account: &Account,
        position: u64,
    ) -> Result<()> {
        (**self)
            .save_replay_progress(destination, account, position)
            .await
    }

    async fn dead_letter_accounts(&self, destination: &str) -> Result<Vec<DeadLetterAccount>> {
        (**self).dead_letter_accounts(destination).await
    }
}
