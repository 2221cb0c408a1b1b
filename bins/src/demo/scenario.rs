//! The demo's payouts: the reference scenario (docs/ARCHITECTURE.md) plus generated payouts.

use outbox_core::{
    Account, Amount, Asset, EventId, LedgerCommand, Metadata, NewEvent, PostBody, PostCommand,
    Posting, RevertCommand,
};

/// The reference merchant (docs/ARCHITECTURE.md#the-reference-scenario).
pub const REFERENCE_MERCHANT: u32 = 4471;
/// $485,000.00 in USD/2 minor units.
pub const REFERENCE_AMOUNT: u64 = 48_500_000;
/// The merchant whose second event is refused for insufficient funds: 1007, or the
/// last generated merchant when there are fewer than seven.
pub fn refused_merchant(merchants: u32) -> u32 {
    1001 + merchants.clamp(1, 7) - 1
}

/// Every event of the demo, in enqueue order, and the ones the story follows.
#[derive(Debug)]
pub struct Scenario {
    pub events: Vec<NewEvent>,
    /// The first $485,000 payout: the relay is killed right after the ledger accepts it.
    pub payout_a: EventId,
    /// The second, genuine $485,000 payout to the same merchant.
    pub payout_b: EventId,
    /// The reversal of payout A (delivered to the consumer before A itself).
    pub reversal: EventId,
    /// The payout refused with INSUFFICIENT_FUND.
    pub refused: EventId,
}

fn account(text: &str) -> Account {
    Account::parse(text).expect("demo addresses are valid")
}

fn usd() -> Asset {
    Asset::parse("USD/2").expect("USD/2 is valid")
}

fn available(merchant: u32) -> Account {
    account(&format!("merchants:{merchant}:available"))
}

fn post(
    merchant: u32,
    source: Account,
    destination: Account,
    amount: u64,
    reference: String,
    event_type: &str,
) -> NewEvent {
    let metadata = Metadata::from([
        ("event_type".to_owned(), event_type.to_owned()),
        ("payout_id".to_owned(), reference.clone()),
    ]);
    NewEvent::new(
        account(&format!("merchants:{merchant}")),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source,
                destination,
                amount: Amount::new(amount),
                asset: usd(),
            }]),
            reference: Some(reference),
            metadata,
        }),
    )
    .with_event_id(EventId::new())
}

/// The settlement credit that funds a merchant's available balance.
fn funding(merchant: u32, amount: u64) -> NewEvent {
    post(
        merchant,
        account("world"),
        available(merchant),
        amount,
        format!("settlement:2026-10-06:{merchant}"),
        "settlement.credited",
    )
}

fn payout(merchant: u32, amount: u64, reference: String) -> NewEvent {
    post(
        merchant,
        available(merchant),
        account(&format!("merchants:{merchant}:payouts:pending")),
        amount,
        reference,
        "payout.requested",
    )
}

impl Scenario {
    /// `payouts` generated payouts spread over `merchants` merchants (ids from 1001),
    /// with amounts from a fixed seed so every run tells the same story.
    pub fn build(payouts: usize, merchants: u32) -> Self {
        let merchants = merchants.max(1);
        let mut rng = fastrand::Rng::with_seed(4471);
        let mut generated: Vec<Vec<u64>> = vec![Vec::new(); merchants as usize];
        for i in 0..payouts {
            generated[i % merchants as usize].push(rng.u64(1_000..=2_500_000));
        }
        let mut events = Vec::new();

        // The reference scenario: merchant 4471, two genuine $485,000 payouts and a reversal of the first.
        let m = REFERENCE_MERCHANT;
        events.push(funding(m, 2 * REFERENCE_AMOUNT + 1_000_000));
        let a = payout(
            m,
            REFERENCE_AMOUNT,
            format!("payout:settlement-2026-10-07:{m}"),
        );
        let b = payout(
            m,
            REFERENCE_AMOUNT,
            format!("payout:settlement-2026-10-08:{m}"),
        );
        let (payout_a, payout_b) = (
            a.event_id.unwrap_or_default(),
            b.event_id.unwrap_or_default(),
        );
        let reversal = NewEvent::new(
            account(&format!("merchants:{m}")),
            LedgerCommand::Revert(RevertCommand {
                event_id: payout_a,
                metadata: Metadata::from([
                    ("event_type".to_owned(), "payout.reversed".to_owned()),
                    (
                        "payout_id".to_owned(),
                        format!("payout:settlement-2026-10-07:{m}"),
                    ),
                ]),
            }),
        )
        .with_event_id(EventId::new());
        let reversal_id = reversal.event_id.unwrap_or_default();
        events.extend([a, b, reversal]);

        let mut refused = EventId::default();
        let refused_merchant = refused_merchant(merchants);
        for (index, amounts) in generated.iter().enumerate() {
            let merchant = 1001 + index as u32;
            let total: u64 = amounts.iter().sum();
            events.push(funding(merchant, total + 10_000));
            if merchant == refused_merchant {
                // More than the merchant will ever hold: refused, and the merchant goes on.
                let too_much = payout(
                    merchant,
                    total + 1_000_000_000,
                    format!("payout:overdraft:{merchant}"),
                );
                refused = too_much.event_id.unwrap_or_default();
                events.push(too_much);
            }
            for (n, amount) in amounts.iter().enumerate() {
                events.push(payout(
                    merchant,
                    *amount,
                    format!("payout:2026-10-07:{merchant}:{n}"),
                ));
            }
        }
        Self {
            events,
            payout_a,
            payout_b,
            reversal: reversal_id,
            refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The story needs its refused payout whatever the size asked for: with fewer
    /// merchants than the refused one's index, none was generated and the demo's own
    /// check failed ("expected exactly one rejection").
    #[test]
    fn every_scenario_holds_its_refused_payout() {
        for merchants in [1, 3, 7, 50] {
            let scenario = Scenario::build(20, merchants);
            assert!(
                scenario
                    .events
                    .iter()
                    .any(|e| e.event_id == Some(scenario.refused)),
                "{merchants} merchants: the refused payout is not among the events"
            );
        }
    }
}
