//! A payout history as the ledger would have committed it, and what the treasury must
//! hold once it applied it: computed here from the instructions themselves, in
//! sequence order, once each — not by the service's decoder.

use std::collections::BTreeMap;

use outbox_core::{Account, FanoutMessage, MessageKind};
use serde_json::json;

/// What one instruction did to its merchant, as the payment side meant it.
#[derive(Debug, Clone, Copy)]
pub enum Intent {
    /// Money in: `world` → `merchants:<m>:available`.
    Fund { asset: &'static str, amount: i64 },
    /// A payout: `merchants:<m>:available` → `merchants:<m>:payouts:pending` (USD/2).
    Payout { amount: i64 },
    /// The ledger reverted the payout at sequence `of` (a higher sequence than it).
    Reverse { of: u64 },
    /// The ledger refused the instruction: a notice, no money moved.
    Rejected,
}

/// One instruction of the history and the message the fan-out publishes for it.
#[derive(Debug, Clone)]
pub struct Instruction {
    pub merchant: String,
    pub sequence: u64,
    pub intent: Intent,
    pub message: FanoutMessage,
}

/// Every merchant's instructions, each account in sequence order.
#[derive(Debug, Clone)]
pub struct History {
    pub instructions: Vec<Instruction>,
}

impl History {
    /// `merchants` merchants (`m0`, `m1`, …) with `per_merchant` instructions each:
    /// a funding first, then payouts and some EUR fundings; `m1` reverts its payout at
    /// sequence 2 at sequence 5, and `m2`'s sequence 4 is a rejection notice (when
    /// there are enough merchants and instructions). Amounts come from `rng`.
    pub fn new(merchants: usize, per_merchant: u64, rng: &mut fastrand::Rng) -> Self {
        assert!(per_merchant >= 5, "room for the reversal and the rejection");
        let mut instructions = Vec::new();
        let mut ledger_tx = 1_000;
        for m in 0..merchants {
            let merchant = format!("m{m}");
            for sequence in 1..=per_merchant {
                let intent = match (m, sequence) {
                    (_, 1) => Intent::Fund {
                        asset: "USD/2",
                        amount: rng.i64(10_000_000..90_000_000),
                    },
                    (1, 2) => Intent::Payout { amount: 48_500_000 },
                    (1, 5) => Intent::Reverse { of: 2 },
                    (2, 4) => Intent::Rejected,
                    _ if rng.u8(..4) == 0 => Intent::Fund {
                        asset: "EUR/2",
                        amount: rng.i64(1..5_000_000),
                    },
                    _ => Intent::Payout {
                        amount: rng.i64(1..1_000_000),
                    },
                };
                ledger_tx += 1;
                let message = message(&merchant, sequence, intent, ledger_tx, &instructions);
                instructions.push(Instruction {
                    merchant: merchant.clone(),
                    sequence,
                    intent,
                    message,
                });
            }
        }
        Self { instructions }
    }

    /// The instruction of `merchant` at `sequence`.
    pub fn get(&self, merchant: &str, sequence: u64) -> &Instruction {
        self.instructions
            .iter()
            .find(|i| i.merchant == merchant && i.sequence == sequence)
            .expect("an instruction of the history")
    }

    /// The available balance per (merchant, asset) after every instruction was applied
    /// once, in each merchant's sequence order (a rejection moves nothing, a reversal
    /// gives its payout back). Only instructions `keep` admits count.
    pub fn expected_balances(
        &self,
        keep: impl Fn(&Instruction) -> bool,
    ) -> BTreeMap<(String, String), i64> {
        let mut balances = BTreeMap::new();
        for i in self.instructions.iter().filter(|i| keep(i)) {
            let mut add = |asset: &str, change: i64| {
                *balances
                    .entry((i.merchant.clone(), asset.to_owned()))
                    .or_insert(0) += change;
            };
            match i.intent {
                Intent::Fund { asset, amount } => add(asset, amount),
                Intent::Payout { amount } => add("USD/2", -amount),
                Intent::Reverse { of } => match self.get(&i.merchant, of).intent {
                    Intent::Payout { amount } => add("USD/2", amount),
                    other => panic!("a reversal of {other:?}"),
                },
                Intent::Rejected => {}
            }
        }
        balances
    }

    /// The messages to publish: each instruction `keep` admits once, plus a second
    /// copy (a redelivery) of `duplicates` of them (a share, rounded; chosen at
    /// random), all shuffled within and across accounts.
    pub fn shuffled_with_duplicates(
        &self,
        duplicates: f64,
        rng: &mut fastrand::Rng,
        keep: impl Fn(&Instruction) -> bool,
    ) -> Vec<FanoutMessage> {
        let kept: Vec<&FanoutMessage> = self
            .instructions
            .iter()
            .filter(|i| keep(i))
            .map(|i| &i.message)
            .collect();
        let copies = (kept.len() as f64 * duplicates).round() as usize;
        let mut stream: Vec<FanoutMessage> = kept.iter().map(|m| (*m).clone()).collect();
        stream.extend(
            rng.choose_multiple(kept.iter(), copies)
                .into_iter()
                .map(|m| (*m).clone()),
        );
        rng.shuffle(&mut stream);
        stream
    }

    /// Moves the first copy of `early` in front of the first copy of `late`, if it is
    /// not already: on one account's queue, `early` then arrives first.
    pub fn put_first(stream: &mut [FanoutMessage], early: &str, late: &str) {
        let at = |id: &str| {
            stream
                .iter()
                .position(|m| m.instruction_id == id)
                .expect("in the stream")
        };
        let (e, l) = (at(early), at(late));
        if e > l {
            stream.swap(e, l);
        }
    }
}

/// The message the fan-out would carry: the ledger transaction as its payload (or the
/// rejection notice's metadata), the identity beside it.
fn message(
    merchant: &str,
    sequence: u64,
    intent: Intent,
    ledger_tx: u64,
    earlier: &[Instruction],
) -> FanoutMessage {
    let account = format!("merchants:{merchant}");
    let instruction_id = uuid::Uuid::now_v7().to_string();
    let available = format!("merchants:{merchant}:available");
    let pending = format!("merchants:{merchant}:payouts:pending");
    let metadata = json!({
        "outbox_event_id": instruction_id,
        "outbox_account": account,
        "outbox_sequence": sequence.to_string(),
    });
    let (kind, tx_id, payload) = match intent {
        Intent::Rejected => (
            MessageKind::Rejected,
            None,
            json!({
                "outbox_event_id": instruction_id, "outbox_account": account,
                "outbox_sequence": sequence.to_string(), "outbox_rejected_code": "INSUFFICIENT_FUND",
            }),
        ),
        Intent::Reverse { of } => {
            let target = earlier
                .iter()
                .find(|i| i.merchant == merchant && i.sequence == of)
                .expect("the reverted payout comes first");
            let Intent::Payout { amount } = target.intent else {
                panic!("only payouts are reverted");
            };
            let mut metadata = metadata;
            metadata["com.formance.spec/state/reverts"] =
                json!(target.message.ledger_tx_id.unwrap().to_string());
            (
                MessageKind::Reverted,
                Some(ledger_tx),
                // The reversing transaction: the payout's posting swapped.
                json!({"id": ledger_tx, "postings": [
                    {"source": pending, "destination": available, "amount": amount, "asset": "USD/2"}
                ], "metadata": metadata}),
            )
        }
        Intent::Fund { asset, amount } => (
            MessageKind::Committed,
            Some(ledger_tx),
            json!({"id": ledger_tx, "postings": [
                {"source": "world", "destination": available, "amount": amount, "asset": asset}
            ], "metadata": metadata}),
        ),
        Intent::Payout { amount } => (
            MessageKind::Committed,
            Some(ledger_tx),
            json!({"id": ledger_tx, "postings": [
                {"source": available, "destination": pending, "amount": amount, "asset": "USD/2"}
            ], "metadata": metadata}),
        ),
    };
    FanoutMessage {
        instruction_id,
        account: Account::parse(&account).unwrap(),
        sequence,
        kind,
        ledger: "payouts".into(),
        ledger_tx_id: tx_id,
        traceparent: None,
        tracestate: None,
        payload: serde_json::to_vec(&payload).unwrap(),
    }
}
