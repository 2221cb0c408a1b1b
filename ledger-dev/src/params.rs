//! The query-string options of the read endpoints: which each one implements, and
//! their values (`pit`, booleans, `sort`, `order`, `expand`).
//!
//! An option the dev ledger does not implement on an endpoint is refused with 400
//! `VALIDATION` naming it. The real ledger ignores what it does not know; a stand-in
//! that ignored `pit` or `sort` would answer today's balances for a 2020 `pit`, or
//! newest first for an ascending request, and look right while being wrong.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::errors::ApiError;

/// The raw `(name, value)` pairs of a query string, in order.
pub(crate) type Pairs = [(String, String)];

/// The first value of `name`, if present.
pub(crate) fn value<'a>(pairs: &'a Pairs, name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Refuses every option of `pairs` not in `implemented`, naming it and `endpoint`.
pub(crate) fn only(pairs: &Pairs, endpoint: &str, implemented: &[&str]) -> Result<(), ApiError> {
    match pairs
        .iter()
        .find(|(k, _)| !implemented.contains(&k.as_str()))
    {
        None => Ok(()),
        Some((name, _)) => Err(ApiError::validation(format!(
            "the dev ledger does not implement the query param {name:?} on {endpoint} (it implements {})",
            implemented.join(", ")
        ))),
    }
}

/// With `cursor`, only `pageSize` may come too: the cursor carries the filter, the
/// order and the point in time of its first page (as upstream, which ignores the
/// rest; refused here rather than ignored).
pub(crate) fn cursor_alone(pairs: &Pairs) -> Result<(), ApiError> {
    if value(pairs, "cursor").is_none() {
        return Ok(());
    }
    match pairs.iter().find(|(k, _)| k != "cursor" && k != "pageSize") {
        None => Ok(()),
        Some((name, _)) => Err(ApiError::validation(format!(
            "the query param {name:?} cannot be combined with 'cursor': the cursor carries the query, order and pit of its first page"
        ))),
    }
}

/// `pit`: an RFC 3339 date, or `None` when absent or empty (as upstream).
pub(crate) fn pit(pairs: &Pairs) -> Result<Option<DateTime<Utc>>, ApiError> {
    match value(pairs, "pit") {
        None | Some("") => Ok(None),
        Some(text) => clock::parse(text)
            .map(Some)
            .map_err(|e| ApiError::validation(format!("invalid 'pit' query param: {e}"))),
    }
}

/// A boolean option: `true`/`1` or `false`/`0` (any case), absent is false.
/// Upstream reads anything else as false; the dev ledger refuses it, naming it.
pub(crate) fn boolean(pairs: &Pairs, name: &str) -> Result<bool, ApiError> {
    match value(pairs, name) {
        None => Ok(false),
        Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.is_empty() || v == "0" || v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ApiError::validation(format!(
            "invalid {name:?} query param {v:?}: true or false"
        ))),
    }
}

/// What `expand` asks of an account: its volumes, its effective volumes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Expand {
    pub(crate) volumes: bool,
    pub(crate) effective_volumes: bool,
}

/// `expand`, which may repeat or list values separated by commas; a value the dev
/// ledger does not know is refused.
pub(crate) fn expand(pairs: &Pairs) -> Result<Expand, ApiError> {
    let mut expand = Expand::default();
    let values = pairs
        .iter()
        .filter(|(k, _)| k == "expand")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    for part in values {
        match part {
            "volumes" => expand.volumes = true,
            "effectiveVolumes" => expand.effective_volumes = true,
            other => {
                return Err(ApiError::validation(format!(
                    "invalid 'expand' query param {other:?}: the dev ledger expands volumes and effectiveVolumes"
                )));
            }
        }
    }
    Ok(expand)
}

/// The column a transaction list is ordered by; ties are broken by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Column {
    Id,
    Timestamp,
    InsertedAt,
}

/// The order of a list: a column and a direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Order {
    pub(crate) column: Column,
    pub(crate) descending: bool,
}

/// The order of `GET /transactions` (`internal/api/v2/controllers_transactions_list.go`):
/// by id, newest first; `order=effective` (deprecated) orders by timestamp;
/// `reverse=true` turns it ascending; `sort=<field>[:asc|desc]` overrides both.
pub(crate) fn transaction_order(pairs: &Pairs) -> Result<Order, ApiError> {
    let mut column = match value(pairs, "order") {
        None | Some("") => Column::Id,
        Some("effective") => Column::Timestamp,
        Some(other) => {
            return Err(ApiError::validation(format!(
                "invalid 'order' query param {other:?}: its only value is effective (deprecated: use sort)"
            )));
        }
    };
    let mut descending = !boolean(pairs, "reverse")?;
    if let Some(sort) = value(pairs, "sort").filter(|s| !s.is_empty()) {
        let (field, direction) = match sort.split_once(':') {
            Some((field, direction)) => (field, Some(direction)),
            None => (sort, None),
        };
        column = match field {
            "id" => Column::Id,
            "timestamp" => Column::Timestamp,
            "insertedAt" | "inserted_at" => Column::InsertedAt,
            "updatedAt" | "updated_at" | "revertedAt" | "reverted_at" => {
                return Err(ApiError::validation(format!(
                    "invalid 'sort' query param {sort:?}: the dev ledger sorts transactions by id, timestamp or insertedAt, not {field}"
                )));
            }
            _ => {
                return Err(ApiError::validation(format!(
                    "invalid 'sort' query param {sort:?}: {field:?} is not a sortable field of transactions (id, timestamp, insertedAt)"
                )));
            }
        };
        if let Some(direction) = direction {
            descending = direction_is_descending(sort, direction)?;
        }
    }
    Ok(Order { column, descending })
}

/// The order of `GET /accounts`: by address, ascending unless `sort=address:desc`.
pub(crate) fn account_order(pairs: &Pairs) -> Result<bool, ApiError> {
    let Some(sort) = value(pairs, "sort").filter(|s| !s.is_empty()) else {
        return Ok(false);
    };
    let (field, direction) = match sort.split_once(':') {
        Some((field, direction)) => (field, Some(direction)),
        None => (sort, None),
    };
    if field != "address" {
        return Err(ApiError::validation(format!(
            "invalid 'sort' query param {sort:?}: the dev ledger sorts accounts by address only"
        )));
    }
    direction.map_or(Ok(false), |d| direction_is_descending(sort, d))
}

fn direction_is_descending(sort: &str, direction: &str) -> Result<bool, ApiError> {
    if direction.eq_ignore_ascii_case("desc") {
        Ok(true)
    } else if direction.eq_ignore_ascii_case("asc") {
        Ok(false)
    } else {
        Err(ApiError::validation(format!(
            "invalid 'sort' query param {sort:?}: the order is asc or desc, not {direction:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn transaction_orders() {
        let order = |items: &[(&str, &str)]| {
            transaction_order(&pairs(items)).map(|o| (o.column, o.descending))
        };
        assert_eq!(order(&[]).unwrap(), (Column::Id, true));
        assert_eq!(order(&[("reverse", "true")]).unwrap(), (Column::Id, false));
        assert_eq!(
            order(&[("order", "effective")]).unwrap(),
            (Column::Timestamp, true)
        );
        assert_eq!(order(&[("sort", "id:asc")]).unwrap(), (Column::Id, false));
        assert_eq!(
            order(&[("reverse", "true"), ("sort", "insertedAt:DESC")]).unwrap(),
            (Column::InsertedAt, true)
        );
        assert_eq!(
            order(&[("sort", "timestamp")]).unwrap(),
            (Column::Timestamp, true)
        );
        for bad in [
            vec![("sort", "id:up")],
            vec![("sort", "amount")],
            vec![("sort", "updatedAt:asc")],
            vec![("order", "id")],
            vec![("reverse", "yes")],
        ] {
            let err = order(&bad).unwrap_err();
            assert!(err.message.contains(bad[0].0), "{}", err.message);
        }
    }

    #[test]
    fn options_not_implemented_are_named() {
        let err = only(&pairs(&[("pit", "x"), ("oot", "y")]), "GET x", &["pit"]).unwrap_err();
        assert!(err.message.contains("\"oot\""), "{}", err.message);
        let err = cursor_alone(&pairs(&[("cursor", "c"), ("reverse", "true")])).unwrap_err();
        assert!(err.message.contains("\"reverse\""), "{}", err.message);
        cursor_alone(&pairs(&[("cursor", "c"), ("pageSize", "5")])).unwrap();
        assert!(
            pit(&pairs(&[("pit", "2020")]))
                .unwrap_err()
                .message
                .contains("pit")
        );
        assert_eq!(pit(&pairs(&[("pit", "")])).unwrap(), None);
        let err = expand(&pairs(&[("expand", "volumes,nope")])).unwrap_err();
        assert!(err.message.contains("nope"), "{}", err.message);
    }
}
