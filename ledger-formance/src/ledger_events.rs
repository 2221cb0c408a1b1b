//! Formance ledger events turned into Hop 2 messages — from a webhook body
//! ([`messages_from_webhook`]) or from an entry of the ledger's log
//! ([`messages_from_log`], what catch-up reads). Both go through the same conversion,
//! so a message built from a log entry carries byte for byte the payload its webhook
//! would have carried.
//!
//! | webhook `type` | log `type` | message |
//! | --- | --- | --- |
//! | `ledger.committed_transactions` | `NEW_TRANSACTION` | `Committed` per transaction carrying outbox metadata (`Reverted` if it is a revert) |
//! | `ledger.reverted_transaction` | `REVERTED_TRANSACTION` | `Reverted` for the reversing transaction (`revertTransaction` / `transaction`) |
//! | `ledger.saved_metadata` on an ACCOUNT with `outbox_rejected_code` | `SET_METADATA`, the same | `Rejected` notice |
//!
//! The instruction id is the `outbox_event_id` in the ledger metadata. Transactions
//! without outbox metadata were not posted by an outbox and carry no sequence, so they
//! are skipped (logged).
//!
//! Every message also carries the ledger's name (`payload.ledger` of a webhook,
//! required once the event yields a message; the log's own ledger), the ledger
//! transaction id (`id` of the committed or the reverting transaction; none on a
//! rejection notice, nothing was posted) and a W3C trace context: the delivery's
//! `traceparent`/`tracestate` headers when it had them, otherwise the ones enqueue
//! wrote in the transaction's metadata (so a message from the log carries the same
//! trace as its webhook would have). The payload is the transaction (or the
//! notice's metadata) as compact JSON with object keys sorted at every level — the
//! order the Formance webhooks service sends — so both sources give the same bytes.

use outbox_core::fanout::RequestHeaders;
use outbox_core::fanout::headers::{TRACEPARENT, TRACESTATE};
use outbox_core::{
    Account, Error, FanoutMessage, MessageKind, OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY,
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

/// The W3C trace context of a delivery (`traceparent`, `tracestate` request headers),
/// carried unchanged onto every message the delivery brings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The trace headers of a request; absent, empty or non-text ones are `None`.
    pub fn from_headers(headers: &RequestHeaders) -> Self {
        let text = |name: &str| {
            headers
                .text(name)
                .ok()
                .flatten()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        Self {
            traceparent: text(TRACEPARENT),
            tracestate: text(TRACESTATE),
        }
    }
}

/// What every message of one event shares.
struct Origin<'a> {
    /// The webhook's `payload`, or the log entry's `data`.
    payload: &'a Value,
    /// Known for a log entry; a webhook names it in `payload.ledger`.
    ledger: Option<&'a str>,
    trace: &'a TraceContext,
}

impl Origin<'_> {
    fn ledger(&self) -> Result<String> {
        if let Some(ledger) = self.ledger {
            return Ok(ledger.to_owned());
        }
        self.payload
            .get("ledger")
            .and_then(Value::as_str)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| Error::invalid("payload.ledger", "missing or not a string"))
    }
}

/// Parses a webhook body into the Hop 2 messages it carries (possibly none), each
/// stamped with `trace` (the delivery's trace headers).
///
/// # Errors
/// `InvalidInput` naming the JSON path when the body is not a Formance event, its
/// `payload.ledger` or a transaction `id` is missing, or its outbox metadata is
/// malformed.
pub fn messages_from_webhook(body: &[u8], trace: &TraceContext) -> Result<Vec<FanoutMessage>> {
    let event: LedgerEvent = serde_json::from_slice(body)
        .map_err(|e| Error::invalid("body", format!("not a Formance webhook event: {e}")))?;
    let origin = Origin {
        payload: &event.payload,
        ledger: None,
        trace,
    };
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
                .enumerate()
                .filter_map(|(i, tx)| {
                    let path = format!("payload.transactions[{i}]");
                    transaction_message(&origin, &path, tx, MessageKind::Committed).transpose()
                })
                .collect()
        }
        "reverted_transaction" => {
            let path = "payload.revertTransaction";
            let tx = event
                .payload
                .get("revertTransaction")
                .ok_or_else(|| Error::invalid(path, "missing"))?;
            Ok(
                transaction_message(&origin, path, tx, MessageKind::Reverted)?
                    .into_iter()
                    .collect(),
            )
        }
        "saved_metadata" => Ok(rejection_notice(&origin)?.into_iter().collect()),
        other => {
            tracing::debug!(kind = other, "ignoring ledger event type");
            Ok(Vec::new())
        }
    }
}

/// Parses an entry of ledger `ledger`'s log (`V2Log`: its `type` and `data`) into the
/// Hop 2 messages its webhook would have carried (possibly none).
///
/// # Errors
/// `InvalidInput` naming the JSON path when `data` is not JSON, a transaction or its
/// `id` is missing, or its outbox metadata is malformed.
pub fn messages_from_log(ledger: &str, log_type: &str, data: &[u8]) -> Result<Vec<FanoutMessage>> {
    let data: Value = serde_json::from_slice(data)
        .map_err(|e| Error::invalid("data", format!("not a Formance log entry: {e}")))?;
    let origin = Origin {
        payload: &data,
        ledger: Some(ledger),
        trace: &TraceContext::default(),
    };
    let transaction = |kind| {
        let path = "data.transaction";
        let tx = data
            .get("transaction")
            .ok_or_else(|| Error::invalid(path, "missing"))?;
        Ok::<_, Error>(
            transaction_message(&origin, path, tx, kind)?
                .into_iter()
                .collect(),
        )
    };
    match log_type {
        "NEW_TRANSACTION" => transaction(MessageKind::Committed),
        "REVERTED_TRANSACTION" => transaction(MessageKind::Reverted),
        "SET_METADATA" => Ok(rejection_notice(&origin)?.into_iter().collect()),
        other => {
            tracing::debug!(log_type = other, "ignoring ledger log type");
            Ok(Vec::new())
        }
    }
}

fn transaction_message(
    origin: &Origin<'_>,
    path: &str,
    tx: &Value,
    kind: MessageKind,
) -> Result<Option<FanoutMessage>> {
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
    let ledger_tx_id = tx
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| Error::invalid(format!("{path}.id"), "missing or not a transaction id"))?;
    outbox_message(origin, metadata, kind, Some(ledger_tx_id), sorted_json(tx)).map(Some)
}

fn rejection_notice(origin: &Origin<'_>) -> Result<Option<FanoutMessage>> {
    let payload = origin.payload;
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
    let bytes = sorted_json(&Value::Object(metadata.clone()));
    outbox_message(origin, metadata, MessageKind::Rejected, None, bytes).map(Some)
}

/// Compact JSON with object keys sorted at every level, whatever order the source
/// had (a log entry's transaction comes in struct order, a webhook's sorted) and
/// whatever `serde_json`'s map keeps: the payload bytes consumers get do not depend on
/// which path brought the event.
fn sorted_json(value: &Value) -> Vec<u8> {
    fn write(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, key).expect("a string serialises");
                    out.push(b':');
                    write(item, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            scalar => serde_json::to_writer(&mut *out, scalar).expect("a scalar serialises"),
        }
    }
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    out
}

fn outbox_message(
    origin: &Origin<'_>,
    metadata: &Map<String, Value>,
    kind: MessageKind,
    ledger_tx_id: Option<u64>,
    payload: Vec<u8>,
) -> Result<FanoutMessage> {
    let text = |key: &str| {
        metadata
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid(format!("metadata.{key}"), "missing or not a string"))
    };
    let sequence = text(OUTBOX_SEQUENCE_KEY)?;
    // The delivery's own trace headers win; a ledger that knows nothing about tracing
    // sends none, and then the trace enqueue put in the metadata carries on.
    let trace = if origin.trace.traceparent.is_some() {
        origin.trace.clone()
    } else {
        metadata_trace(metadata)
    };
    Ok(FanoutMessage {
        // Consumers key their inbox on it and refuse a message without one: an empty
        // id is refused here, before it is stored.
        instruction_id: Some(text(OUTBOX_EVENT_ID_KEY)?)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| Error::invalid(format!("metadata.{OUTBOX_EVENT_ID_KEY}"), "is empty"))?
            .to_owned(),
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
        ledger: origin.ledger()?,
        ledger_tx_id,
        traceparent: trace.traceparent,
        tracestate: trace.tracestate,
        payload,
    })
}

/// The trace context the ledger transaction's metadata carries (enqueue wrote it
/// there: `traceparent`, `tracestate`); none when it has none or a malformed one — a
/// trace never holds a message back.
fn metadata_trace(metadata: &Map<String, Value>) -> TraceContext {
    let Some(parent) = metadata.get(TRACEPARENT).and_then(Value::as_str) else {
        return TraceContext::default();
    };
    let state = metadata.get(TRACESTATE).and_then(Value::as_str);
    match outbox_core::TraceContext::parse(parent, state) {
        Ok(trace) => TraceContext {
            traceparent: Some(trace.traceparent().to_owned()),
            tracestate: trace.tracestate().map(str::to_owned),
        },
        Err(e) => {
            tracing::debug!("ignoring the transaction's trace context: {e}");
            TraceContext::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEPARENT_VALUE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn committed(metadata: &str) -> Vec<u8> {
        format!(
            r#"{{"idempotency_key":"","date":"2026-10-07T10:00:00.000000Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{{"accountMetadata":{{}},"ledger":"payouts","transactions":[{{"id":7,"metadata":{metadata},"postings":[{{"amount":48500000,"asset":"USD/2","destination":"b","source":"a"}}]}}]}}}}"#
        )
        .into_bytes()
    }

    fn outbox_metadata(id: &str) -> String {
        format!(
            r#"{{"outbox_event_id":"{id}","outbox_account":"merchants:4471","outbox_sequence":"2"}}"#
        )
    }

    fn untraced(body: &[u8]) -> Result<Vec<FanoutMessage>> {
        messages_from_webhook(body, &TraceContext::default())
    }

    #[test]
    fn committed_transaction_with_outbox_metadata() {
        let id = "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59";
        let messages = untraced(&committed(&outbox_metadata(id))).unwrap();
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
        assert_eq!((m.ledger.as_str(), m.ledger_tx_id), ("payouts", Some(7)));
        assert_eq!(
            (m.traceparent.as_deref(), m.tracestate.as_deref()),
            (None, None)
        );
        assert_eq!(m.dedup_key(), "payouts:tx:7:committed");
        let tx: Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(tx["postings"][0]["amount"], 48_500_000);
    }

    #[test]
    fn trace_context_of_the_delivery_is_carried() {
        let headers: RequestHeaders =
            [(TRACEPARENT, TRACEPARENT_VALUE), (TRACESTATE, "vendor=abc")]
                .into_iter()
                .collect();
        let trace = TraceContext::from_headers(&headers);
        let messages = messages_from_webhook(&committed(&outbox_metadata("e")), &trace).unwrap();
        assert_eq!(
            (
                messages[0].traceparent.as_deref(),
                messages[0].tracestate.as_deref()
            ),
            (Some(TRACEPARENT_VALUE), Some("vendor=abc"))
        );
        assert_eq!(
            TraceContext::from_headers(&RequestHeaders::new()),
            TraceContext::default()
        );
    }

    #[test]
    fn without_trace_headers_the_transactions_metadata_gives_the_trace_context() {
        const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let traced = format!(
            r#"{{"outbox_event_id":"e","outbox_account":"merchants:4471","outbox_sequence":"2","traceparent":"{TRACEPARENT_VALUE}","tracestate":"vendor=abc"}}"#
        );
        let from_metadata = untraced(&committed(&traced)).unwrap();
        assert_eq!(
            (
                from_metadata[0].traceparent.as_deref(),
                from_metadata[0].tracestate.as_deref()
            ),
            (Some(TRACEPARENT_VALUE), Some("vendor=abc"))
        );

        // The delivery's own headers win over the metadata.
        let headers: RequestHeaders = [(TRACEPARENT, OTHER)].into_iter().collect();
        let delivered =
            messages_from_webhook(&committed(&traced), &TraceContext::from_headers(&headers))
                .unwrap();
        assert_eq!(
            (
                delivered[0].traceparent.as_deref(),
                delivered[0].tracestate.as_deref()
            ),
            (Some(OTHER), None)
        );

        // A malformed one in the metadata is ignored, the message still goes.
        let bad = r#"{"outbox_event_id":"e","outbox_account":"merchants:4471","outbox_sequence":"2","traceparent":"garbage"}"#;
        let messages = untraced(&committed(bad)).unwrap();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].traceparent, None);
    }

    #[test]
    fn ledger_and_transaction_id_are_required_and_named() {
        let without_ledger = String::from_utf8(committed(&outbox_metadata("e")))
            .unwrap()
            .replace(r#""ledger":"payouts","#, "");
        assert_eq!(
            untraced(without_ledger.as_bytes()).unwrap_err().field(),
            Some("payload.ledger")
        );
        let without_id = String::from_utf8(committed(&outbox_metadata("e")))
            .unwrap()
            .replace(r#""id":7,"#, "");
        assert_eq!(
            untraced(without_id.as_bytes()).unwrap_err().field(),
            Some("payload.transactions[0].id")
        );
    }

    #[test]
    fn foreign_transactions_are_skipped_and_bad_metadata_named() {
        assert!(untraced(&committed("{}")).unwrap().is_empty());
        let err = untraced(&committed(
            r#"{"outbox_event_id":"x","outbox_account":"merchants:1","outbox_sequence":"two"}"#,
        ))
        .unwrap_err();
        assert_eq!(err.field(), Some("metadata.outbox_sequence"));
        assert_eq!(untraced(b"[1]").unwrap_err().field(), Some("body"));
    }

    /// The `webhook_body` fuzz target's round trip failed on this input: an empty
    /// instruction id was accepted (and would be stored), then refused by every
    /// consumer (`header outbox-instruction-id: missing`). The intake refuses it.
    #[test]
    fn an_empty_instruction_id_is_refused_naming_the_key() {
        let err = untraced(&committed(&outbox_metadata(""))).unwrap_err();
        assert_eq!(err.field(), Some("metadata.outbox_event_id"), "{err}");
        let err = messages_from_log(
            "payouts",
            "NEW_TRANSACTION",
            br#"{"transaction":{"id":7,"metadata":{"outbox_event_id":"","outbox_account":"merchants:1","outbox_sequence":"2"}}}"#,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("metadata.outbox_event_id"), "{err}");
    }

    #[test]
    fn rejection_notice_from_saved_metadata() {
        let body = br#"{"type":"ledger.saved_metadata","payload":{"ledger":"payouts","targetType":"ACCOUNT","targetId":"merchants:9","metadata":{"outbox_event_id":"e","outbox_account":"merchants:9","outbox_sequence":"3","outbox_rejected_code":"INSUFFICIENT_FUND"}}}"#;
        let messages = untraced(body).unwrap();
        assert_eq!(
            (messages[0].kind, messages[0].sequence),
            (MessageKind::Rejected, 3)
        );
        assert_eq!(
            (messages[0].ledger.as_str(), messages[0].ledger_tx_id),
            ("payouts", None)
        );
        assert_eq!(messages[0].dedup_key(), "payouts:rejected:e");
        let plain = br#"{"type":"ledger.saved_metadata","payload":{"targetType":"ACCOUNT","targetId":"a","metadata":{"k":"v"}}}"#;
        assert!(untraced(plain).unwrap().is_empty());
    }

    #[test]
    fn reverted_transaction_is_a_reversal_with_the_reverting_id() {
        let body = br#"{"type":"ledger.reverted_transaction","payload":{"ledger":"payouts","revertedTransaction":{"id":1,"metadata":{}},"revertTransaction":{"id":9,"metadata":{"outbox_event_id":"r","outbox_account":"merchants:1","outbox_sequence":"4","com.formance.spec/state/reverts":"1"},"postings":[]}}}"#;
        let messages = untraced(body).unwrap();
        assert_eq!(
            (
                messages[0].kind,
                messages[0].instruction_id.as_str(),
                messages[0].ledger_tx_id
            ),
            (MessageKind::Reverted, "r", Some(9))
        );
        assert_eq!(messages[0].dedup_key(), "payouts:tx:9:reverted");
    }

    #[test]
    fn log_entries_give_the_messages_their_webhooks_give() {
        let id = "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59";
        // The log lists the transaction in struct order, the webhook with sorted keys.
        let data = format!(
            r#"{{"transaction":{{"postings":[{{"source":"a","destination":"b","amount":48500000,"asset":"USD/2"}}],"metadata":{},"id":7}},"accountMetadata":{{}}}}"#,
            outbox_metadata(id)
        );
        let from_log = messages_from_log("payouts", "NEW_TRANSACTION", data.as_bytes()).unwrap();
        let from_webhook = untraced(&committed(&outbox_metadata(id))).unwrap();
        assert_eq!(from_log, from_webhook);
        assert_eq!(
            String::from_utf8(from_log[0].payload.clone()).unwrap(),
            r#"{"id":7,"metadata":{"outbox_account":"merchants:4471","outbox_event_id":"0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59","outbox_sequence":"2"},"postings":[{"amount":48500000,"asset":"USD/2","destination":"b","source":"a"}]}"#
        );

        let reverted = br#"{"revertedTransaction":{"id":1,"metadata":{}},"transaction":{"id":9,"metadata":{"outbox_event_id":"r","outbox_account":"merchants:1","outbox_sequence":"4","com.formance.spec/state/reverts":"1"},"postings":[]}}"#;
        let messages = messages_from_log("payouts", "REVERTED_TRANSACTION", reverted).unwrap();
        assert_eq!(messages[0].dedup_key(), "payouts:tx:9:reverted");

        let notice = br#"{"targetType":"ACCOUNT","targetId":"merchants:9","metadata":{"outbox_event_id":"e","outbox_account":"merchants:9","outbox_sequence":"3","outbox_rejected_code":"INSUFFICIENT_FUND"}}"#;
        let messages = messages_from_log("payouts", "SET_METADATA", notice).unwrap();
        assert_eq!(
            (messages[0].kind, messages[0].dedup_key().as_str()),
            (MessageKind::Rejected, "payouts:rejected:e")
        );

        for (kind, data) in [
            ("NEW_TRANSACTION", &br#"{"transaction":{"id":3,"metadata":{}},"accountMetadata":{}}"#[..]),
            ("SET_METADATA", br#"{"targetType":"TRANSACTION","targetId":3,"metadata":{"outbox_rejected_code":"X"}}"#),
            ("DELETE_METADATA", br#"{"targetType":"ACCOUNT","targetId":"a","key":"k"}"#),
            ("INSERTED_SCHEMA", br#"{"schema":{}}"#),
        ] {
            assert!(messages_from_log("payouts", kind, data).unwrap().is_empty(), "{kind}");
        }
        let without_tx =
            messages_from_log("payouts", "NEW_TRANSACTION", br#"{"accountMetadata":{}}"#);
        assert_eq!(without_tx.unwrap_err().field(), Some("data.transaction"));
        let without_id = format!(
            r#"{{"transaction":{{"metadata":{}}}}}"#,
            outbox_metadata(id)
        );
        let err =
            messages_from_log("payouts", "NEW_TRANSACTION", without_id.as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some("data.transaction.id"));
        let err = messages_from_log("payouts", "NEW_TRANSACTION", b"not json").unwrap_err();
        assert_eq!(err.field(), Some("data"));
    }
}
