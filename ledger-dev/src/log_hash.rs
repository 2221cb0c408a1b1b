//! The hash chain of a ledger's log, as Formance computes it with `HASH_LOGS=SYNC`
//! (the README's "Logs and the hash chain" has the rules).
//!
//! `hash_n = SHA-256(P || J || "\n")`: `P` is empty for the first log, otherwise the
//! previous hash as a JSON string and a newline; `J` is the Go JSON (struct order,
//! sorted maps, no spaces, HTML characters escaped) of
//! `{"type","data":<memento>,"date","idempotencyKey","id":0,"hash":null}`. The memento
//! keeps what decided the write, not what was derived from it: no insertion dates,
//! no volumes, the reverted transaction by id only.
//!
//! The hash is a pure function of the log entry and its predecessor, so replaying the
//! SQLite journal at start rebuilds exactly the hashes that were served before.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use outbox_core::{Metadata, Posting};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::clock;
use crate::log::{Log, LogData};
use crate::model::{Target, Transaction};

/// A SHA-256 log hash.
pub(crate) type LogHash = [u8; 32];

/// The hash of `log` when it follows a log hashed `previous` (`None` for the first).
pub(crate) fn chain(previous: Option<&LogHash>, log: &Log) -> LogHash {
    let mut digest = Sha256::new();
    if let Some(previous) = previous {
        digest.update(b"\"");
        digest.update(encode(previous));
        digest.update(b"\"\n");
    }
    let hashed = format!(
        r#"{{"type":{},"data":{},"date":{},"idempotencyKey":{},"id":0,"hash":null}}"#,
        go_json(log.data.type_name()),
        go_json(&memento(&log.data)),
        go_json(&clock::format(&log.date)),
        go_json(log.idempotency_key.as_deref().unwrap_or_default()),
    );
    digest.update(hashed.as_bytes());
    digest.update(b"\n");
    digest.finalize().into()
}

/// A hash as the API renders it (Go's `[]byte` in JSON: standard base64).
pub(crate) fn encode(hash: &LogHash) -> String {
    STANDARD.encode(hash)
}

/// A transaction as the memento keeps it, in the Go struct's field order.
#[derive(Serialize)]
struct TransactionResume<'a> {
    postings: &'a [Posting],
    metadata: &'a Metadata,
    #[serde(with = "clock::serde_time")]
    timestamp: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<&'a str>,
    id: u64,
    reverted: bool,
}

impl<'a> TransactionResume<'a> {
    fn of(tx: &'a Transaction) -> Self {
        Self {
            postings: &tx.postings,
            metadata: &tx.metadata,
            timestamp: tx.timestamp,
            reference: tx.reference.as_deref().filter(|r| !r.is_empty()),
            id: tx.id,
            reverted: tx.reverted,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NewTransactionMemento<'a> {
    transaction: TransactionResume<'a>,
    account_metadata: &'a BTreeMap<String, Metadata>,
}

#[derive(Serialize)]
struct RevertedTransactionMemento<'a> {
    #[serde(rename = "revertedTransactionID")]
    reverted_transaction_id: u64,
    transaction: TransactionResume<'a>,
}

/// A metadata target's id: the address, or the transaction id as a number.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum TargetId<'a> {
    Account(&'a str),
    Transaction(u64),
}

impl<'a> TargetId<'a> {
    pub(crate) fn of(target: &'a Target) -> Self {
        match target {
            Target::Account(address) => Self::Account(address),
            Target::Transaction(id) => Self::Transaction(*id),
        }
    }
}

/// Metadata logs have no memento: their data is hashed as it is.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SetMetadataData<'a> {
    target_type: &'static str,
    target_id: TargetId<'a>,
    metadata: &'a Metadata,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeleteMetadataData<'a> {
    target_type: &'static str,
    target_id: TargetId<'a>,
    key: &'a str,
}

/// The part of the data that is hashed, as a serialisable value.
fn memento(data: &LogData) -> Memento<'_> {
    match data {
        LogData::NewTransaction {
            transaction,
            account_metadata,
        } => Memento::NewTransaction(NewTransactionMemento {
            transaction: TransactionResume::of(transaction),
            account_metadata,
        }),
        LogData::RevertedTransaction { reverted, revert } => {
            Memento::RevertedTransaction(RevertedTransactionMemento {
                reverted_transaction_id: reverted.id,
                transaction: TransactionResume::of(revert),
            })
        }
        LogData::SetMetadata { target, metadata } => Memento::SetMetadata(SetMetadataData {
            target_type: target.type_name(),
            target_id: TargetId::of(target),
            metadata,
        }),
        LogData::DeleteMetadata { target, key } => Memento::DeleteMetadata(DeleteMetadataData {
            target_type: target.type_name(),
            target_id: TargetId::of(target),
            key,
        }),
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Memento<'a> {
    NewTransaction(NewTransactionMemento<'a>),
    RevertedTransaction(RevertedTransactionMemento<'a>),
    SetMetadata(SetMetadataData<'a>),
    DeleteMetadata(DeleteMetadataData<'a>),
}

/// `value` as Go's `encoding/json` writes it. serde_json already keeps struct order,
/// sorts `BTreeMap` keys and writes no spaces; Go also escapes `<`, `>`, `&`, U+2028
/// and U+2029, which in JSON text can only occur inside strings, so replacing them
/// in the output is exact.
fn go_json<T: Serialize + ?Sized>(value: &T) -> String {
    let text = serde_json::to_string(value).expect("log data serialises to JSON");
    if !text.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return text;
    }
    text.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata_log(id: u64, key: Option<&str>) -> Log {
        Log {
            id,
            date: clock::parse("2025-01-15T10:00:00.12Z").unwrap(),
            idempotency_key: key.map(str::to_owned),
            idempotency_hash: None,
            data: LogData::SetMetadata {
                target: Target::Transaction(7),
                metadata: Metadata::from([("b".into(), "<x>".into()), ("a".into(), "1".into())]),
            },
        }
    }

    #[test]
    fn the_first_hash_covers_the_go_json_of_the_entry() {
        // Computed independently:
        // printf '%s\n' '{"type":"SET_METADATA","data":{"targetType":"TRANSACTION","targetId":7,"metadata":{"a":"1","b":"\u003cx\u003e"}},"date":"2025-01-15T10:00:00.12Z","idempotencyKey":"","id":0,"hash":null}' \
        //   | sha256sum | cut -d' ' -f1 | xxd -r -p | base64
        let hash = chain(None, &metadata_log(1, None));
        assert_eq!(
            encode(&hash),
            "OHg+vP9uMnATt3lmYlyA75pDag3dmR5Z3Tk4/dqXzaw="
        );
    }

    #[test]
    fn a_hash_chains_on_the_previous_one() {
        let first = chain(None, &metadata_log(1, None));
        let second = chain(Some(&first), &metadata_log(2, Some("k")));
        // printf '"%s"\n%s\n' "$FIRST" '{"type":"SET_METADATA",…,"idempotencyKey":"k","id":0,"hash":null}' | sha256sum …
        assert_eq!(
            encode(&second),
            "8ttpGbbdUaOquqKMt1Lq2n1xixlCIz8Vhga09F4eofE="
        );
        assert_ne!(second, chain(None, &metadata_log(2, Some("k"))));
    }
}
