//! The identity headers every transport puts beside the payload, and their parsing.
//!
//! | header | value |
//! | --- | --- |
//! | `outbox-instruction-id` | the outbox event id |
//! | `outbox-account` | the account (`merchants:4471`) |
//! | `outbox-sequence` | the per-account sequence, decimal |
//! | `outbox-event-type` | `committed`, `reverted` or `rejected` |
//! | `outbox-ledger` | the ledger name |
//! | `outbox-ledger-tx-id` | the ledger transaction id, decimal (absent on a rejection notice) |
//! | `traceparent`, `tracestate` | W3C trace context, when the event had one |
//!
//! Names are lowercase ASCII so they survive HTTP/2 and every broker unchanged.

use crate::domain::Account;
use crate::error::{Error, Result};
use crate::inbox::MessageKind;

use super::FanoutMessage;

/// The instruction id (the outbox event id): what the consumer's inbox keys on.
pub const INSTRUCTION_ID: &str = "outbox-instruction-id";
/// The account whose sequence orders the message (`merchants:4471`).
pub const ACCOUNT: &str = "outbox-account";
/// The per-account sequence, decimal.
pub const SEQUENCE: &str = "outbox-sequence";
/// The message kind: `committed`, `reverted` or `rejected`.
pub const EVENT_TYPE: &str = "outbox-event-type";
/// The name of the ledger that recorded the event.
pub const LEDGER: &str = "outbox-ledger";
/// The ledger transaction id, decimal; required except on a rejection notice.
pub const LEDGER_TX_ID: &str = "outbox-ledger-tx-id";
/// W3C trace context (`traceparent`) of the delivery that brought the event; optional.
pub const TRACEPARENT: &str = "traceparent";
/// W3C trace context (`tracestate`), carried beside `traceparent`; optional.
pub const TRACESTATE: &str = "tracestate";

/// The headers of `message`, in a fixed order.
pub fn encode(message: &FanoutMessage) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        (INSTRUCTION_ID, message.instruction_id.clone()),
        (ACCOUNT, message.account.as_str().to_owned()),
        (SEQUENCE, message.sequence.to_string()),
        (EVENT_TYPE, message.kind.as_str().to_owned()),
        (LEDGER, message.ledger.clone()),
    ];
    if let Some(tx) = message.ledger_tx_id {
        headers.push((LEDGER_TX_ID, tx.to_string()));
    }
    if let Some(tp) = &message.traceparent {
        headers.push((TRACEPARENT, tp.clone()));
    }
    if let Some(ts) = &message.tracestate {
        headers.push((TRACESTATE, ts.clone()));
    }
    headers
}

/// Rebuilds a message from its headers (looked up by name) and payload.
///
/// # Errors
/// `InvalidInput` naming the header (`header outbox-sequence`) that is missing or
/// malformed; such a message is a permanent failure for the consumer, never applied.
pub fn decode<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    payload: Vec<u8>,
) -> Result<FanoutMessage> {
    let required = |name: &str| {
        header(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::invalid(format!("header {name}"), "missing"))
    };
    let number = |name: &str, text: &str| {
        text.parse::<u64>().map_err(|_| {
            Error::invalid(
                format!("header {name}"),
                format!("{text:?} is not a number"),
            )
        })
    };
    let kind_text = required(EVENT_TYPE)?;
    let kind = MessageKind::parse(kind_text).ok_or_else(|| {
        Error::invalid(
            format!("header {EVENT_TYPE}"),
            format!("{kind_text:?} is not committed, reverted or rejected"),
        )
    })?;
    let ledger_tx_id = match header(LEDGER_TX_ID) {
        Some(text) => Some(number(LEDGER_TX_ID, text)?),
        None if kind == MessageKind::Rejected => None,
        None => return Err(Error::invalid(format!("header {LEDGER_TX_ID}"), "missing")),
    };
    Ok(FanoutMessage {
        instruction_id: required(INSTRUCTION_ID)?.to_owned(),
        account: Account::parse_field(&format!("header {ACCOUNT}"), required(ACCOUNT)?)?,
        sequence: number(SEQUENCE, required(SEQUENCE)?)?,
        kind,
        ledger: required(LEDGER)?.to_owned(),
        ledger_tx_id,
        traceparent: header(TRACEPARENT).map(str::to_owned),
        tracestate: header(TRACESTATE).map(str::to_owned),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FanoutMessage {
        FanoutMessage {
            instruction_id: "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59".into(),
            account: Account::parse("merchants:4471").unwrap(),
            sequence: 12,
            kind: MessageKind::Committed,
            ledger: "payouts".into(),
            ledger_tx_id: Some(41),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: None,
            payload: br#"{"id":41}"#.to_vec(),
        }
    }

    fn roundtrip(message: &FanoutMessage) -> Result<FanoutMessage> {
        let headers = encode(message);
        decode(
            |name| {
                headers
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.as_str())
            },
            message.payload.clone(),
        )
    }

    #[test]
    fn encode_then_decode_is_identity() {
        let m = sample();
        assert_eq!(roundtrip(&m).unwrap(), m);
        let notice = FanoutMessage {
            kind: MessageKind::Rejected,
            ledger_tx_id: None,
            traceparent: None,
            ..sample()
        };
        assert_eq!(roundtrip(&notice).unwrap(), notice);
    }

    #[test]
    fn bad_headers_are_named() {
        let headers = encode(&sample());
        let without = |skip: &'static str| {
            decode(
                |name| {
                    headers
                        .iter()
                        .find(|(n, _)| *n == name && *n != skip)
                        .map(|(_, v)| v.as_str())
                },
                Vec::new(),
            )
            .unwrap_err()
        };
        assert_eq!(without(SEQUENCE).field(), Some("header outbox-sequence"));
        assert_eq!(
            without(LEDGER_TX_ID).field(),
            Some("header outbox-ledger-tx-id")
        );
        assert_eq!(without(ACCOUNT).field(), Some("header outbox-account"));
        let err = decode(
            |name| match name {
                EVENT_TYPE => Some("posted"),
                _ => Some("1"),
            },
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("header outbox-event-type"));
    }
}
