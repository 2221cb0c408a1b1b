//! Events and messages the suites build.

use outbox_core::{
    Account, Amount, Asset, InboxMessage, LedgerCommand, MessageKind, Metadata, NewEvent, PostBody,
    PostCommand, Posting,
};

pub fn account(name: &str) -> Account {
    Account::parse(name).expect("fixture account")
}

/// A payout of `amount` cents from the merchant's available balance to pending payouts.
pub fn payout(merchant: &str, amount: u64) -> NewEvent {
    let posting = Posting {
        source: account(&format!("merchants:{merchant}:available")),
        destination: account(&format!("merchants:{merchant}:payouts:pending")),
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
