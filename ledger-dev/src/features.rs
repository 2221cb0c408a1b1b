//! Ledger features (`pkg/features`): set at creation, reported by `GET /v2/{ledger}`,
//! and checked by the reads that need them, as Formance checks them.
//!
//! Balances at a point in time need the moves history: by effective date
//! `MOVES_HISTORY_POST_COMMIT_EFFECTIVE_VOLUMES=SYNC`, by insertion date
//! `MOVES_HISTORY=ON`; without them Formance answers 400 `VALIDATION`
//! (`missing feature "…"`). The dev ledger keeps its history either way; the flags
//! only decide whether it answers, so clients can be tested against both.

use std::collections::BTreeMap;

use crate::errors::ApiError;

/// Funds movements history; `ON` or `OFF`.
pub(crate) const MOVES_HISTORY: &str = "MOVES_HISTORY";
/// Effective volumes kept up to date under backdated transactions; `SYNC` or `DISABLED`.
pub(crate) const EFFECTIVE_VOLUMES: &str = "MOVES_HISTORY_POST_COMMIT_EFFECTIVE_VOLUMES";

/// Every feature a default ledger reports, with its default value first and the
/// other values Formance accepts.
const FEATURES: [(&str, &[&str]); 7] = [
    ("ACCOUNT_METADATA_HISTORY", &["SYNC", "DISABLED"]),
    ("HASH_LOGS", &["SYNC", "ASYNC", "DISABLED"]),
    ("INDEX_ADDRESS_SEGMENTS", &["ON", "OFF"]),
    ("INDEX_TRANSACTION_ACCOUNTS", &["ON", "OFF"]),
    (MOVES_HISTORY, &["ON", "OFF"]),
    (EFFECTIVE_VOLUMES, &["SYNC", "DISABLED"]),
    ("TRANSACTION_METADATA_HISTORY", &["SYNC", "DISABLED"]),
];

/// The features the dev ledger honours with a value other than the default.
const HONOURED: [&str; 2] = [MOVES_HISTORY, EFFECTIVE_VOLUMES];

/// The features a default Formance v2 ledger reports.
pub(crate) fn defaults() -> BTreeMap<String, String> {
    FEATURES
        .iter()
        .map(|(name, values)| ((*name).to_owned(), values[0].to_owned()))
        .collect()
}

/// The defaults with `requested` applied; an unknown feature or value, or a
/// non-default value the dev ledger does not honour, is 400 `VALIDATION`.
pub(crate) fn with_requested(
    requested: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let mut features = defaults();
    for (name, value) in requested {
        let Some((_, values)) = FEATURES.iter().find(|(known, _)| known == name) else {
            return Err(ApiError::validation(format!(
                "invalid ledger configuration: feature {name:?} does not exist"
            )));
        };
        if !values.contains(&value.as_str()) {
            return Err(ApiError::validation(format!(
                "invalid ledger configuration: feature {name} takes {}, not {value:?}",
                values.join(" or ")
            )));
        }
        if value != values[0] && !HONOURED.contains(&name.as_str()) {
            return Err(ApiError::validation(format!(
                "the dev ledger does not implement feature {name}={value} (only {} may differ from the defaults)",
                HONOURED.join(" and ")
            )));
        }
        features.insert(name.clone(), value.clone());
    }
    Ok(features)
}

/// 400 `VALIDATION` `missing feature "NAME"` unless `features` has `name=value`.
/// A ledger stored before features were kept reports none: it has the defaults.
pub(crate) fn require(
    features: &BTreeMap<String, String>,
    name: &str,
    value: &str,
) -> Result<(), ApiError> {
    let actual = features.get(name).map_or_else(
        || defaults().get(name).cloned().unwrap_or_default(),
        Clone::clone,
    );
    if actual == value {
        Ok(())
    } else {
        Err(ApiError::validation(format!("missing feature {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_features_are_checked() {
        let off = BTreeMap::from([(MOVES_HISTORY.to_owned(), "OFF".to_owned())]);
        let features = with_requested(&off).unwrap();
        assert_eq!(features[MOVES_HISTORY], "OFF");
        assert_eq!(features[EFFECTIVE_VOLUMES], "SYNC");
        let err = require(&features, MOVES_HISTORY, "ON").unwrap_err();
        assert_eq!(err.message, "missing feature \"MOVES_HISTORY\"");
        require(&features, EFFECTIVE_VOLUMES, "SYNC").unwrap();
        require(&BTreeMap::new(), MOVES_HISTORY, "ON").unwrap();

        for (name, value, named) in [
            ("NOPE", "ON", "NOPE"),
            (MOVES_HISTORY, "MAYBE", "MAYBE"),
            ("HASH_LOGS", "DISABLED", "HASH_LOGS=DISABLED"),
        ] {
            let requested = BTreeMap::from([(name.to_owned(), value.to_owned())]);
            let err = with_requested(&requested).unwrap_err();
            assert!(err.message.contains(named), "{}", err.message);
        }
    }
}
