//! Events and messages the suites build.

use outbox_core::{
    Account, Amount, Asset, FanoutMessage, InboxMessage, LedgerCommand, MessageKind, Metadata,
    NewEvent, PostBody, PostCommand, Posting,
};

pub fn account(name: &str) -> Account {
    Account::parse(name).expect("fixture account")
}

/// A payout of `amount` cents from the merchant's available balance to pending payouts.
pub fn payout(merchant: &str, amount: u64) -> NewEvent {
    transfer(
        merchant,
        &format!("merchants:{merchant}:available"),
        &format!("merchants:{merchant}:payouts:pending"),
        amount,
    )
}

/// A settlement credit of `amount` cents from `world` to the merchant's available
/// balance: what a real ledger commits without funds (a payout from an empty account
/// is refused).
pub fn settlement(merchant: &str, amount: u64) -> NewEvent {
    transfer(
        merchant,
        "world",
        &format!("merchants:{merchant}:available"),
        amount,
    )
}

fn transfer(merchant: &str, source: &str, destination: &str, amount: u64) -> NewEvent {
    let posting = Posting {
        source: account(source),
        destination: account(destination),
        amount: Amount::new(amount),
        asset: Asset::parse("USD/2").expect("fixture asset"),
    };
    NewEvent::new(
        account(&format!("merchants:{merchant}")),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![posting]),
            reference: None,
            metadata: Metadata::from([("event_type".to_owned(), "payout.requested".to_owned())]),
        }),
    )
}

/// A Hop 2 message whose payload the harness handlers read as `{"amount": n}`.
pub fn message(
    instruction_id: &str,
    account_name: &str,
    sequence: u64,
    kind: MessageKind,
    amount: i64,
) -> InboxMessage {
    InboxMessage {
        instruction_id: instruction_id.to_owned(),
        account: account(account_name),
        sequence,
        kind,
        payload: serde_json::to_vec(&serde_json::json!({ "amount": amount }))
            .expect("fixture payload"),
    }
}

/// Reads the `amount` a harness handler applies.
pub fn amount_of(message: &InboxMessage) -> outbox_core::Result<i64> {
    let value: serde_json::Value = serde_json::from_slice(&message.payload)
        .map_err(|e| outbox_core::Error::invalid("payload", e.to_string()))?;
    value["amount"]
        .as_i64()
        .ok_or_else(|| outbox_core::Error::invalid("payload.amount", "missing or not an integer"))
}

/// The signed treasury impact of a message: +amount committed, -amount reverted.
pub fn impact_of(message: &InboxMessage) -> outbox_core::Result<i64> {
    let amount = amount_of(message)?;
    Ok(match message.kind {
        MessageKind::Reverted => -amount,
        _ => amount,
    })
}

/// The W3C trace context the fan-out fixtures carry.
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
pub const TRACESTATE: &str = "rojo=00f067aa0ba902b7,congo=t61RcWkgMzE";

/// A Hop 2 message for ledger transaction `tx` (ledger `payouts`), every field set.
///
/// The payload is a ledger transaction as the webhook carried it: odd spacing and key
/// order, non-ASCII text and, after the JSON, bytes that are not UTF-8, so a store that
/// normalises JSON or decodes text fails the byte comparison.
pub fn fanout_message(
    instruction_id: &str,
    merchant: &str,
    sequence: u64,
    kind: MessageKind,
    tx: u64,
) -> FanoutMessage {
    let mut payload = format!(
        r#"{{"postings":[{{"source":"merchants:{merchant}:available","destination":"merchants:{merchant}:payouts:pending","amount":48500000,"asset":"USD/2"}}],  "id":{tx},"metadata":{{"outbox_event_id":"{instruction_id}","note":"Händler — 💸"}} ,"reference":"payout:settlement-2026-10-07:{merchant}"}}"#
    )
    .into_bytes();
    payload.extend_from_slice(&[0x00, 0xff, 0xfe, b'\n']);
    FanoutMessage {
        instruction_id: instruction_id.to_owned(),
        account: account(&format!("merchants:{merchant}")),
        sequence,
        kind,
        ledger: "payouts".to_owned(),
        ledger_tx_id: Some(tx),
        traceparent: Some(TRACEPARENT.to_owned()),
        tracestate: Some(TRACESTATE.to_owned()),
        payload,
    }
}

/// A rejection notice: the ledger refused the instruction, so there is no transaction
/// (`ledger_tx_id` is `None`); the payload is the notice's metadata object.
pub fn rejection_notice(instruction_id: &str, merchant: &str, sequence: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: instruction_id.to_owned(),
        account: account(&format!("merchants:{merchant}")),
        sequence,
        kind: MessageKind::Rejected,
        ledger: "payouts".to_owned(),
        ledger_tx_id: None,
        traceparent: Some(TRACEPARENT.to_owned()),
        tracestate: None,
        payload: format!(
            r#"{{"outbox_event_id":"{instruction_id}","error_code":"INSUFFICIENT_FUND","outbox_sequence":"{sequence}"}}"#
        )
        .into_bytes(),
    }
}

/// A Formance ledger transaction as Hop 2 carries it (~460 bytes): one payout posting
/// of merchant `account` with the outbox metadata, for benchmarks.
pub fn ledger_transaction_payload(
    account: usize,
    sequence: u64,
    tx_id: u64,
    instruction_id: &str,
) -> Vec<u8> {
    let amount = 1_000_000 + (tx_id % 97) * 1_250;
    format!(
        concat!(
            r#"{{"id":{tx},"postings":[{{"source":"merchants:{a}:available","#,
            r#""destination":"merchants:{a}:payouts:pending","amount":{amount},"asset":"USD/2"}}],"#,
            r#""metadata":{{"outbox_event_id":"{id}","outbox_account":"merchants:{a}","#,
            r#""outbox_sequence":"{seq}","event_type":"payout.requested"}},"#,
            r#""timestamp":"2025-03-14T09:26:53.589793Z","insertedAt":"2025-03-14T09:26:53.612345Z","#,
            r#""reference":"payout-{id}","reverted":false}}"#
        ),
        tx = tx_id,
        a = account,
        amount = amount,
        id = instruction_id,
        seq = sequence,
    )
    .into_bytes()
}
