//! Formance webhook bodies turned into inbox messages.
//!
//! | webhook `type` | message |
//! | --- | --- |
//! | `ledger.committed_transactions` | `Committed` per transaction carrying outbox metadata (`Reverted` if it is a revert) |
//! | `ledger.reverted_transaction` | `Reverted` for `revertTransaction` |
//! | `ledger.saved_metadata` on an ACCOUNT with `outbox_rejected_code` | `Rejected` notice |
//!
//! The instruction id is the `outbox_event_id` in the ledger metadata. Transactions
//! without outbox metadata were not posted by an outbox and carry no sequence, so they
//! are skipped (logged).

use outbox_core::{
    Account, Error, InboxMessage, MessageKind, OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY,
    OUTBOX_SEQUENCE_KEY, Result,
};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Metadata key Formance puts on a reversing transaction.
const REVERTS_KEY: &str = "com.formance.spec/state/reverts";
/// Metadata key of the relay's rejection notices.
const REJECTED_CODE_KEY: &str = "outbox_rejected_code";

/// The webhook envelope (Formance webhooks service format).
#[derive(Debug, Clone, Deserialize)]
pub struct LedgerEvent {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub date: Option<String>,
    pub payload: Value,
}

/// Parses a webhook body into the inbox messages it carries (possibly none).
///
/// # Errors
/// `InvalidInput` naming the JSON path when the body is not a Formance event or its
/// outbox metadata is malformed.
pub fn messages_from_webhook(body: &[u8]) -> Result<Vec<InboxMessage>> {
    let event: LedgerEvent = serde_json::from_slice(body)
        .map_err(|e| Error::invalid("body", format!("not a Formance webhook event: {e}")))?;
    let kind = event.kind.to_ascii_lowercase();
    let kind = kind.strip_prefix("ledger.").unwrap_or(&kind);
    match kind {
        "committed_transactions" => {
            let txs = event
                .payload
                .get("transactions")
                .and_then(Value::as_array)
                .ok_or_else(|| Error::invalid("payload.transactions", "missing or not an array"))?;
            txs.iter()
                .filter_map(|tx| transaction_message(tx, MessageKind::Committed).transpose())
                .collect()
        }
        "reverted_transaction" => {
            let tx = event
                .payload
                .get("revertTransaction")
                .ok_or_else(|| Error::invalid("payload.revertTransaction", "missing"))?;
            Ok(transaction_message(tx, MessageKind::Reverted)?
                .into_iter()
                .collect())
        }
        "saved_metadata" => Ok(rejection_notice(&event.payload)?.into_iter().collect()),
        other => {
            tracing::debug!(kind = other, "ignoring ledger event type");
            Ok(Vec::new())
        }
    }
}

fn transaction_message(tx: &Value, kind: MessageKind) -> Result<Option<InboxMessage>> {
    let empty = Map::new();
    let metadata = tx
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if !metadata.contains_key(OUTBOX_EVENT_ID_KEY) {
        tracing::debug!(id = ?tx.get("id"), "ledger transaction without outbox metadata: skipped");
        return Ok(None);
    }
    let kind = if metadata.contains_key(REVERTS_KEY) {
        MessageKind::Reverted
    } else {
        kind
    };
    let payload = serde_json::to_vec(tx).map_err(|e| Error::invalid("payload", e.to_string()))?;
    outbox_message(metadata, kind, payload).map(Some)
}

fn rejection_notice(payload: &Value) -> Result<Option<InboxMessage>> {
    let target_type = payload
        .get("targetType")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(metadata) = payload.get("metadata").and_then(Value::as_object) else {
        return Ok(None);
    };
    if !target_type.eq_ignore_ascii_case("ACCOUNT") || !metadata.contains_key(REJECTED_CODE_KEY) {
        return Ok(None);
    }
    let bytes =
        serde_json::to_vec(metadata).map_err(|e| Error::invalid("payload", e.to_string()))?;
    outbox_message(metadata, MessageKind::Rejected, bytes).map(Some)
}

fn outbox_message(
    metadata: &Map<String, Value>,
    kind: MessageKind,
    payload: Vec<u8>,
) -> Result<InboxMessage> {
    let text = |key: &str| {
        metadata
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid(format!("metadata.{key}"), "missing or not a string"))
    };
    let sequence = text(OUTBOX_SEQUENCE_KEY)?;
    Ok(InboxMessage {
        instruction_id: text(OUTBOX_EVENT_ID_KEY)?.to_owned(),
        account: Account::parse_field(
            &format!("metadata.{OUTBOX_ACCOUNT_KEY}"),
            text(OUTBOX_ACCOUNT_KEY)?,
        )?,
        sequence: sequence.parse().map_err(|_| {
            Error::invalid(
                format!("metadata.{OUTBOX_SEQUENCE_KEY}"),
                format!("{sequence:?} is not a sequence number"),
            )
        })?,
        kind,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(metadata: &str) -> Vec<u8> {
        format!(
            r#"{{"idempotency_key":"","date":"2026-10-07T10:00:00.000000Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{{"accountMetadata":{{}},"ledger":"payouts","transactions":[{{"id":7,"metadata":{metadata},"postings":[{{"amount":48500000,"asset":"USD/2","destination":"b","source":"a"}}]}}]}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn committed_transaction_with_outbox_metadata() {
        let id = "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59";
        let body = committed(&format!(
            r#"{{"outbox_event_id":"{id}","outbox_account":"merchants:4471","outbox_sequence":"2"}}"#
        ));
        let messages = messages_from_webhook(&body).unwrap();
        assert_eq!(messages.len(), 1);
        let m = &messages[0];
        assert_eq!(
            (
                m.instruction_id.as_str(),
                m.account.as_str(),
                m.sequence,
                m.kind
            ),
            (id, "merchants:4471", 2, MessageKind::Committed)
        );
        let tx: Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(tx["postings"][0]["amount"], 48_500_000);
    }

    #[test]
    fn foreign_transactions_are_skipped_and_bad_metadata_named() {
        assert!(messages_from_webhook(&committed("{}")).unwrap().is_empty());
        let err = messages_from_webhook(&committed(
            r#"{"outbox_event_id":"x","outbox_account":"merchants:1","outbox_sequence":"two"}"#,
        ))
        .unwrap_err();
        assert_eq!(err.field(), Some("metadata.outbox_sequence"));
        assert_eq!(
            messages_from_webhook(b"[1]").unwrap_err().field(),
            Some("body")
        );
    }

    #[test]
    fn rejection_notice_from_saved_metadata() {
        let body = br#"{"type":"ledger.saved_metadata","payload":{"ledger":"payouts","targetType":"ACCOUNT","targetId":"merchants:9","metadata":{"outbox_event_id":"e","outbox_account":"merchants:9","outbox_sequence":"3","outbox_rejected_code":"INSUFFICIENT_FUND"}}}"#;
        let messages = messages_from_webhook(body).unwrap();
        assert_eq!(
            (messages[0].kind, messages[0].sequence),
            (MessageKind::Rejected, 3)
        );
        let plain = br#"{"type":"ledger.saved_metadata","payload":{"targetType":"ACCOUNT","targetId":"a","metadata":{"k":"v"}}}"#;
        assert!(messages_from_webhook(plain).unwrap().is_empty());
    }

    #[test]
    fn reverted_transaction_is_a_reversal() {
        let body = br#"{"type":"ledger.reverted_transaction","payload":{"ledger":"payouts","revertedTransaction":{"id":1,"metadata":{}},"revertTransaction":{"id":9,"metadata":{"outbox_event_id":"r","outbox_account":"merchants:1","outbox_sequence":"4","com.formance.spec/state/reverts":"1"},"postings":[]}}}"#;
        let messages = messages_from_webhook(body).unwrap();
        assert_eq!(
            (messages[0].kind, messages[0].instruction_id.as_str()),
            (MessageKind::Reverted, "r")
        );
    }
}
