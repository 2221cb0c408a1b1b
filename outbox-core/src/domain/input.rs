//! Untyped input (a JSON line of `outbox enqueue`, an API body) turned into a
//! [`NewEvent`], with errors that name the exact field (`postings[2].amount`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Number;

use super::{
    Account, Amount, Asset, EventId, LedgerCommand, Metadata, NewEvent, PostBody, PostCommand,
    Posting, RevertCommand, Script,
};
use crate::error::{Error, Result};
use crate::trace::TraceContext;

/// One payout as written by hand or by another system.
///
/// Exactly one of `postings`, `script` or `revert` is given.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNewEvent {
    /// The account whose sequence orders the event (usually the merchant,
    /// `merchants:4471`); becomes [`NewEvent::account`].
    pub account: String,
    /// A UUID v7 the caller already has (an API request id) to use as the event id;
    /// `None`: a fresh v7 is made at enqueue.
    #[serde(default)]
    pub event_id: Option<String>,
    /// The movements to post; amounts are integers in minor units, a float is refused.
    #[serde(default)]
    pub postings: Option<Vec<RawPosting>>,
    /// A Numscript program to post instead of postings.
    #[serde(default)]
    pub script: Option<String>,
    /// The script's variables (values as strings: `"USD/2 100"`); only with `script`.
    #[serde(default)]
    pub vars: Option<BTreeMap<String, String>>,
    /// The event id of an earlier payout to revert.
    #[serde(default)]
    pub revert: Option<String>,
    /// The ledger transaction's reference (unique per ledger); not allowed with
    /// `revert`.
    #[serde(default)]
    pub reference: Option<String>,
    /// Metadata of the ledger transaction; the `outbox_*` keys are reserved.
    #[serde(default)]
    pub metadata: Metadata,
    /// The caller's W3C `traceparent`, recorded in the transaction's metadata
    /// (docs/TRACING.md).
    #[serde(default)]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent`; only with it.
    #[serde(default)]
    pub tracestate: Option<String>,
}

/// A posting with its amount as a raw JSON number, so a float can be named and refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPosting {
    /// The account debited (an address without `@`).
    pub source: String,
    /// The account credited.
    pub destination: String,
    /// The amount in minor units, as written: it must be a non-negative integer
    /// (`48500000`), never `485000.00`.
    pub amount: Number,
    /// The asset with its scale (`USD/2`).
    pub asset: String,
}

impl RawNewEvent {
    /// Validates every field, naming the first bad one.
    pub fn into_new_event(self) -> Result<NewEvent> {
        let account = Account::parse_field("account", &self.account)?;
        let event_id = self
            .event_id
            .as_deref()
            .map(|id| EventId::parse_field("event_id", id))
            .transpose()?;
        let trace = match (self.traceparent.as_deref(), self.tracestate.as_deref()) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(Error::invalid(
                    "tracestate",
                    "a tracestate travels with a traceparent: give both or neither",
                ));
            }
            (Some(parent), state) => Some(TraceContext::parse(parent, state)?),
        };
        let given = [
            self.postings.is_some(),
            self.script.is_some(),
            self.revert.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(Error::invalid(
                "postings",
                "give exactly one of postings, script or revert",
            ));
        }
        if self.vars.is_some() && self.script.is_none() {
            return Err(Error::invalid("vars", "vars are only allowed with script"));
        }
        let command = if let Some(target) = self.revert {
            if self.reference.is_some() {
                return Err(Error::invalid("reference", "a revert takes no reference"));
            }
            LedgerCommand::Revert(RevertCommand {
                event_id: EventId::parse_field("revert", &target)?,
                metadata: self.metadata,
            })
        } else {
            let body = match (self.postings, self.script) {
                (Some(postings), _) => PostBody::Postings(
                    postings
                        .into_iter()
                        .enumerate()
                        .map(|(i, p)| p.into_posting(i))
                        .collect::<Result<_>>()?,
                ),
                (None, Some(plain)) => PostBody::Script(Script {
                    plain,
                    vars: self.vars.unwrap_or_default(),
                }),
                (None, None) => {
                    unreachable!("exactly one of postings, script or revert was checked above")
                }
            };
            LedgerCommand::Post(PostCommand {
                body,
                reference: self.reference,
                metadata: self.metadata,
            })
        };
        let event = NewEvent {
            account,
            command,
            event_id,
            trace,
        };
        event.validate()?;
        Ok(event)
    }
}

impl RawPosting {
    fn into_posting(self, index: usize) -> Result<Posting> {
        let field = |name: &str| format!("postings[{index}].{name}");
        let amount = self.amount.as_u64().ok_or_else(|| {
            Error::invalid(
                field("amount"),
                format!("{} is not an unsigned integer in minor units (UMN: USD/2 48500000 is $485,000.00)", self.amount),
            )
        })?;
        Ok(Posting {
            source: Account::parse_field(&field("source"), &self.source)?,
            destination: Account::parse_field(&field("destination"), &self.destination)?,
            amount: Amount::new(amount),
            asset: Asset::parse_field(&field("asset"), &self.asset)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<NewEvent> {
        let raw: RawNewEvent =
            serde_json::from_str(json).map_err(|e| Error::invalid("json", e.to_string()))?;
        raw.into_new_event()
    }

    #[test]
    fn reference_payout_parses() {
        let e = parse(
            r#"{"account":"merchants:4471","postings":[{"source":"merchants:4471:available","destination":"merchants:4471:payouts:pending","amount":48500000,"asset":"USD/2"}],"reference":"payout:settlement-2026-10-07:4471","metadata":{"event_type":"payout.requested"}}"#,
        )
        .unwrap();
        assert_eq!(e.account.as_str(), "merchants:4471");
        let LedgerCommand::Post(post) = e.command else {
            panic!("not a post")
        };
        let PostBody::Postings(p) = post.body else {
            panic!("not postings")
        };
        assert_eq!(p[0].amount.minor_units(), 48_500_000);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (r#"{"account":"m 1","postings":[]}"#, "account"),
            (
                r#"{"account":"m","postings":[{"source":"world","destination":"m","amount":4850.5,"asset":"USD/2"}]}"#,
                "postings[0].amount",
            ),
            (
                r#"{"account":"m","postings":[{"source":"world","destination":"m","amount":-5,"asset":"USD/2"}]}"#,
                "postings[0].amount",
            ),
            (
                r#"{"account":"m","postings":[{"source":"world","destination":"m:","amount":5,"asset":"USD/2"}]}"#,
                "postings[0].destination",
            ),
            (
                r#"{"account":"m","postings":[{"source":"world","destination":"m","amount":5,"asset":"usd"}]}"#,
                "postings[0].asset",
            ),
            (r#"{"account":"m","postings":[]}"#, "postings"),
            (r#"{"account":"m"}"#, "postings"),
            (r#"{"account":"m","vars":{"a":"b"},"postings":[]}"#, "vars"),
            (r#"{"account":"m","revert":"nope"}"#, "revert"),
            (
                r#"{"account":"m","event_id":"2f1d3c1e-8f53-4a8e-9b59-8d5d4f3b2a10","script":"x"}"#,
                "event_id",
            ),
            (
                r#"{"account":"m","script":"send","metadata":{"outbox_account":"x"}}"#,
                "metadata.outbox_account",
            ),
            (
                r#"{"account":"m","script":"send","traceparent":"00-abc-def-01"}"#,
                "traceparent",
            ),
            (
                r#"{"account":"m","script":"send","tracestate":"vendor=1"}"#,
                "tracestate",
            ),
            (
                r#"{"account":"m","script":"send","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"Bad"}"#,
                "tracestate",
            ),
            (
                r#"{"account":"m","script":"send","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","metadata":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}"#,
                "metadata.traceparent",
            ),
        ];
        for (json, field) in cases {
            let err = parse(json).unwrap_err();
            assert_eq!(err.field(), Some(field), "{json}: {err}");
        }
    }

    #[test]
    fn a_line_carries_its_trace_context() {
        let e = parse(
            r#"{"account":"m","script":"send","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"vendor=1"}"#,
        )
        .unwrap();
        let trace = e.trace.unwrap();
        assert_eq!(trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.tracestate(), Some("vendor=1"));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<RawNewEvent>(r#"{"account":"m","amout":5}"#).unwrap_err();
        assert!(err.to_string().contains("amout"), "{err}");
    }
}
