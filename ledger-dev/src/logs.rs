//! `GET /v2/{ledger}/logs`: the log rendered as `V2Log`, newest first, in cursor pages.
//!
//! `data` is the log's payload as the API shows it (the whole transactions, volumes
//! included), `hash` its place in the chain (`log_hash`), base64.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::Metadata;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::clock;
use crate::log::{Log, LogData};
use crate::log_hash::{self, LogHash, TargetId};
use crate::log_tamper::LogCorruption;
use crate::model::Transaction;
use crate::query::Query;
use crate::reads::Cursor;
use crate::state::LedgerState;
use crate::stored_log::ChainedLog;

/// `V2Log`, in the Go struct's field order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LogView<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    data: DataView<'a>,
    #[serde(with = "clock::serde_time")]
    date: DateTime<Utc>,
    /// Empty when the write carried none (Go's zero string, not omitted).
    idempotency_key: &'a str,
    idempotency_hash: &'a str,
    id: u64,
    hash: String,
}

/// `V2LogData*`: what each log type carries.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum DataView<'a> {
    NewTransaction {
        transaction: &'a Transaction,
        #[serde(rename = "accountMetadata")]
        account_metadata: &'a BTreeMap<String, Metadata>,
    },
    RevertedTransaction {
        #[serde(rename = "revertedTransaction")]
        reverted_transaction: &'a Transaction,
        /// The new reversing transaction (webhooks call it `revertTransaction`).
        transaction: &'a Transaction,
    },
    SetMetadata {
        #[serde(rename = "targetType")]
        target_type: &'static str,
        #[serde(rename = "targetId")]
        target_id: TargetId<'a>,
        metadata: &'a Metadata,
    },
    DeleteMetadata {
        #[serde(rename = "targetType")]
        target_type: &'static str,
        #[serde(rename = "targetId")]
        target_id: TargetId<'a>,
        key: &'a str,
    },
}

impl<'a> LogView<'a> {
    fn of(log: &'a Log, hash: &LogHash) -> Self {
        let data = match &log.data {
            LogData::NewTransaction {
                transaction,
                account_metadata,
            } => DataView::NewTransaction {
                transaction,
                account_metadata,
            },
            LogData::RevertedTransaction { reverted, revert } => DataView::RevertedTransaction {
                reverted_transaction: reverted,
                transaction: revert,
            },
            LogData::SetMetadata { target, metadata } => DataView::SetMetadata {
                target_type: target.type_name(),
                target_id: TargetId::of(target),
                metadata,
            },
            LogData::DeleteMetadata { target, key } => DataView::DeleteMetadata {
                target_type: target.type_name(),
                target_id: TargetId::of(target),
                key,
            },
        };
        Self {
            kind: log.data.type_name(),
            data,
            date: log.date,
            idempotency_key: log.idempotency_key.as_deref().unwrap_or_default(),
            idempotency_hash: log.idempotency_hash.as_deref().unwrap_or_default(),
            id: log.id,
            hash: log_hash::encode(hash),
        }
    }
}

/// `V2LogsCursorResponse.cursor`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LogPage {
    page_size: u64,
    has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    /// Rendered while the ledger is locked (the views borrow its state), as text:
    /// volumes may exceed what `serde_json::Value` holds exactly.
    data: Vec<Box<RawValue>>,
}

/// A page of logs matching `query`, newest first, below the log id `before`; the
/// logs `corruption` names are served corrupted.
pub(crate) fn page(
    state: &LedgerState,
    query: &Query,
    raw_query: &Value,
    page_size: u64,
    before: Option<u64>,
    corruption: LogCorruption,
) -> LogPage {
    let end = before.map_or(state.logs.len(), |before| {
        state.logs.partition_point(|entry| entry.id < before)
    });
    let mut matching = state.logs[..end]
        .iter()
        .rev()
        .filter(|entry| query.matches_log(entry));
    let limit = usize::try_from(page_size).unwrap_or(usize::MAX);
    let entries: Vec<&ChainedLog> = matching.by_ref().take(limit).collect();
    let has_more = matching.next().is_some();
    let next = match (has_more, entries.last()) {
        (true, Some(last)) => Some(
            Cursor {
                page_size,
                before: last.id,
                query: raw_query.clone(),
            }
            .encode(),
        ),
        _ => None,
    };
    let data = entries
        .into_iter()
        .map(|entry| {
            let (mut log, mut hash) = (entry.to_log(), entry.hash);
            corruption.apply(&mut log, &mut hash);
            let text =
                serde_json::to_string(&LogView::of(&log, &hash)).expect("logs render to JSON");
            RawValue::from_string(text).expect("serde_json output is JSON")
        })
        .collect();
    LogPage {
        page_size,
        has_more,
        next,
        data,
    }
}
