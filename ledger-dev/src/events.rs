//! Ledger events and the webhook body the Formance webhooks service POSTs.
//!
//! Body format (docs/LEDGER.md#webhook-deliveries):
//! `{"idempotency_key":"","date":…,"app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{…}}`
//! - the envelope keeps struct order; `type` is `lower(app) + "." + lower(type)`;
//! - the payload went through a Go `any`: object keys sorted at every level, numbers
//!   through float64 (integers above 2^53 lose precision, as they do there);
//! - compact, with Go's HTML escaping (`<` → `\u003c`, …).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Number, Value};

use crate::clock;
use crate::log::LogData;
use crate::model::Transaction;

/// An event the ledger publishes after a commit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// `COMMITTED_TRANSACTIONS`, `REVERTED_TRANSACTION`, `SAVED_METADATA`, `DELETED_METADATA`.
    pub(crate) kind: &'static str,
    pub(crate) payload: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CommittedTransactions<'a> {
    ledger: &'a str,
    transactions: [&'a Transaction; 1],
    account_metadata: &'a std::collections::BTreeMap<String, outbox_core::Metadata>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RevertedTransaction<'a> {
    ledger: &'a str,
    reverted_transaction: &'a Transaction,
    revert_transaction: &'a Transaction,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SavedMetadata<'a> {
    ledger: &'a str,
    target_type: &'a str,
    target_id: String,
    metadata: &'a outbox_core::Metadata,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeletedMetadata<'a> {
    ledger: &'a str,
    target_type: &'a str,
    target_id: String,
    key: &'a str,
}

/// Through JSON text rather than `serde_json::to_value`: volumes are u128, which
/// `to_value` rejects above u64 while the parser degrades them to f64 like Go does.
fn to_value<T: Serialize>(payload: &T) -> Value {
    let text = serde_json::to_string(payload).expect("event payloads serialise to JSON");
    serde_json::from_str(&text).expect("serde_json parses its own output")
}

/// The event a log entry publishes (one transaction per event, as the ledger does).
pub(crate) fn for_log(ledger: &str, data: &LogData) -> Event {
    match data {
        LogData::NewTransaction {
            transaction,
            account_metadata,
        } => Event {
            kind: "COMMITTED_TRANSACTIONS",
            payload: to_value(&CommittedTransactions {
                ledger,
                transactions: [transaction],
                account_metadata,
            }),
        },
        LogData::RevertedTransaction { reverted, revert } => Event {
            kind: "REVERTED_TRANSACTION",
            payload: to_value(&RevertedTransaction {
                ledger,
                reverted_transaction: reverted,
                revert_transaction: revert,
            }),
        },
        LogData::SetMetadata { target, metadata } => Event {
            kind: "SAVED_METADATA",
            payload: to_value(&SavedMetadata {
                ledger,
                target_type: target.type_name(),
                target_id: target.id_string(),
                metadata,
            }),
        },
        LogData::DeleteMetadata { target, key } => Event {
            kind: "DELETED_METADATA",
            payload: to_value(&DeletedMetadata {
                ledger,
                target_type: target.type_name(),
                target_id: target.id_string(),
                key,
            }),
        },
    }
}

impl Event {
    /// The webhook `type`: `ledger.committed_transactions`.
    pub(crate) fn webhook_type(&self) -> String {
        format!("ledger.{}", self.kind.to_lowercase())
    }

    /// The exact bytes the webhooks service would send for this event.
    pub(crate) fn webhook_body(&self, date: DateTime<Utc>) -> String {
        let mut out = String::with_capacity(512);
        out.push_str(r#"{"idempotency_key":"","date":"#);
        write_string(&clock::format(&date), &mut out);
        out.push_str(r#","app":"ledger","version":"v2","type":"#);
        write_string(&self.webhook_type(), &mut out);
        out.push_str(r#","payload":"#);
        write_go_json(&self.payload, &mut out);
        out.push('}');
        out
    }
}

/// Writes `value` as Go's `json.Marshal` of a decoded `any` would.
fn write_go_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted explicitly: serde_json's map may preserve insertion order when
            // another crate in the build enables `preserve_order`.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_go_json(item, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    let quoted = serde_json::to_string(s).expect("strings serialise");
    for c in quoted.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
}

const MAX_EXACT_F64: u64 = 1 << 53;

/// A number as float64 renders in Go: exact below 2^53, rounded above.
fn go_number(n: &Number) -> String {
    if let Some(u) = n.as_u64() {
        if u <= MAX_EXACT_F64 {
            return u.to_string();
        }
        #[allow(clippy::cast_precision_loss)] // the precision loss is the point
        return go_float(u as f64);
    }
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_EXACT_F64 {
            return i.to_string();
        }
        #[allow(clippy::cast_precision_loss)]
        return go_float(i as f64);
    }
    go_float(n.as_f64().unwrap_or(f64::NAN))
}

/// `strconv.FormatFloat(f, 'f' or 'e', -1, 64)` as `encoding/json` picks them.
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        // Rust writes `1e21`/`1.5e-7`; Go writes `1e+21`/`1.5e-07`, then
        // encoding/json trims `e-07` back to `e-7`.
        return match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => s,
        };
    }
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_sorts_payload_keys_and_escapes_like_go() {
        let event = Event {
            kind: "COMMITTED_TRANSACTIONS",
            payload: json!({"ledger": "a<b", "transactions": [{"z": 1, "a": 9_007_199_254_740_993_u64}], "accountMetadata": {}}),
        };
        let date = clock::parse("2025-01-15T10:00:00.125001Z").unwrap();
        assert_eq!(
            event.webhook_body(date),
            r#"{"idempotency_key":"","date":"2025-01-15T10:00:00.125001Z","app":"ledger","version":"v2","type":"ledger.committed_transactions","payload":{"accountMetadata":{},"ledger":"a\u003cb","transactions":[{"a":9007199254740992,"z":1}]}}"#
        );
    }

    #[test]
    fn floats_like_go() {
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(123.0), "123");
        assert_eq!(go_float(-2.5e22), "-2.5e+22");
    }
}
