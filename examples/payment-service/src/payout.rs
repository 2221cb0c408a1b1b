//! `POST /payouts`: the request, its validation, and the outbox event it enqueues.

use outbox_core::{
    Account, Amount, Asset, Error, LedgerCommand, Metadata, NewEvent, PostBody, PostCommand,
    Posting, Result,
};
use serde::{Deserialize, Serialize};

use crate::answer::Failure;

/// What a client sends. Amounts are integers in the asset's minor units
/// (`USD/2` `48500000` is $485,000.00): a JSON float is refused, never rounded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutRequest {
    /// The client's id for this payout: a retry of the same request carries the same
    /// one, so the payout is written once.
    pub payout_id: String,
    pub merchant: String,
    pub amount_minor: u64,
    pub asset: String,
}

/// What the service answers for a payout it holds: 201 when this request wrote it,
/// 200 when an earlier request with the same payout id and body did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutAccepted {
    pub payout_id: String,
    /// The outbox event that carries the payout to the ledger (its idempotency key).
    pub event_id: String,
    /// The event's place in the merchant's sequence.
    pub sequence: u64,
}

/// How writing a payout ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// This request wrote the payout and its outbox event.
    New(PayoutAccepted),
    /// The same payout was written before (a client retry): nothing new.
    Again(PayoutAccepted),
    /// The payout id belongs to another payout.
    Conflict(String),
}

/// A checked payout, ready to be written.
#[derive(Debug, Clone)]
pub struct Payout {
    pub payout_id: String,
    pub merchant: String,
    pub amount: Amount,
    pub asset: Asset,
}

impl PayoutRequest {
    /// Checks every field, naming the one that is wrong.
    ///
    /// # Errors
    /// `InvalidInput` naming `payout_id`, `merchant`, `amount_minor` or `asset`.
    pub fn validate(self) -> Result<Payout> {
        let id_like = |field: &str, text: &str| -> Result<()> {
            let ok = (1..=64).contains(&text.len())
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if ok {
                Ok(())
            } else {
                Err(Error::invalid(
                    field,
                    format!("must be 1 to 64 letters, digits, '_' or '-', not {text:?}"),
                ))
            }
        };
        id_like("payout_id", &self.payout_id)?;
        id_like("merchant", &self.merchant)?;
        if self.amount_minor == 0 {
            return Err(Error::invalid("amount_minor", "a payout moves more than 0"));
        }
        if i64::try_from(self.amount_minor).is_err() {
            return Err(Error::invalid(
                "amount_minor",
                "larger than the payouts table's BIGINT column holds",
            ));
        }
        let asset = Asset::parse_field("asset", &self.asset)?;
        Ok(Payout {
            payout_id: self.payout_id,
            merchant: self.merchant,
            amount: Amount::new(self.amount_minor),
            asset,
        })
    }
}

impl Payout {
    /// The merchant's account: the outbox orders events per account, so each
    /// merchant's payouts reach the ledger in the order they were written.
    ///
    /// # Errors
    /// `InvalidInput` naming `merchant` (cannot happen after `validate`).
    pub fn account(&self) -> Result<Account> {
        Account::parse_field("merchant", &format!("merchants:{}", self.merchant))
    }

    /// The outbox event: move the amount from the merchant's available balance to
    /// its pending payouts, with a reference the ledger keeps unique per payout.
    ///
    /// # Errors
    /// `InvalidInput` naming `merchant` (cannot happen after `validate`).
    pub fn event(&self) -> Result<NewEvent> {
        let account = |suffix: &str| {
            Account::parse_field("merchant", &format!("merchants:{}:{suffix}", self.merchant))
        };
        let posting = Posting {
            source: account("available")?,
            destination: account("payouts:pending")?,
            amount: self.amount,
            asset: self.asset.clone(),
        };
        Ok(NewEvent::new(
            self.account()?,
            LedgerCommand::Post(PostCommand {
                body: PostBody::Postings(vec![posting]),
                reference: Some(format!("payout:{}", self.payout_id)),
                metadata: Metadata::from([("payout_id".to_owned(), self.payout_id.clone())]),
            }),
        ))
    }

    /// The answer when the payout id is already taken by `stored`: this same request
    /// written before (a client retry), or another payout.
    pub fn written_before(&self, stored: StoredPayout) -> Written {
        let same = self.merchant == stored.merchant
            && i64::try_from(self.amount.minor_units()) == Ok(stored.amount_minor)
            && self.asset.as_str() == stored.asset;
        if same {
            Written::Again(PayoutAccepted {
                payout_id: self.payout_id.clone(),
                event_id: stored.event_id,
                sequence: u64::try_from(stored.sequence).unwrap_or_default(),
            })
        } else {
            Written::Conflict(format!(
                "payout {} is already a payout of {} {} to merchant {}",
                self.payout_id, stored.amount_minor, stored.asset, stored.merchant
            ))
        }
    }
}

/// A row of the services' `payouts` table.
#[derive(Debug, Clone)]
pub struct StoredPayout {
    pub merchant: String,
    pub amount_minor: i64,
    pub asset: String,
    pub event_id: String,
    pub sequence: i64,
}

impl Written {
    /// The HTTP answer: 201 for a new payout, 200 for a retry, 409 for a taken id.
    ///
    /// # Errors
    /// [`Failure::Conflict`] for a payout id taken by another payout.
    pub fn answer(
        self,
    ) -> std::result::Result<(axum::http::StatusCode, axum::Json<PayoutAccepted>), Failure> {
        match self {
            Self::New(accepted) => Ok((axum::http::StatusCode::CREATED, axum::Json(accepted))),
            Self::Again(accepted) => Ok((axum::http::StatusCode::OK, axum::Json(accepted))),
            Self::Conflict(message) => Err(Failure::Conflict(message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(amount_minor: u64, asset: &str) -> PayoutRequest {
        PayoutRequest {
            payout_id: "po_1".into(),
            merchant: "4471".into(),
            amount_minor,
            asset: asset.into(),
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let field = |r: PayoutRequest| match r.validate().unwrap_err().kind() {
            outbox_core::ErrorKind::InvalidInput { field } => field.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(field(request(0, "USD/2")), "amount_minor");
        assert_eq!(field(request(1, "usd")), "asset");
        let mut r = request(1, "USD/2");
        r.merchant = "a b".into();
        assert_eq!(field(r), "merchant");
        let mut r = request(1, "USD/2");
        r.payout_id = String::new();
        assert_eq!(field(r), "payout_id");
    }

    #[test]
    fn a_payout_moves_available_to_pending_under_its_reference() {
        let payout = request(48_500_000, "USD/2").validate().unwrap();
        let event = payout.event().unwrap();
        assert_eq!(event.account.as_str(), "merchants:4471");
        let LedgerCommand::Post(post) = &event.command else {
            panic!("a post")
        };
        assert_eq!(post.reference.as_deref(), Some("payout:po_1"));
        let PostBody::Postings(postings) = &post.body else {
            panic!("postings")
        };
        assert_eq!(postings[0].source.as_str(), "merchants:4471:available");
        assert_eq!(
            postings[0].destination.as_str(),
            "merchants:4471:payouts:pending"
        );
        assert_eq!(postings[0].amount.minor_units(), 48_500_000);
    }
}
