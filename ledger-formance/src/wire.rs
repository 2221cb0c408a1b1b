//! The JSON shapes of Formance Ledger v2 that this crate reads or writes, and the
//! conversions to outbox-core types. Only the fields used are declared: Formance adds
//! fields over versions, and serde ignores unknown ones.

use std::collections::BTreeMap;

use outbox_core::{Account, Asset, Error, ErrorKind, LedgerTransaction, Metadata, Posting, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// `{"data": X}`, the envelope of every single-object answer.
#[derive(Debug, Deserialize)]
pub(crate) struct Data<T> {
    pub data: T,
}

/// `{"cursor": {"data": [...], "hasMore": …}}`, the envelope of list answers.
#[derive(Debug, Deserialize)]
pub(crate) struct Cursor<T> {
    pub cursor: Page<T>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Page<T> {
    pub data: Vec<T>,
    /// Whether a following page exists; absent reads as none.
    #[serde(default, rename = "hasMore")]
    pub has_more: bool,
}

/// Only the id of a transaction: what a create or revert answer is read for.
#[derive(Debug, Deserialize)]
pub(crate) struct TransactionId {
    pub id: u64,
}

/// A transaction as read back (`V2Transaction`), volumes ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct Transaction {
    pub id: u64,
    pub postings: Vec<Posting>,
    #[serde(default)]
    pub reference: Option<String>,
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub reverted: bool,
    #[serde(default)]
    pub timestamp: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, rename = "insertedAt")]
    pub inserted_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<Transaction> for LedgerTransaction {
    fn from(tx: Transaction) -> Self {
        Self {
            id: tx.id,
            postings: tx.postings,
            // Formance omits an empty reference; an empty string means the same.
            reference: tx.reference.filter(|r| !r.is_empty()),
            metadata: tx.metadata,
            reverted: tx.reverted,
            timestamp: tx.timestamp,
            inserted_at: tx.inserted_at,
        }
    }
}

/// The one field of a stored `TransactionRequest` body needed to resolve a 409.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReferenceOnly {
    #[serde(default)]
    pub reference: Option<String>,
}

/// One `_bulk` element. `data` is the stored body embedded as-is: Formance hashes the
/// parsed command, but sending the stored bytes keeps "what was sent" auditable and
/// identical between single and bulk posts.
#[derive(Debug, Serialize)]
pub(crate) struct BulkElement<'a> {
    pub action: &'static str,
    pub ik: String,
    pub data: &'a RawValue,
}

/// One `_bulk` result (`V2BulkElementResult`).
#[derive(Debug, Deserialize)]
pub(crate) struct BulkResult {
    #[serde(rename = "responseType")]
    pub response_type: String,
    #[serde(default)]
    pub data: Option<TransactionId>,
    #[serde(rename = "errorCode", default)]
    pub error_code: Option<String>,
    #[serde(rename = "errorDescription", default)]
    pub error_description: Option<String>,
}

/// The body of a revert.
#[derive(Debug, Serialize)]
pub(crate) struct RevertRequest<'a> {
    pub metadata: &'a Metadata,
}

/// An account with its volumes (`V2Account` with `expand=volumes`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LedgerAccount {
    pub address: Account,
    #[serde(default)]
    pub metadata: Metadata,
    /// Per asset; empty when the ledger sent none.
    #[serde(default)]
    pub volumes: BTreeMap<Asset, Volume>,
}

/// What went in, what went out, and the difference, in minor units.
///
/// Formance amounts are arbitrary-precision; anything beyond `u128`/`i128` fails to
/// decode rather than being rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Volume {
    pub input: u128,
    pub output: u128,
    /// `input - output`; Formance sends it, older versions may not.
    #[serde(default)]
    pub balance: Option<i128>,
}

impl Volume {
    /// The balance as sent, or computed from input and output.
    pub fn balance(&self) -> i128 {
        self.balance.unwrap_or_else(|| {
            let input = i128::try_from(self.input).unwrap_or(i128::MAX);
            input.saturating_sub(i128::try_from(self.output).unwrap_or(i128::MAX))
        })
    }
}

/// Decodes a 2xx body; a body the ledger should never send is a permanent ledger error.
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| {
        Error::new(
            ErrorKind::Ledger,
            format!("cannot read the ledger's {what}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_v2_transaction_ignoring_volumes() {
        let body = r#"{"data":{"postings":[{"source":"world","destination":"merchants:4471:available","amount":48500000,"asset":"USD/2"}],
            "metadata":{"outbox_event_id":"x"},"timestamp":"2025-01-15T10:00:00.123456Z","reference":"ref-1","id":7,
            "insertedAt":"2025-01-15T10:00:00.123456Z","postCommitVolumes":{"world":{"USD/2":{"input":0,"output":48500000,"balance":-48500000}}},
            "reverted":false}}"#;
        let tx: LedgerTransaction = decode::<Data<Transaction>>(body.as_bytes(), "transaction")
            .unwrap()
            .data
            .into();
        assert_eq!(tx.id, 7);
        assert_eq!(tx.reference.as_deref(), Some("ref-1"));
        assert_eq!(tx.postings[0].amount.minor_units(), 48_500_000);
        assert_eq!(tx.metadata["outbox_event_id"], "x");
    }

    #[test]
    fn bulk_element_embeds_the_body_verbatim() {
        let stored = br#"{ "postings" : [], "metadata":{"b":"2","a":"1"} }"#;
        let raw: &RawValue = serde_json::from_slice(stored).unwrap();
        let element = BulkElement {
            action: "CREATE_TRANSACTION",
            ik: "k".into(),
            data: raw,
        };
        let json = serde_json::to_string(&element).unwrap();
        assert_eq!(
            json,
            r#"{"action":"CREATE_TRANSACTION","ik":"k","data":{ "postings" : [], "metadata":{"b":"2","a":"1"} }}"#
        );
    }

    #[test]
    fn volumes_beyond_u64_decode_exactly() {
        let body = r#"{"address":"world","metadata":{},"volumes":{"USD/2":{"input":0,"output":36893488147419103232,"balance":-36893488147419103232}}}"#;
        let account: LedgerAccount = serde_json::from_str(body).unwrap();
        let usd = account.volumes[&Asset::parse("USD/2").unwrap()];
        assert_eq!(usd.balance(), -36_893_488_147_419_103_232);
        let computed = Volume {
            input: 10,
            output: 4,
            balance: None,
        };
        assert_eq!(computed.balance(), 6);
    }
}
