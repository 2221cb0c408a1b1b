//! What the ledger is asked to do: post (postings or Numscript) or revert.
//!
//! The serde shape of [`PostCommand`] is Formance v2's `TransactionRequest`, so the
//! stored payload is byte-for-byte the body the relay sends.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Account, Amount, Asset, EventId};
use crate::error::{Error, Result};

/// Ledger metadata: string keys to string values, sorted so encoding is deterministic.
pub type Metadata = BTreeMap<String, String>;

static VAR_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z_][a-z0-9_]*$").expect("static regex"));

/// One movement of `amount` of `asset` from `source` to `destination`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posting {
    /// The account debited. Only `world` may go negative; any other source without
    /// the funds makes the ledger refuse the transaction (`INSUFFICIENT_FUND`).
    pub source: Account,
    /// The account credited.
    pub destination: Account,
    /// How much moves, in the asset's minor units (`48500000` of `USD/2` is
    /// $485,000.00).
    pub amount: Amount,
    /// The asset, with its scale (`USD/2`).
    pub asset: Asset,
}

/// A Numscript program and its variables (values as strings: `"USD/2 100"`, `"merchants:1"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Script {
    /// The Numscript program text, sent as is; variables are referenced as `$name`.
    pub plain: String,
    /// The program's variables by name, without the `$` (`[a-z_][a-z0-9_]*`).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

/// The body of a post: exactly one of postings or a script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PostBody {
    /// Fixed movements, at least one, committed together in one transaction.
    Postings(Vec<Posting>),
    /// A Numscript program the ledger runs to compute the movements.
    Script(Script),
}

/// A new ledger transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostCommand {
    /// What moves: postings or a Numscript program.
    #[serde(flatten)]
    pub body: PostBody,
    /// The payout reference (`payout:settlement-2026-10-07:4471`), unique per ledger:
    /// another transaction with the same reference is refused with a 409
    /// (docs/LEDGER.md#references-and-the-409). `None`: no reference; never empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The transaction's metadata (`event_type`, `payout_id`, …). The `outbox_*` keys
    /// are reserved: the outbox adds them at enqueue.
    #[serde(default)]
    pub metadata: Metadata,
}

/// Reverts the ledger transaction that carries `event_id` as its outbox event id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevertCommand {
    /// The outbox event id of the payout to revert: an event enqueued earlier on the
    /// same account. The relay resolves it to the ledger transaction id once that
    /// event has a terminal outcome, and waits until then.
    pub event_id: EventId,
    /// Metadata of the reversing transaction; the `outbox_*` keys are reserved as for
    /// a post.
    #[serde(default)]
    pub metadata: Metadata,
}

/// What one outbox event asks of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerCommand {
    /// Create a new transaction (`POST /v2/{ledger}/transactions`).
    Post(PostCommand),
    /// Revert the transaction an earlier event posted
    /// (`POST /v2/{ledger}/transactions/{id}/revert`).
    Revert(RevertCommand),
}

impl LedgerCommand {
    /// Checks what the types alone cannot; every error names its field.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Post(post) => post.validate(),
            Self::Revert(revert) => validate_metadata(&revert.metadata),
        }
    }

    /// The command's own metadata: the transaction's for a post, the reversing
    /// transaction's for a revert.
    pub fn metadata(&self) -> &Metadata {
        match self {
            Self::Post(post) => &post.metadata,
            Self::Revert(revert) => &revert.metadata,
        }
    }

    pub(crate) fn metadata_mut(&mut self) -> &mut Metadata {
        match self {
            Self::Post(post) => &mut post.metadata,
            Self::Revert(revert) => &mut revert.metadata,
        }
    }
}

impl PostCommand {
    fn validate(&self) -> Result<()> {
        match &self.body {
            PostBody::Postings(postings) if postings.is_empty() => {
                return Err(Error::invalid(
                    "postings",
                    "at least one posting is required",
                ));
            }
            PostBody::Postings(_) => {}
            PostBody::Script(script) => {
                if script.plain.trim().is_empty() {
                    return Err(Error::invalid("script", "the Numscript program is empty"));
                }
                if let Some(name) = script.vars.keys().find(|name| !VAR_NAME.is_match(name)) {
                    return Err(Error::invalid(
                        format!("vars.{name}"),
                        "a Numscript variable name is [a-z_][a-z0-9_]* (without the $)",
                    ));
                }
            }
        }
        if let Some(reference) = &self.reference
            && reference.trim().is_empty()
        {
            return Err(Error::invalid(
                "reference",
                "must not be empty when present",
            ));
        }
        validate_metadata(&self.metadata)
    }
}

fn validate_metadata(metadata: &Metadata) -> Result<()> {
    for key in metadata.keys() {
        if key.is_empty() {
            return Err(Error::invalid("metadata", "keys must not be empty"));
        }
        if super::payload::is_reserved_key(key) {
            return Err(Error::invalid(
                format!("metadata.{key}"),
                "this key is reserved: the outbox writes it from the event's own identity",
            ));
        }
    }
    // A caller's own trace keys are its trace context: well formed, or refused here.
    crate::trace::TraceContext::from_metadata(metadata).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posting() -> Posting {
        Posting {
            source: Account::parse("merchants:4471:available").unwrap(),
            destination: Account::parse("merchants:4471:payouts:pending").unwrap(),
            amount: Amount::new(48_500_000),
            asset: Asset::parse("USD/2").unwrap(),
        }
    }

    #[test]
    fn post_serialises_as_formance_transaction_request() {
        let cmd = PostCommand {
            body: PostBody::Postings(vec![posting()]),
            reference: Some("payout:settlement-2026-10-07:4471".into()),
            metadata: Metadata::from([("event_type".into(), "payout.requested".into())]),
        };
        let json = serde_json::to_string(&cmd).unwrap();
        assert_eq!(
            json,
            r#"{"postings":[{"source":"merchants:4471:available","destination":"merchants:4471:payouts:pending","amount":48500000,"asset":"USD/2"}],"reference":"payout:settlement-2026-10-07:4471","metadata":{"event_type":"payout.requested"}}"#
        );
        let back: PostCommand = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cmd);
    }

    #[test]
    fn validation_names_the_field() {
        let empty = LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![]),
            reference: None,
            metadata: Metadata::new(),
        });
        assert_eq!(empty.validate().unwrap_err().field(), Some("postings"));

        let reserved = LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![posting()]),
            reference: None,
            metadata: Metadata::from([("outbox_sequence".into(), "9".into())]),
        });
        assert_eq!(
            reserved.validate().unwrap_err().field(),
            Some("metadata.outbox_sequence")
        );

        let bad_var = LedgerCommand::Post(PostCommand {
            body: PostBody::Script(Script {
                plain: "send $amount (\n source = @world\n destination = @a\n)".into(),
                vars: BTreeMap::from([("Amount".into(), "USD/2 1".into())]),
            }),
            reference: None,
            metadata: Metadata::new(),
        });
        assert_eq!(bad_var.validate().unwrap_err().field(), Some("vars.Amount"));
    }
}
