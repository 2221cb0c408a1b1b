//! The `Ledger` trait: post with an idempotency key, revert, read back.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::{Account, Asset, EventId, Metadata, Posting};
use crate::error::Result;

/// The ledger's answer to a post or revert that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostOutcome {
    /// A new transaction was committed.
    Accepted {
        /// The ledger's id of the new transaction (for a revert, of the reversing
        /// one): a per-ledger counter from 1, which may have gaps.
        transaction_id: u64,
    },
    /// The key was seen before with the same body: the original transaction, nothing new.
    Replayed {
        /// The id of the transaction the first post created.
        transaction_id: u64,
    },
    /// A business refusal that no retry can change (INSUFFICIENT_FUND, …).
    Rejected {
        /// The ledger's `errorCode` (`INSUFFICIENT_FUND`, `ALREADY_REVERT`, …): it is
        /// recorded on the delivery and carried by the rejection notice.
        code: String,
        /// The ledger's `errorMessage`, for people.
        message: String,
    },
}

/// One element of a bulk post: the idempotency key and the exact stored body.
#[derive(Debug, Clone, Copy)]
pub struct BulkItem<'a> {
    /// The event id, sent as this element's idempotency key.
    pub key: EventId,
    /// The stored `TransactionRequest` bytes, sent unchanged (the ledger hashes them
    /// under the key).
    pub body: &'a [u8],
}

/// The ledger's answer to [`Ledger::post_run`], an ordered all-or-nothing post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every element committed, in order: the transaction id of each, in item order.
    /// A replayed element reads the same as a new one (a bulk answer has no hit flag).
    Committed(Vec<u64>),
    /// Nothing committed: element `index` failed (refused, or an error of its own) and
    /// the ledger rolled the whole run back with it.
    RolledBack {
        /// The first element that failed.
        index: usize,
        /// The ledger's code and message for it, for the log.
        reason: String,
    },
}

/// A transaction as read back from the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerTransaction {
    /// The ledger's transaction id.
    pub id: u64,
    /// Its movements, amounts in minor units.
    pub postings: Vec<Posting>,
    /// Its reference; `None` when it was posted without one.
    pub reference: Option<String>,
    /// Its metadata, the outbox identity (`outbox_event_id`, `outbox_account`,
    /// `outbox_sequence`) included.
    pub metadata: Metadata,
    /// Whether a later transaction has reverted it.
    pub reverted: bool,
    /// Its effective date (the ledger's `timestamp`, which a poster may set in the
    /// past); `None` when the adapter does not read it.
    pub timestamp: Option<DateTime<Utc>>,
    /// When the ledger inserted it (`insertedAt`); `None` when the adapter does not
    /// read it.
    pub inserted_at: Option<DateTime<Utc>>,
}

/// Which date places a move before or after a point in time, for
/// [`Ledger::aggregate_balances_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BalanceDate {
    /// The transaction's effective date (`timestamp`), which a poster may backdate.
    Effective,
    /// When the ledger inserted the transaction (Formance `useInsertionDate=true`):
    /// a transaction posted later with a past timestamp is not in a past answer.
    Insertion,
}

/// Sum of balances per asset; signed, since sources such as `world` go negative.
pub type Balances = BTreeMap<Asset, i128>;

/// What a ledger adapter supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LedgerCapabilities {
    /// Most elements one bulk call takes; 0 or 1 means no bulk.
    pub max_bulk: usize,
    /// Whether [`Ledger::post_run`] posts several events of one account in one
    /// ordered, atomic call (up to `max_bulk` of them).
    pub ordered_runs: bool,
}

impl LedgerCapabilities {
    /// Capabilities of an adapter that takes at most `max_bulk` elements per bulk call
    /// (and has no ordered runs).
    pub const fn new(max_bulk: usize) -> Self {
        Self {
            max_bulk,
            ordered_runs: false,
        }
    }

    /// The same, with [`Ledger::post_run`] implemented.
    #[must_use]
    pub const fn with_ordered_runs(self) -> Self {
        Self {
            ordered_runs: true,
            ..self
        }
    }
}

/// A core ledger (Formance v2 or compatible).
///
/// # Contract
/// - `post` sends `body` byte-for-byte with `Idempotency-Key = key`. A repeat with the
///   same key and body answers [`PostOutcome::Replayed`] with the original id and
///   creates nothing; the same key with another body is an
///   [`crate::ErrorKind::IdempotencyMismatch`] error, permanent and never retried.
/// - A business refusal is `Ok(Rejected)`; a failure that may pass is an error with
///   [`crate::Retry::Transient`] (5xx, 408, 429, connect errors, timeouts), honouring
///   `Retry-After`. Every other error is permanent.
/// - A refusal is not idempotent: the ledger keeps the key only for a write that
///   succeeded, so re-sending a refused body evaluates it again.
/// - `post_bulk` answers one result per item, in order. Items are independent: the
///   caller puts at most one event per account in a call (the relay sends the head
///   of each account), so one item's refusal or failure must not stop the others.
/// - `post_run` (only when `capabilities().ordered_runs`) posts consecutive events of
///   one account in item order, all or nothing: either every item commits, in order,
///   or none does. An error means the outcome is unknown — every item may have
///   committed (an answer lost after commit), never only some of them. The relay uses
///   it for an account with many events waiting (a hot account), so they cost one
///   round trip instead of one each (docs/ARCHITECTURE.md#hot-accounts).
#[async_trait]
pub trait Ledger: Send + Sync + 'static {
    /// What this adapter supports; the dispatcher caps its bulk size by it.
    fn capabilities(&self) -> LedgerCapabilities;

    /// Creates a transaction from a stored `TransactionRequest` body.
    async fn post(&self, key: EventId, body: &[u8]) -> Result<PostOutcome>;

    /// Posts several bodies in one call, each with its own key.
    async fn post_bulk(&self, items: &[BulkItem<'_>]) -> Result<Vec<Result<PostOutcome>>> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(self.post(item.key, item.body).await);
        }
        Ok(out)
    }

    /// Posts `items`, consecutive events of one account, in order and atomically; see
    /// the contract above.
    ///
    /// # Errors
    /// `Unsupported` (the default) from an adapter without ordered runs; otherwise an
    /// error leaves the run's outcome unknown (all or nothing).
    async fn post_run(&self, items: &[BulkItem<'_>]) -> Result<RunOutcome> {
        let _ = items;
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            "this ledger adapter cannot post an ordered run",
        ))
    }

    /// Reverts transaction `transaction_id`, with its own key and metadata.
    async fn revert(
        &self,
        key: EventId,
        transaction_id: u64,
        metadata: &Metadata,
    ) -> Result<PostOutcome>;

    /// The transaction whose metadata carries `outbox_event_id = event_id`.
    async fn transaction_by_event_id(&self, event_id: EventId)
    -> Result<Option<LedgerTransaction>>;

    /// Writes account metadata under idempotency key `key`.
    async fn save_account_metadata(
        &self,
        key: &str,
        account: &Account,
        metadata: &Metadata,
    ) -> Result<()>;

    /// The code of the rejection notice the relay wrote for `event_id` on `account`
    /// (the per-event marker of [`crate::dispatch::notice`]), or `None` when there is
    /// none. Asked before re-sending an event whose outcome a crash left unknown: a
    /// refusal is not idempotent in the ledger (a re-send is evaluated again and may
    /// now commit), so a refusal Hop 2 has already announced must not be re-posted.
    async fn rejection_notice(
        &self,
        account: &Account,
        event_id: EventId,
    ) -> Result<Option<String>>;

    /// Aggregate balances per asset over the accounts matching `address` (Formance `$match`).
    async fn aggregate_balances(&self, address: &str) -> Result<Balances>;

    /// Aggregate balances per asset over the accounts matching `address`, counting
    /// only the moves dated at or before `at` by `date`. An address with no moves by
    /// then answers an empty map; callers must not read that as zero balances.
    ///
    /// # Errors
    /// `Unsupported` (the default) from an adapter that cannot answer at a point in
    /// time; the ledger's own refusal (a Formance ledger without the moves-history
    /// feature answers 400) as a permanent `Ledger` error.
    async fn aggregate_balances_at(
        &self,
        address: &str,
        at: DateTime<Utc>,
        date: BalanceDate,
    ) -> Result<Balances> {
        let _ = (address, at, date);
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            "this ledger adapter cannot read balances at a point in time",
        ))
    }

    /// Up to `limit` transactions with an id above `after` (from the first when
    /// `None`), in ascending id order, whether or not they carry outbox metadata.
    /// Reconciliation pages through the whole ledger with it, so an adapter should
    /// answer a page in one request.
    ///
    /// # Errors
    /// `Unsupported` (the default) from an adapter that cannot list.
    async fn transactions_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<LedgerTransaction>> {
        let _ = (after, limit);
        Err(crate::Error::new(
            crate::ErrorKind::Unsupported,
            "this ledger adapter cannot list transactions",
        ))
    }
}
