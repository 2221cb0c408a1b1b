//! The treasury impact of one Hop 2 message: balance deltas per (account, asset),
//! shared by the SQLite and Postgres reference consumers.

use outbox_core::{Error, InboxMessage, MessageKind, Result};
use serde::Deserialize;

#[derive(Deserialize)]
struct LedgerTransaction {
    #[serde(default)]
    postings: Vec<LedgerPosting>,
}

#[derive(Deserialize)]
struct LedgerPosting {
    source: String,
    destination: String,
    amount: serde_json::Number,
    asset: String,
}

/// One balance change in minor units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    pub account: String,
    pub asset: String,
    pub amount: i64,
}

/// The deltas of `message`: each posting debits its source and credits its
/// destination. A rejection notice has none (the sequence is consumed, no money moved).
///
/// # Errors
/// `InvalidInput` naming `payload` or `postings[i].amount` (amounts are integers in
/// minor units; a float or a negative number is refused, never rounded).
pub fn deltas(message: &InboxMessage) -> Result<Vec<Delta>> {
    if message.kind == MessageKind::Rejected {
        return Ok(Vec::new());
    }
    let tx: LedgerTransaction = serde_json::from_slice(&message.payload)
        .map_err(|e| Error::invalid("payload", format!("not a ledger transaction: {e}")))?;
    let mut deltas = Vec::with_capacity(tx.postings.len() * 2);
    for (i, p) in tx.postings.into_iter().enumerate() {
        let amount = p.amount.as_i64().filter(|a| *a >= 0).ok_or_else(|| {
            Error::invalid(
                format!("postings[{i}].amount"),
                format!("{} is not a non-negative i64", p.amount),
            )
        })?;
        deltas.push(Delta {
            account: p.source,
            asset: p.asset.clone(),
            amount: -amount,
        });
        deltas.push(Delta {
            account: p.destination,
            asset: p.asset,
            amount,
        });
    }
    Ok(deltas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::Account;

    fn message(kind: MessageKind, payload: &str) -> InboxMessage {
        InboxMessage {
            instruction_id: "e".into(),
            account: Account::parse("merchants:4471").unwrap(),
            sequence: 1,
            kind,
            payload: payload.as_bytes().to_vec(),
        }
    }

    #[test]
    fn postings_debit_the_source_and_credit_the_destination() {
        let m = message(
            MessageKind::Committed,
            r#"{"postings":[{"source":"merchants:4471:available","destination":"merchants:4471:payouts:pending","amount":48500000,"asset":"USD/2"}]}"#,
        );
        let d = deltas(&m).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].account.as_str(), d[0].amount),
            ("merchants:4471:available", -48_500_000)
        );
        assert_eq!(
            (d[1].account.as_str(), d[1].amount),
            ("merchants:4471:payouts:pending", 48_500_000)
        );
    }

    #[test]
    fn notices_move_nothing_and_floats_are_refused() {
        assert!(
            deltas(&message(MessageKind::Rejected, "{}"))
                .unwrap()
                .is_empty()
        );
        let float = message(
            MessageKind::Committed,
            r#"{"postings":[{"source":"a","destination":"b","amount":1.5,"asset":"USD/2"}]}"#,
        );
        assert_eq!(
            deltas(&float).unwrap_err().field(),
            Some("postings[0].amount")
        );
        assert_eq!(
            deltas(&message(MessageKind::Committed, "["))
                .unwrap_err()
                .field(),
            Some("payload")
        );
    }
}
