//! The ledger's books: transactions, balances, account metadata and the kept
//! idempotency keys. Plain data and synchronous rules; `MemoryLedger` holds them
//! behind a lock and adds faults.
//!
//! Keys are kept as Formance keeps them (docs/LEDGER.md#idempotency-keys): one key
//! space for creates, reverts and account metadata; the same key with the same request
//! is a replay of the stored answer, with another request a permanent mismatch; a key
//! is kept only for a write that succeeded (a refusal keeps none, so a refused body
//! is evaluated again when re-sent), and never expires.

use std::collections::{BTreeMap, HashMap};

use chrono::Utc;
use outbox_core::{
    Account, Asset, Balances, Error, ErrorKind, EventId, LedgerTransaction, Metadata,
    OUTBOX_EVENT_ID_KEY, PostBody, PostCommand, PostOutcome, Posting, Result,
};
use serde_json::Value;

use crate::pattern;

/// A source other than `world` without the funds.
pub const INSUFFICIENT_FUND: &str = "INSUFFICIENT_FUND";
/// A second revert of one transaction.
pub const ALREADY_REVERT: &str = "ALREADY_REVERT";
/// A body with neither postings nor a script.
pub const NO_POSTINGS: &str = "NO_POSTINGS";
/// A reference another transaction holds.
pub const CONFLICT: &str = "CONFLICT";
/// A Numscript body: this ledger moves postings only.
pub const SCRIPT_UNSUPPORTED: &str = "SCRIPT_UNSUPPORTED";

/// The metadata key a reversing transaction carries: the id it reverts.
pub const REVERTS_KEY: &str = "reverts";

/// What a key was used for: a repeat must be the same request to be a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    /// The parsed body, so whitespace and key order do not matter (as Formance
    /// hashes the parsed command).
    Create(Value),
    Revert {
        transaction_id: u64,
        metadata: Metadata,
    },
    AccountMetadata {
        account: Account,
        metadata: Metadata,
    },
}

#[derive(Debug, Clone)]
struct Kept {
    request: Request,
    /// The transaction the write created; `None` for account metadata.
    transaction_id: Option<u64>,
}

/// Everything the ledger holds. `Clone` so an ordered run can be undone whole.
#[derive(Debug, Clone, Default)]
pub struct Books {
    /// Transaction `id` at index `id - 1`: ids count from 1 without gaps.
    transactions: Vec<LedgerTransaction>,
    /// Balances of every account and asset that ever moved (a zero stays a zero).
    balances: BTreeMap<Account, BTreeMap<Asset, i128>>,
    account_metadata: BTreeMap<Account, Metadata>,
    keys: HashMap<String, Kept>,
}

fn rejected(code: &str, message: impl Into<String>) -> PostOutcome {
    PostOutcome::Rejected {
        code: code.to_owned(),
        message: message.into(),
    }
}

fn malformed(e: serde_json::Error) -> Error {
    Error::new(
        ErrorKind::Ledger,
        format!("the body is not a transaction request: {e}"),
    )
    .with_code("VALIDATION")
}

impl Books {
    /// The kept answer for `key` when `request` repeats it; a mismatch error when
    /// the key was used for another request.
    fn kept(&self, key: &str, request: &Request) -> Result<Option<&Kept>> {
        match self.keys.get(key) {
            None => Ok(None),
            Some(kept) if kept.request == *request => Ok(Some(kept)),
            Some(_) => Err(Error::new(
                ErrorKind::IdempotencyMismatch,
                format!("idempotency key {key} was used for another request"),
            )
            .with("idempotency_key", key)),
        }
    }

    fn keep(&mut self, key: String, request: Request, transaction_id: Option<u64>) {
        self.keys.insert(
            key,
            Kept {
                request,
                transaction_id,
            },
        );
    }

    fn replayed(kept: &Kept) -> PostOutcome {
        PostOutcome::Replayed {
            transaction_id: kept.transaction_id.unwrap_or_default(),
        }
    }

    fn balance(&self, account: &Account, asset: &Asset) -> i128 {
        self.balances
            .get(account)
            .and_then(|assets| assets.get(asset))
            .copied()
            .unwrap_or(0)
    }

    /// The refusal of `postings` when one, applied in order, would overdraw a source
    /// other than `world`.
    fn overdraft(&self, postings: &[Posting]) -> Option<PostOutcome> {
        let mut moved: BTreeMap<(&Account, &Asset), i128> = BTreeMap::new();
        for posting in postings {
            let amount = i128::from(posting.amount.minor_units());
            let source = (&posting.source, &posting.asset);
            let available = self.balance(source.0, source.1) + moved.get(&source).unwrap_or(&0);
            if !posting.source.is_world() && available < amount {
                return Some(rejected(
                    INSUFFICIENT_FUND,
                    format!(
                        "account {} has {available} {} and cannot send {amount}",
                        posting.source, posting.asset
                    ),
                ));
            }
            *moved.entry(source).or_default() -= amount;
            *moved
                .entry((&posting.destination, &posting.asset))
                .or_default() += amount;
        }
        None
    }

    fn commit(
        &mut self,
        postings: Vec<Posting>,
        reference: Option<String>,
        metadata: Metadata,
    ) -> u64 {
        for posting in &postings {
            let amount = i128::from(posting.amount.minor_units());
            *self
                .balances
                .entry(posting.source.clone())
                .or_default()
                .entry(posting.asset.clone())
                .or_default() -= amount;
            *self
                .balances
                .entry(posting.destination.clone())
                .or_default()
                .entry(posting.asset.clone())
                .or_default() += amount;
        }
        let id = self.transactions.len() as u64 + 1;
        let now = Utc::now();
        self.transactions.push(LedgerTransaction {
            id,
            postings,
            reference,
            metadata,
            reverted: false,
            timestamp: Some(now),
            inserted_at: Some(now),
        });
        id
    }

    /// Creates a transaction from a stored `TransactionRequest` body under `key`.
    pub fn create(&mut self, key: EventId, body: &[u8]) -> Result<PostOutcome> {
        let key = key.to_string();
        let parsed: Value = serde_json::from_slice(body).map_err(malformed)?;
        let request = Request::Create(parsed.clone());
        if let Some(kept) = self.kept(&key, &request)? {
            return Ok(Self::replayed(kept));
        }
        if parsed.get("postings").is_none() && parsed.get("script").is_none() {
            return Ok(rejected(
                NO_POSTINGS,
                "the body has neither postings nor a script",
            ));
        }
        let command: PostCommand = serde_json::from_value(parsed).map_err(malformed)?;
        let postings = match command.body {
            PostBody::Postings(postings) if postings.is_empty() => {
                return Ok(rejected(NO_POSTINGS, "the body has no postings"));
            }
            PostBody::Postings(postings) => postings,
            PostBody::Script(_) => {
                return Ok(rejected(
                    SCRIPT_UNSUPPORTED,
                    "this ledger moves postings only, it runs no Numscript",
                ));
            }
        };
        if let Some(reference) = &command.reference
            && let Some(holder) = self
                .transactions
                .iter()
                .find(|tx| tx.reference.as_ref() == Some(reference))
        {
            return Ok(rejected(
                CONFLICT,
                format!("reference {reference} is held by transaction {}", holder.id),
            ));
        }
        if let Some(refusal) = self.overdraft(&postings) {
            return Ok(refusal);
        }
        let id = self.commit(postings, command.reference, command.metadata);
        self.keep(key, request, Some(id));
        Ok(PostOutcome::Accepted { transaction_id: id })
    }

    /// Reverts transaction `transaction_id` with a new one, its postings swapped and
    /// in reverse order.
    pub fn revert(
        &mut self,
        key: EventId,
        transaction_id: u64,
        metadata: &Metadata,
    ) -> Result<PostOutcome> {
        let key = key.to_string();
        let request = Request::Revert {
            transaction_id,
            metadata: metadata.clone(),
        };
        if let Some(kept) = self.kept(&key, &request)? {
            return Ok(Self::replayed(kept));
        }
        let index = usize::try_from(transaction_id)
            .ok()
            .and_then(|id| id.checked_sub(1))
            .filter(|index| *index < self.transactions.len())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no transaction {transaction_id} to revert"),
                )
                .with("transaction_id", transaction_id)
            })?;
        let target = &self.transactions[index];
        if target.reverted {
            return Ok(rejected(
                ALREADY_REVERT,
                format!("transaction {transaction_id} is already reverted"),
            ));
        }
        let postings: Vec<Posting> = target
            .postings
            .iter()
            .rev()
            .map(|p| Posting {
                source: p.destination.clone(),
                destination: p.source.clone(),
                amount: p.amount,
                asset: p.asset.clone(),
            })
            .collect();
        if let Some(refusal) = self.overdraft(&postings) {
            return Ok(refusal);
        }
        let mut metadata = metadata.clone();
        metadata.insert(REVERTS_KEY.to_owned(), transaction_id.to_string());
        let id = self.commit(postings, None, metadata);
        self.transactions[index].reverted = true;
        self.keep(key, request, Some(id));
        Ok(PostOutcome::Accepted { transaction_id: id })
    }

    /// Merges `metadata` into `account`'s under `key`.
    pub fn save_account_metadata(
        &mut self,
        key: &str,
        account: &Account,
        metadata: &Metadata,
    ) -> Result<()> {
        let request = Request::AccountMetadata {
            account: account.clone(),
            metadata: metadata.clone(),
        };
        if self.kept(key, &request)?.is_some() {
            return Ok(());
        }
        self.account_metadata
            .entry(account.clone())
            .or_default()
            .extend(metadata.clone());
        self.keep(key.to_owned(), request, None);
        Ok(())
    }

    /// `account`'s metadata value under `key`.
    pub fn account_metadata(&self, account: &Account, key: &str) -> Option<String> {
        self.account_metadata.get(account)?.get(key).cloned()
    }

    /// The transaction carrying `outbox_event_id = event_id`; an error when several do
    /// (exactly-once broke: the caller must not pick one).
    pub fn by_event_id(&self, event_id: EventId) -> Result<Option<LedgerTransaction>> {
        let event_id = event_id.to_string();
        let mut carrying = self
            .transactions
            .iter()
            .filter(|tx| tx.metadata.get(OUTBOX_EVENT_ID_KEY) == Some(&event_id));
        let first = carrying.next().cloned();
        if carrying.next().is_some() {
            return Err(Error::new(
                ErrorKind::Ledger,
                format!("several transactions carry event {event_id}"),
            ));
        }
        Ok(first)
    }

    /// The sum per asset over the accounts `address` matches; empty when none moved.
    pub fn aggregate(&self, address: &str) -> Balances {
        let mut sum = Balances::new();
        for (account, assets) in &self.balances {
            if pattern::matches(address, account.as_str()) {
                for (asset, amount) in assets {
                    *sum.entry(asset.clone()).or_default() += amount;
                }
            }
        }
        sum
    }

    /// Up to `limit` transactions above `after`, ascending.
    pub fn after(&self, after: Option<u64>, limit: usize) -> Vec<LedgerTransaction> {
        let skip = usize::try_from(after.unwrap_or(0)).unwrap_or(usize::MAX);
        self.transactions
            .iter()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect()
    }
}
