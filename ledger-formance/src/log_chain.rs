//! Checking the ledger's log hash chain from outside the ledger — a check Formance
//! does not ship (docs/LEDGER.md, "The log and its hash chain").
//!
//! The rule, as that page and this crate's README state it: each entry's hash is
//! SHA-256 of `P || J || "\n"`, where `P` is empty for the ledger's first entry and
//! otherwise the previous entry's hash as a JSON string followed by a newline, and `J`
//! is the compact JSON (Go's `encoding/json`: struct fields in order, map keys sorted,
//! `<` `>` `&` U+2028 U+2029 escaped) of
//! `{"type","data":<memento>,"date","idempotencyKey","id":0,"hash":null}`. The memento
//! keeps what decided the write: for a transaction its postings, metadata, timestamp,
//! reference (omitted when empty), id and `reverted` flag — no insertion date, no
//! volumes.
//!
//! The memento is rebuilt from the entry as `GET /logs` serves it. Amounts are copied
//! as the ledger wrote them (any size); dates are rendered again as the ledger renders
//! them (UTC, microseconds, trailing zeros trimmed). [`LogChain`] holds one hash,
//! whatever the length of the log, and [`FormanceLedger::verify_log_chain`] reads the
//! log one page at a time, so memory does not grow with the ledger.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use outbox_core::Result;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::client::FormanceLedger;
use crate::logs::{LedgerLog, MAX_LOG_PAGE};

/// Why a log entry's hash could not be confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainFault {
    /// The hash the ledger states for `log_id` is not the one recomputed from the
    /// entry and its predecessor: the entry, or one before it, is not what was hashed.
    Broken {
        /// The first entry whose hash does not match.
        log_id: u64,
        /// The hash the ledger serves (`None`: it serves none).
        stated: Option<String>,
        /// The hash recomputed by the documented rule.
        recomputed: String,
    },
    /// The entry cannot be recomputed: a log type with no documented memento, or data
    /// that is not what the ledger documents.
    Unverifiable {
        /// The entry that could not be recomputed.
        log_id: u64,
        /// What was missing or unexpected.
        reason: String,
    },
}

impl ChainFault {
    /// The log id where the chain stops being confirmed.
    pub fn log_id(&self) -> u64 {
        match self {
            Self::Broken { log_id, .. } | Self::Unverifiable { log_id, .. } => *log_id,
        }
    }
}

impl fmt::Display for ChainFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Broken {
                log_id,
                stated,
                recomputed,
            } => write!(
                f,
                "chain BROKEN at log {log_id}: the ledger states hash {}, recomputed {recomputed}",
                stated.as_deref().unwrap_or("(none)")
            ),
            Self::Unverifiable { log_id, reason } => {
                write!(f, "chain NOT VERIFIABLE at log {log_id}: {reason}")
            }
        }
    }
}

/// The running state of a chain check: the last confirmed hash, nothing else.
///
/// Feed it every entry of one ledger's log, oldest first, from the first one.
#[derive(Debug, Clone, Default)]
pub struct LogChain {
    previous: Option<String>,
    checked: u64,
    last_id: Option<u64>,
}

impl LogChain {
    /// A check that has seen nothing yet: the next entry must be the ledger's first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `log` as the entry that follows everything checked so far.
    ///
    /// # Errors
    /// A [`ChainFault`] when its hash is not the recomputed one, or cannot be
    /// recomputed; the check should stop there (later entries chain on a hash that
    /// is not confirmed).
    pub fn check(&mut self, log: &LedgerLog) -> std::result::Result<(), ChainFault> {
        let recomputed = recompute_hash(self.previous.as_deref(), log).map_err(|reason| {
            ChainFault::Unverifiable {
                log_id: log.id,
                reason,
            }
        })?;
        if log.hash.as_deref() != Some(recomputed.as_str()) {
            return Err(ChainFault::Broken {
                log_id: log.id,
                stated: log.hash.clone(),
                recomputed,
            });
        }
        self.previous = Some(recomputed);
        self.checked += 1;
        self.last_id = Some(log.id);
        Ok(())
    }

    /// How many entries were confirmed.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// The id of the last confirmed entry; `None` before the first.
    pub fn last_id(&self) -> Option<u64> {
        self.last_id
    }
}

/// What [`FormanceLedger::verify_log_chain`] found.
#[derive(Debug, Clone)]
pub struct ChainReport {
    /// Entries whose hash was confirmed, from the ledger's first.
    pub checked: u64,
    /// The last confirmed entry's id; `None` when none was.
    pub through: Option<u64>,
    /// The entry the search stopped at (confirmed), if one matched.
    pub found: Option<LedgerLog>,
    /// Where the chain stopped being confirmed, if it did.
    pub fault: Option<ChainFault>,
}

impl FormanceLedger {
    /// Reads the ledger's log oldest first, one page at a time, and checks each
    /// entry's hash, until an entry matches `stop` (checked, then returned in
    /// [`ChainReport::found`]), the chain breaks, or the log ends.
    ///
    /// # Errors
    /// Transport and ledger errors of the reads, classified as for every call.
    pub async fn verify_log_chain(
        &self,
        mut stop: impl FnMut(&LedgerLog) -> bool,
    ) -> Result<ChainReport> {
        let mut chain = LogChain::new();
        let mut after = 0;
        loop {
            let page = self.logs_after(after, MAX_LOG_PAGE).await?;
            let Some(last) = page.last() else {
                return Ok(report(&chain, None, None));
            };
            after = last.id;
            for log in page {
                if let Err(fault) = chain.check(&log) {
                    return Ok(report(&chain, None, Some(fault)));
                }
                if stop(&log) {
                    return Ok(report(&chain, Some(log), None));
                }
            }
        }
    }
}

fn report(chain: &LogChain, found: Option<LedgerLog>, fault: Option<ChainFault>) -> ChainReport {
    ChainReport {
        checked: chain.checked(),
        through: chain.last_id(),
        found,
        fault,
    }
}

/// The hash `log` must carry when it follows an entry hashed `previous` (`None` for
/// the ledger's first), base64 as the API renders it.
///
/// # Errors
/// Why the entry cannot be recomputed (an unknown log type, data not in the shape
/// the ledger documents).
pub fn recompute_hash(
    previous: Option<&str>,
    log: &LedgerLog,
) -> std::result::Result<String, String> {
    let mut hashed = String::with_capacity(log.data.get().len() + 128);
    hashed.push_str(r#"{"type":"#);
    hashed.push_str(&go_string(&log.kind));
    hashed.push_str(r#","data":"#);
    hashed.push_str(&memento(&log.kind, &log.data)?);
    hashed.push_str(r#","date":"#);
    hashed.push_str(&go_string(&go_time(&log.date)));
    hashed.push_str(r#","idempotencyKey":"#);
    hashed.push_str(&go_string(
        log.idempotency_key.as_deref().unwrap_or_default(),
    ));
    hashed.push_str(r#","id":0,"hash":null}"#);
    let mut digest = Sha256::new();
    if let Some(previous) = previous {
        digest.update(b"\"");
        digest.update(previous.as_bytes());
        digest.update(b"\"\n");
    }
    digest.update(hashed.as_bytes());
    digest.update(b"\n");
    Ok(STANDARD.encode(digest.finalize()))
}

type Metadata = BTreeMap<String, String>;

#[derive(Deserialize)]
struct PostingData {
    source: String,
    destination: String,
    /// As the ledger wrote it: Formance amounts have any size.
    amount: Box<RawValue>,
    asset: String,
}

#[derive(Deserialize)]
struct TransactionData {
    postings: Vec<PostingData>,
    #[serde(default)]
    metadata: Metadata,
    timestamp: DateTime<Utc>,
    #[serde(default)]
    reference: Option<String>,
    id: u64,
    #[serde(default)]
    reverted: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewTransactionData {
    transaction: TransactionData,
    #[serde(default)]
    account_metadata: BTreeMap<String, Metadata>,
}

#[derive(Deserialize)]
struct IdOnly {
    id: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RevertedTransactionData {
    reverted_transaction: IdOnly,
    transaction: TransactionData,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetMetadataData {
    target_type: String,
    target_id: Box<RawValue>,
    metadata: Metadata,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteMetadataData {
    target_type: String,
    target_id: Box<RawValue>,
    key: String,
}

fn parse<'a, T: Deserialize<'a>>(kind: &str, data: &'a RawValue) -> std::result::Result<T, String> {
    serde_json::from_str(data.get())
        .map_err(|e| format!("its {kind} data is not in the documented shape: {e}"))
}

/// The part of an entry's data that is hashed, as Go JSON.
fn memento(kind: &str, data: &RawValue) -> std::result::Result<String, String> {
    match kind {
        "NEW_TRANSACTION" => {
            let data: NewTransactionData = parse(kind, data)?;
            let accounts: Vec<String> = data
                .account_metadata
                .iter()
                .map(|(address, metadata)| {
                    format!("{}:{}", go_string(address), go_metadata(metadata))
                })
                .collect();
            Ok(format!(
                r#"{{"transaction":{},"accountMetadata":{{{}}}}}"#,
                transaction_resume(&data.transaction),
                accounts.join(",")
            ))
        }
        "REVERTED_TRANSACTION" => {
            let data: RevertedTransactionData = parse(kind, data)?;
            Ok(format!(
                r#"{{"revertedTransactionID":{},"transaction":{}}}"#,
                data.reverted_transaction.id,
                transaction_resume(&data.transaction)
            ))
        }
        "SET_METADATA" => {
            let data: SetMetadataData = parse(kind, data)?;
            Ok(format!(
                r#"{{"targetType":{},"targetId":{},"metadata":{}}}"#,
                go_string(&data.target_type),
                target_id(&data.target_id)?,
                go_metadata(&data.metadata)
            ))
        }
        "DELETE_METADATA" => {
            let data: DeleteMetadataData = parse(kind, data)?;
            Ok(format!(
                r#"{{"targetType":{},"targetId":{},"key":{}}}"#,
                go_string(&data.target_type),
                target_id(&data.target_id)?,
                go_string(&data.key)
            ))
        }
        other => Err(format!(
            "log type {other} has no documented memento, so its hash cannot be recomputed"
        )),
    }
}

/// A transaction as the memento keeps it, in the Go struct's field order.
fn transaction_resume(tx: &TransactionData) -> String {
    let postings: Vec<String> = tx
        .postings
        .iter()
        .map(|p| {
            format!(
                r#"{{"source":{},"destination":{},"amount":{},"asset":{}}}"#,
                go_string(&p.source),
                go_string(&p.destination),
                p.amount.get().trim(),
                go_string(&p.asset)
            )
        })
        .collect();
    let reference = match tx.reference.as_deref() {
        Some(reference) if !reference.is_empty() => {
            format!(r#""reference":{},"#, go_string(reference))
        }
        _ => String::new(),
    };
    format!(
        r#"{{"postings":[{}],"metadata":{},"timestamp":{},{reference}"id":{},"reverted":{}}}"#,
        postings.join(","),
        go_metadata(&tx.metadata),
        go_string(&go_time(&tx.timestamp)),
        tx.id,
        tx.reverted
    )
}

/// A metadata target: an account address (a string) or a transaction id (a number).
fn target_id(raw: &RawValue) -> std::result::Result<String, String> {
    let text = raw.get().trim();
    if text.starts_with('"') {
        let address: String =
            serde_json::from_str(text).map_err(|e| format!("targetId is not a string: {e}"))?;
        return Ok(go_string(&address));
    }
    let id: u64 = serde_json::from_str(text)
        .map_err(|e| format!("targetId is neither an address nor a transaction id: {e}"))?;
    Ok(id.to_string())
}

/// A `map[string]string` as Go writes it: keys sorted (a `BTreeMap` iterates so).
fn go_metadata(metadata: &Metadata) -> String {
    let entries: Vec<String> = metadata
        .iter()
        .map(|(k, v)| format!("{}:{}", go_string(k), go_string(v)))
        .collect();
    format!("{{{}}}", entries.join(","))
}

/// A JSON string as Go's `encoding/json` writes it. serde_json escapes what JSON
/// requires; Go also escapes `<`, `>`, `&`, U+2028 and U+2029.
fn go_string(text: &str) -> String {
    let json = serde_json::to_string(text).expect("a string serialises to JSON");
    if !json.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return json;
    }
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// A date as the ledger renders it: UTC, microseconds, trailing zeros (and a bare
/// dot) trimmed, `Z` (Go's RFC3339Nano on a microsecond time).
fn go_time(t: &DateTime<Utc>) -> String {
    let base = t.format("%Y-%m-%dT%H:%M:%S");
    let micros = t.timestamp_subsec_micros();
    if micros == 0 {
        return format!("{base}Z");
    }
    let fraction = format!("{micros:06}");
    format!("{base}.{}Z", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(id: u64, kind: &str, data: &str, key: Option<&str>, hash: Option<String>) -> LedgerLog {
        LedgerLog {
            id,
            kind: kind.to_owned(),
            data: RawValue::from_string(data.to_owned()).unwrap(),
            date: DateTime::parse_from_rfc3339("2025-01-15T10:00:00.12Z")
                .unwrap()
                .with_timezone(&Utc),
            idempotency_key: key.map(str::to_owned),
            hash,
        }
    }

    const METADATA: &str =
        r#"{"targetType":"TRANSACTION","targetId":7,"metadata":{"b":"<x>","a":"1"}}"#;

    #[test]
    fn the_first_hash_covers_the_go_json_of_the_entry() {
        // Computed independently:
        // printf '%s\n' '{"type":"SET_METADATA","data":{"targetType":"TRANSACTION","targetId":7,"metadata":{"a":"1","b":"\u003cx\u003e"}},"date":"2025-01-15T10:00:00.12Z","idempotencyKey":"","id":0,"hash":null}' \
        //   | sha256sum | cut -d' ' -f1 | xxd -r -p | base64
        let first = log(1, "SET_METADATA", METADATA, None, None);
        assert_eq!(
            recompute_hash(None, &first).unwrap(),
            "OHg+vP9uMnATt3lmYlyA75pDag3dmR5Z3Tk4/dqXzaw="
        );
    }

    #[test]
    fn each_hash_chains_on_the_previous_one_and_a_changed_entry_breaks_the_chain() {
        let first_hash = "OHg+vP9uMnATt3lmYlyA75pDag3dmR5Z3Tk4/dqXzaw=".to_owned();
        // printf '"%s"\n%s\n' "$FIRST" '{"type":"SET_METADATA",…,"idempotencyKey":"k","id":0,"hash":null}' | sha256sum …
        let second_hash = "8ttpGbbdUaOquqKMt1Lq2n1xixlCIz8Vhga09F4eofE=".to_owned();
        let mut chain = LogChain::new();
        chain
            .check(&log(
                1,
                "SET_METADATA",
                METADATA,
                None,
                Some(first_hash.clone()),
            ))
            .unwrap();
        chain
            .check(&log(
                2,
                "SET_METADATA",
                METADATA,
                Some("k"),
                Some(second_hash),
            ))
            .unwrap();
        assert_eq!((chain.checked(), chain.last_id()), (2, Some(2)));

        let mut chain = LogChain::new();
        chain
            .check(&log(
                1,
                "SET_METADATA",
                METADATA,
                None,
                Some(first_hash.clone()),
            ))
            .unwrap();
        let tampered = METADATA.replace(r#""a":"1""#, r#""a":"2""#);
        let fault = chain
            .check(&log(
                2,
                "SET_METADATA",
                &tampered,
                Some("k"),
                Some(first_hash),
            ))
            .unwrap_err();
        assert_eq!(fault.log_id(), 2);
        assert!(
            fault.to_string().starts_with("chain BROKEN at log 2:"),
            "{fault}"
        );
        assert_eq!(
            chain.checked(),
            1,
            "a broken entry is not counted as checked"
        );
    }

    #[test]
    fn a_transaction_memento_drops_volumes_and_dates_of_insertion() {
        let with_volumes = r#"{"transaction":{"postings":[{"source":"world","destination":"a","amount":36893488147419103232,"asset":"USD/2"}],
            "metadata":{},"timestamp":"2025-01-15T10:00:00Z","id":1,"insertedAt":"2025-01-15T10:00:01Z",
            "postCommitVolumes":{"a":{"USD/2":{"input":1,"output":0,"balance":1}}},"reverted":false},"accountMetadata":{}}"#;
        let bare = r#"{"transaction":{"postings":[{"source":"world","destination":"a","amount":36893488147419103232,"asset":"USD/2"}],
            "metadata":{},"timestamp":"2025-01-15T10:00:00Z","id":1,"reverted":false},"accountMetadata":{}}"#;
        assert_eq!(
            recompute_hash(None, &log(1, "NEW_TRANSACTION", with_volumes, None, None)),
            recompute_hash(None, &log(1, "NEW_TRANSACTION", bare, None, None))
        );
        let memento = memento(
            "NEW_TRANSACTION",
            &RawValue::from_string(bare.into()).unwrap(),
        );
        assert_eq!(
            memento.unwrap(),
            r#"{"transaction":{"postings":[{"source":"world","destination":"a","amount":36893488147419103232,"asset":"USD/2"}],"metadata":{},"timestamp":"2025-01-15T10:00:00Z","id":1,"reverted":false},"accountMetadata":{}}"#
        );
    }

    #[test]
    fn an_unknown_log_type_is_unverifiable_not_broken() {
        let mut chain = LogChain::new();
        let fault = chain
            .check(&log(1, "INSERTED_SCHEMA", "{}", None, Some("x".into())))
            .unwrap_err();
        assert!(
            matches!(fault, ChainFault::Unverifiable { log_id: 1, .. }),
            "{fault}"
        );
    }
}
