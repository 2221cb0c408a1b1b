//! `GET /v2/{ledger}/aggregate/balances`: the sum of balances per asset over the
//! accounts an address pattern matches, now or at a point in time by effective date
//! or by insertion date (docs/LEDGER.md#balances-and-address-patterns).
//!
//! Formance amounts are arbitrary-precision JSON numbers. Each is read from its text
//! into an `i128`; one that is not an integer or does not fit is refused with its
//! asset named, never rounded through a float.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use outbox_core::{Asset, BalanceDate, Balances, Error, ErrorKind, Result};
use reqwest::StatusCode;
use serde_json::json;
use serde_json::value::RawValue;

use crate::client::{FormanceLedger, Request};
use crate::wire::{Data, decode};

impl FormanceLedger {
    /// Balances of the accounts matching `address` (every account when empty), now
    /// or, with `at`, counting the moves dated at or before it by the given date.
    pub(crate) async fn balances(
        &self,
        address: &str,
        at: Option<(DateTime<Utc>, BalanceDate)>,
    ) -> Result<Balances> {
        // An empty address means every account (whose sums are 0 per asset, world included).
        let filter =
            (!address.is_empty()).then(|| json!({ "$match": { "address": address } }).to_string());
        let mut url = self.url(&["aggregate", "balances"]);
        if let Some((pit, date)) = at {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("pit", &pit.to_rfc3339_opts(SecondsFormat::AutoSi, true));
            if date == BalanceDate::Insertion {
                pairs.append_pair("useInsertionDate", "true");
            }
        }
        let request = Request::get_filtered(url, filter.as_deref());
        let answer = self.execute(&request).await.map_err(|e| request.fail(e))?;
        if !answer.status.is_success() {
            let error = answer.refusal().into_error();
            let error = match at {
                Some((pit, date)) if answer.status == StatusCode::BAD_REQUEST => {
                    refused_at(error, pit, date)
                }
                _ => error,
            };
            return Err(request.fail(error.with("address", address)));
        }
        parse_balances(&answer.body).map_err(|e| request.fail(e.with("address", address)))
    }
}

/// A 400 to a point-in-time query: most likely a ledger without the moves history
/// it needs. Permanent, and says which option and which feature.
fn refused_at(error: Error, pit: DateTime<Utc>, date: BalanceDate) -> Error {
    let (option, feature) = match date {
        BalanceDate::Effective => (
            format!("pit={}", pit.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            "MOVES_HISTORY_POST_COMMIT_EFFECTIVE_VOLUMES=SYNC",
        ),
        BalanceDate::Insertion => (
            format!(
                "pit={} with useInsertionDate=true",
                pit.to_rfc3339_opts(SecondsFormat::AutoSi, true)
            ),
            "MOVES_HISTORY=ON",
        ),
    };
    let mut refused = Error::new(
        ErrorKind::Ledger,
        format!(
            "the ledger refused aggregate balances at {option} (Formance answers them only with the ledger feature {feature}): {}",
            error.message()
        ),
    )
    .with("option", option);
    if let Some(code) = error.code() {
        refused = refused.with_code(code.to_owned());
    }
    refused
}

/// Reads `{"data": {ASSET: amount}}` exactly: amounts as integer text into `i128`.
pub(crate) fn parse_balances(body: &[u8]) -> Result<Balances> {
    let sums: Data<BTreeMap<String, Box<RawValue>>> = decode(body, "aggregate balances")?;
    sums.data
        .into_iter()
        .map(|(asset, amount)| {
            let parsed = Asset::parse(&asset).map_err(|e| {
                Error::new(
                    ErrorKind::Ledger,
                    format!("the ledger reported a bad asset: {}", e.message()),
                )
            })?;
            Ok((parsed, exact_amount(&asset, amount.get())?))
        })
        .collect()
}

/// An amount's JSON text as an `i128`: an optional minus sign and digits only.
fn exact_amount(asset: &str, text: &str) -> Result<i128> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let integer = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    let value = integer.then(|| text.parse::<i128>().ok()).flatten();
    value.ok_or_else(|| {
        let why = if integer {
            "it does not fit in 128 bits"
        } else {
            "it is not an integer amount in minor units"
        };
        Error::new(
            ErrorKind::Ledger,
            format!("the ledger's aggregate balance of {asset} is {text}: {why}"),
        )
        .with("asset", asset)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_exactly_or_refused_naming_the_asset() {
        let body = br#"{"data":{"USD/2":-170141183460469231731687303715884105728,"EUR":36893488147419103232,"JPY":0}}"#;
        let balances = parse_balances(body).unwrap();
        assert_eq!(balances[&Asset::parse("USD/2").unwrap()], i128::MIN);
        assert_eq!(
            balances[&Asset::parse("EUR").unwrap()],
            36_893_488_147_419_103_232
        );
        assert_eq!(balances[&Asset::parse("JPY").unwrap()], 0);
        assert!(parse_balances(br#"{"data":{}}"#).unwrap().is_empty());

        for (body, named, why) in [
            (
                r#"{"data":{"USD/2":170141183460469231731687303715884105728}}"#,
                "USD/2",
                "128 bits",
            ),
            (r#"{"data":{"EUR":1.5}}"#, "EUR", "not an integer"),
            (r#"{"data":{"EUR":1e3}}"#, "EUR", "not an integer"),
            (r#"{"data":{"EUR":"100"}}"#, "EUR", "not an integer"),
        ] {
            let err = parse_balances(body.as_bytes()).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::Ledger);
            assert!(!err.is_transient());
            assert!(
                err.message().contains(named) && err.message().contains(why),
                "{err}"
            );
        }
        let err = parse_balances(br#"{"data":{"usd":1}}"#).unwrap_err();
        assert!(err.message().contains("bad asset"), "{err}");
    }
}
