//! What a Hop 2 message means to the treasury: its payload (the ledger transaction)
//! read into the change of each merchant's available balance.
//!
//! The payload is the Formance transaction the ledger committed, as JSON:
//! `{"id": 42, "postings": [{"source": "world", "destination":
//! "merchants:4471:available", "amount": 48500000, "asset": "USD/2"}], "metadata":
//! {…}}`. A reversal is the *reversing* transaction, whose postings the ledger already
//! swapped, so it is read exactly like a posting. A rejection notice carries the
//! refusal's metadata and moves no money.

use std::collections::BTreeMap;

use outbox_core::{Error, InboxMessage, MessageKind, Result};
use serde_json::Value;

/// The ledger accounts the treasury books: `merchants:<merchant>:available`.
/// Every other account (`world`, `merchants:<m>:payouts:pending`, fees) is the
/// ledger's business, not the treasury's.
const MERCHANT_PREFIX: &str = "merchants:";
const AVAILABLE_SUFFIX: &str = ":available";

/// What one message changes in the treasury.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impact {
    /// The ledger transaction id (`id`), kept in the journal; `None` for a notice.
    pub ledger_tx_id: Option<u64>,
    /// The change of `available_minor` per (merchant, asset), in minor units. A
    /// `BTreeMap`, so rows are always written in one global order (see `book.rs`).
    pub available: BTreeMap<(String, String), i64>,
}

/// Reads `message`'s payload into its [`Impact`]. A rejection notice has none: its
/// sequence is consumed and no money moved.
///
/// Call it before opening the transaction: a payload that cannot be read must fail
/// before anything is written, so it is never put in the gap queue, where it would
/// later fail the message that fills its gap.
///
/// # Errors
/// `InvalidInput` (permanent) naming the field: `payload` (not a JSON object),
/// `id`, `postings`, `postings[i].source` / `.destination` / `.asset`,
/// `postings[i].amount` (amounts are integers in minor units, `0..=i64::MAX`: a float
/// such as `1.5` or `1e3`, a negative or a larger number is refused, never rounded).
pub fn decode(message: &InboxMessage) -> Result<Impact> {
    if message.kind == MessageKind::Rejected {
        return Ok(Impact::default());
    }
    let tx: Value = serde_json::from_slice(&message.payload)
        .map_err(|e| Error::invalid("payload", format!("not JSON: {e}")))?;
    let tx = tx
        .as_object()
        .ok_or_else(|| Error::invalid("payload", "not a ledger transaction (a JSON object)"))?;
    let ledger_tx_id = match tx.get("id") {
        None | Some(Value::Null) => None,
        Some(id) => Some(
            id.as_u64()
                .ok_or_else(|| Error::invalid("id", format!("{id} is not a transaction id")))?,
        ),
    };
    let postings = tx
        .get("postings")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::invalid("postings", "missing or not an array"))?;
    let mut available = BTreeMap::new();
    for (i, posting) in postings.iter().enumerate() {
        let text = |name: &str| {
            posting
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    Error::invalid(format!("postings[{i}].{name}"), "missing or not a string")
                })
        };
        let (source, destination, asset) = (text("source")?, text("destination")?, text("asset")?);
        let amount = amount(posting.get("amount"), i)?;
        for (account, signed) in [(source, -amount), (destination, amount)] {
            if let Some(merchant) = merchant_of(account) {
                let total: &mut i64 = available
                    .entry((merchant.to_owned(), asset.to_owned()))
                    .or_default();
                *total = total.checked_add(signed).ok_or_else(|| {
                    Error::invalid("postings", "the amounts overflow a 64-bit balance change")
                })?;
            }
        }
    }
    Ok(Impact {
        ledger_tx_id,
        available,
    })
}

/// A posting's amount as exact minor units.
fn amount(value: Option<&Value>, i: usize) -> Result<i64> {
    let field = || format!("postings[{i}].amount");
    let number = value
        .and_then(Value::as_number)
        .ok_or_else(|| Error::invalid(field(), "missing or not a number"))?;
    // `as_i64` is `None` for a float (serde_json keeps `1.5` and `1e3` as f64) and for
    // an integer beyond i64: refused rather than rounded or wrapped.
    number.as_i64().filter(|a| *a >= 0).ok_or_else(|| {
        Error::invalid(
            field(),
            format!("{number} is not an integer amount in minor units (0..=i64::MAX)"),
        )
    })
}

/// `4471` for `merchants:4471:available`; `None` for any other account.
fn merchant_of(account: &str) -> Option<&str> {
    account
        .strip_prefix(MERCHANT_PREFIX)?
        .strip_suffix(AVAILABLE_SUFFIX)
        .filter(|m| !m.is_empty() && !m.contains(':'))
}

#[cfg(test)]
mod tests {
    use outbox_core::Account;

    use super::*;

    fn message(kind: MessageKind, payload: &str) -> InboxMessage {
        InboxMessage {
            instruction_id: "0190b4a2-0000-7000-8000-000000000001".into(),
            account: Account::parse("merchants:4471").unwrap(),
            sequence: 1,
            kind,
            payload: payload.as_bytes().to_vec(),
        }
    }

    fn committed(payload: &str) -> Result<Impact> {
        decode(&message(MessageKind::Committed, payload))
    }

    fn refused_field(payload: &str) -> String {
        let e = committed(payload).unwrap_err();
        assert!(!e.is_transient(), "{e}");
        e.field().expect("the error names a field").to_owned()
    }

    fn posting(amount: &str) -> String {
        format!(
            r#"{{"id":7,"postings":[{{"source":"world","destination":"merchants:4471:available","amount":{amount},"asset":"USD/2"}}]}}"#
        )
    }

    #[test]
    fn a_payout_debits_the_merchants_available_balance_only() {
        let impact = committed(
            r#"{"id":42,"postings":[{"source":"merchants:4471:available","destination":"merchants:4471:payouts:pending","amount":48500000,"asset":"USD/2"}],"metadata":{"outbox_event_id":"e"}}"#,
        )
        .unwrap();
        assert_eq!(impact.ledger_tx_id, Some(42));
        assert_eq!(
            impact.available.into_iter().collect::<Vec<_>>(),
            vec![(("4471".to_owned(), "USD/2".to_owned()), -48_500_000)]
        );
    }

    #[test]
    fn postings_are_summed_per_merchant_and_asset() {
        let impact = committed(
            r#"{"id":1,"postings":[
                {"source":"world","destination":"merchants:1:available","amount":500,"asset":"USD/2"},
                {"source":"merchants:1:available","destination":"merchants:2:available","amount":200,"asset":"USD/2"},
                {"source":"world","destination":"merchants:1:available","amount":9,"asset":"EUR/2"}]}"#,
        )
        .unwrap();
        let key = |m: &str, a: &str| (m.to_owned(), a.to_owned());
        assert_eq!(impact.available.get(&key("1", "USD/2")), Some(&300));
        assert_eq!(impact.available.get(&key("2", "USD/2")), Some(&200));
        assert_eq!(impact.available.get(&key("1", "EUR/2")), Some(&9));
        assert_eq!(impact.available.len(), 3);
    }

    #[test]
    fn a_reversal_is_read_like_a_posting_its_postings_are_already_swapped() {
        let impact = decode(&message(
            MessageKind::Reverted,
            r#"{"id":43,"postings":[{"source":"merchants:4471:payouts:pending","destination":"merchants:4471:available","amount":48500000,"asset":"USD/2"}],"metadata":{"com.formance.spec/state/reverts":"42"}}"#,
        ))
        .unwrap();
        assert_eq!(
            impact
                .available
                .get(&("4471".to_owned(), "USD/2".to_owned())),
            Some(&48_500_000)
        );
    }

    #[test]
    fn a_rejection_notice_moves_nothing_and_is_not_parsed() {
        let notice = decode(&message(
            MessageKind::Rejected,
            r#"{"outbox_rejected_code":"INSUFFICIENT_FUND"}"#,
        ))
        .unwrap();
        assert_eq!(notice, Impact::default());
    }

    #[test]
    fn a_float_amount_is_refused_naming_the_field_never_rounded() {
        assert_eq!(refused_field(&posting("12.5")), "postings[0].amount");
        assert_eq!(refused_field(&posting("100.0")), "postings[0].amount");
        assert_eq!(refused_field(&posting("1e3")), "postings[0].amount");
        let e = committed(&posting("12.5")).unwrap_err();
        assert!(e.to_string().contains("12.5"), "{e}");
    }

    #[test]
    fn negative_huge_and_textual_amounts_are_refused() {
        assert_eq!(refused_field(&posting("-1")), "postings[0].amount");
        assert_eq!(
            refused_field(&posting("9223372036854775808")),
            "postings[0].amount"
        );
        assert_eq!(refused_field(&posting(r#""100""#)), "postings[0].amount");
        assert_eq!(
            committed(&posting("9223372036854775807"))
                .unwrap()
                .available
                .len(),
            1
        );
    }

    #[test]
    fn the_second_bad_posting_is_named_by_its_index() {
        let payload = r#"{"postings":[
            {"source":"world","destination":"merchants:1:available","amount":1,"asset":"USD/2"},
            {"source":"world","destination":"merchants:1:available","amount":2.5,"asset":"USD/2"}]}"#;
        assert_eq!(refused_field(payload), "postings[1].amount");
        let no_asset =
            r#"{"postings":[{"source":"world","destination":"merchants:1:available","amount":1}]}"#;
        assert_eq!(refused_field(no_asset), "postings[0].asset");
        let no_source =
            r#"{"postings":[{"destination":"merchants:1:available","amount":1,"asset":"USD/2"}]}"#;
        assert_eq!(refused_field(no_source), "postings[0].source");
    }

    #[test]
    fn what_is_not_a_ledger_transaction_is_refused_naming_the_payload() {
        assert_eq!(refused_field("["), "payload");
        assert_eq!(refused_field("[1,2]"), "payload");
        assert_eq!(refused_field(r#"{"id":1}"#), "postings");
        assert_eq!(refused_field(r#"{"id":-1,"postings":[]}"#), "id");
    }

    #[test]
    fn summing_past_a_64_bit_balance_change_is_refused() {
        let max = i64::MAX;
        let payload = format!(
            r#"{{"postings":[
            {{"source":"world","destination":"merchants:1:available","amount":{max},"asset":"USD/2"}},
            {{"source":"world","destination":"merchants:1:available","amount":1,"asset":"USD/2"}}]}}"#
        );
        assert_eq!(refused_field(&payload), "postings");
    }

    #[test]
    fn only_merchant_available_accounts_are_booked() {
        assert_eq!(merchant_of("merchants:4471:available"), Some("4471"));
        assert_eq!(merchant_of("merchants:4471:payouts:pending"), None);
        assert_eq!(merchant_of("merchants::available"), None);
        assert_eq!(merchant_of("merchants:a:b:available"), None);
        assert_eq!(merchant_of("world"), None);
    }
}
