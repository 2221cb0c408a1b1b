//! `FanoutMessage`: one Hop 2 message, as stored by the intake and carried by every
//! transport.

use crate::domain::Account;
use crate::inbox::{InboxMessage, MessageKind};

/// One ledger event as Hop 2 carries it.
///
/// The payload is the ledger transaction JSON (committed or reverting transaction) or,
/// for a rejection notice, the notice's metadata object; transports carry it byte for
/// byte and the identity fields beside it (headers on Kafka, AMQP and HTTP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanoutMessage {
    /// The outbox event id from the ledger metadata (`outbox_event_id`).
    pub instruction_id: String,
    /// The account whose sequence orders the message (`outbox_account`); transports
    /// key on it (the Kafka message key), so one account's messages stay in order.
    pub account: Account,
    /// The per-account sequence (`outbox_sequence`), gapless from 1.
    pub sequence: u64,
    /// What the ledger did: committed, reverted, or refused (a rejection notice).
    pub kind: MessageKind,
    /// The ledger's name (`payouts`).
    pub ledger: String,
    /// The ledger transaction id; `None` for a rejection notice (nothing was posted).
    pub ledger_tx_id: Option<u64>,
    /// W3C trace context: the delivery's own, else the one enqueue recorded in the
    /// transaction's metadata (docs/TRACING.md); `None` when neither had one.
    pub traceparent: Option<String>,
    /// The `tracestate` that came with `traceparent`; `None` when there was none.
    pub tracestate: Option<String>,
    /// The body, byte for byte as the ledger adapter built it (see above).
    pub payload: Vec<u8>,
}

impl FanoutMessage {
    /// The intake's second dedup key besides the webhook id: the ledger re-emits a
    /// transaction on an idempotent replay (docs/LEDGER.md#events-and-replays) under a new webhook id.
    ///
    /// `<ledger>:tx:<id>:<kind>` for transactions, `<ledger>:rejected:<instruction id>`
    /// for rejection notices (they have no transaction).
    pub fn dedup_key(&self) -> String {
        match self.ledger_tx_id {
            Some(tx) => format!("{}:tx:{tx}:{}", self.ledger, self.kind.as_str()),
            None => format!(
                "{}:{}:{}",
                self.ledger,
                self.kind.as_str(),
                self.instruction_id
            ),
        }
    }

    /// What the consumer's inbox keys, orders and applies.
    pub fn to_inbox(&self) -> InboxMessage {
        InboxMessage {
            instruction_id: self.instruction_id.clone(),
            account: self.account.clone(),
            sequence: self.sequence,
            kind: self.kind,
            payload: self.payload.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: MessageKind, tx: Option<u64>) -> FanoutMessage {
        FanoutMessage {
            instruction_id: "0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59".into(),
            account: Account::parse("merchants:4471").unwrap(),
            sequence: 2,
            kind,
            ledger: "payouts".into(),
            ledger_tx_id: tx,
            traceparent: None,
            tracestate: None,
            payload: b"{}".to_vec(),
        }
    }

    #[test]
    fn dedup_key_separates_kinds_and_notices() {
        assert_eq!(
            message(MessageKind::Committed, Some(7)).dedup_key(),
            "payouts:tx:7:committed"
        );
        assert_ne!(
            message(MessageKind::Committed, Some(7)).dedup_key(),
            message(MessageKind::Reverted, Some(7)).dedup_key()
        );
        assert_eq!(
            message(MessageKind::Rejected, None).dedup_key(),
            "payouts:rejected:0190f2a0-7b1c-7cc2-8a4e-3f1d2c3b4a59"
        );
    }

    #[test]
    fn inbox_view_keeps_identity_and_payload() {
        let m = message(MessageKind::Reverted, Some(9));
        let inbox = m.to_inbox();
        assert_eq!(
            (
                inbox.instruction_id.as_str(),
                inbox.account.as_str(),
                inbox.sequence,
                inbox.kind,
                inbox.payload.as_slice()
            ),
            (
                m.instruction_id.as_str(),
                "merchants:4471",
                2,
                MessageKind::Reverted,
                &b"{}"[..]
            )
        );
    }
}
