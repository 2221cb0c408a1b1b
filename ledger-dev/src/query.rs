//! The filter language of list and aggregate endpoints (go-libs `query`), the
//! subset we use: `$match`, `$exists`, `$and`, `$or`, `$not`, and on logs also
//! `$lt`, `$lte`, `$gt`, `$gte` (on `id` and `date`), on transactions on `id`.
//!
//! Address patterns (docs/LEDGER.md#balances-and-address-patterns): an empty segment matches any one segment with
//! the segment count fixed (`merchants::available`), and a trailing `...` matches
//! any number of further segments (`merchants:...`). So `merchants:4471:` matches
//! `merchants:4471:available` but not `merchants:4471:payouts:pending`.

use serde_json::{Map, Value};

use std::cmp::Ordering;
use std::ops::RangeInclusive;

use outbox_core::Metadata;

use crate::clock;
use crate::errors::ApiError;
use crate::stored_log::ChainedLog;
use crate::stored_transaction::StoredTransaction;

/// What a filter is applied to; decides which fields exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    Accounts,
    Transactions,
    Logs,
}

#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// Accounts: the address.
    Address,
    /// Transactions: any posting's source or destination.
    Account,
    Source,
    Destination,
    Reference,
    Id,
    Reverted,
    Metadata(String),
    /// Logs: the log type (`NEW_TRANSACTION`…).
    LogType,
    /// Logs: when the log was written.
    Date,
}

/// A comparison operator (`$lt`…), on logs and transaction ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lt,
    Lte,
    Gt,
    Gte,
}

impl Op {
    fn parse(operator: &str) -> Option<Self> {
        Some(match operator {
            "$lt" => Self::Lt,
            "$lte" => Self::Lte,
            "$gt" => Self::Gt,
            "$gte" => Self::Gte,
            _ => return None,
        })
    }

    /// Whether `actual` compares to the filter's value as the operator asks.
    fn holds(self, actual: Ordering) -> bool {
        match self {
            Self::Lt => actual == Ordering::Less,
            Self::Lte => actual != Ordering::Greater,
            Self::Gt => actual == Ordering::Greater,
            Self::Gte => actual != Ordering::Less,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    All,
    Match(Field, Value),
    Compare(Field, Op, Value),
    /// `{"$exists": {"metadata": "key"}}`
    MetadataExists(String),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

/// A parsed filter for one resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Query {
    filter: Filter,
}

impl Query {
    /// Parses a filter document; `null` or `{}` matches everything.
    pub(crate) fn parse(resource: Resource, document: &Value) -> Result<Self, ApiError> {
        let filter = match document {
            Value::Null => Filter::All,
            Value::Object(map) if map.is_empty() => Filter::All,
            other => parse_filter(resource, other)?,
        };
        Ok(Self { filter })
    }

    /// Whether an account with `address` and `metadata` matches: the metadata is
    /// the current one, or the one at the point in time of the request.
    pub(crate) fn matches_account(&self, address: &str, metadata: &Metadata) -> bool {
        eval(
            &self.filter,
            &|field, value| match field {
                Field::Address => value.as_str().is_some_and(|p| address_matches(p, address)),
                Field::Metadata(key) => metadata.get(key).map(String::as_str) == value.as_str(),
                _ => false,
            },
            &|key| metadata.contains_key(key),
            &|_, _, _| false,
        )
    }

    /// The ids a transaction filter can match at most, read from its `id`
    /// comparisons at the top level (alone or in an `$and`), so a listing walks only
    /// that range instead of every transaction; `None` when no id can match.
    /// Anything else leaves the range open.
    pub(crate) fn id_range(&self) -> Option<RangeInclusive<u64>> {
        let (mut low, mut high) = (0u64, u64::MAX);
        let items: &[Filter] = match &self.filter {
            Filter::And(items) => items,
            single => std::slice::from_ref(single),
        };
        for item in items {
            let (op, value) = match item {
                Filter::Compare(Field::Id, op, value) => (Some(*op), value),
                Filter::Match(Field::Id, value) => (None, value),
                _ => continue,
            };
            let Some(v) = value.as_u64() else { continue };
            match op {
                None => (low, high) = (low.max(v), high.min(v)),
                Some(Op::Gt) => low = low.max(v.checked_add(1)?),
                Some(Op::Gte) => low = low.max(v),
                Some(Op::Lt) => high = high.min(v.checked_sub(1)?),
                Some(Op::Lte) => high = high.min(v),
            }
        }
        (low <= high).then_some(low..=high)
    }

    pub(crate) fn matches_transaction(&self, tx: &StoredTransaction) -> bool {
        eval(
            &self.filter,
            &|field, value| match field {
                Field::Reference => tx.reference.as_deref() == value.as_str() && value.is_string(),
                Field::Id => value.as_u64() == Some(tx.id),
                Field::Reverted => value.as_bool() == Some(tx.reverted),
                Field::Metadata(key) => tx.metadata.get(key) == value.as_str() && value.is_string(),
                Field::Account | Field::Source | Field::Destination => {
                    let Some(pattern) = value.as_str() else {
                        return false;
                    };
                    tx.postings.iter().any(|p| {
                        let source = matches!(field, Field::Account | Field::Source)
                            && address_matches(pattern, &p.source);
                        let destination = matches!(field, Field::Account | Field::Destination)
                            && address_matches(pattern, &p.destination);
                        source || destination
                    })
                }
                Field::Address | Field::LogType | Field::Date => false,
            },
            &|key| tx.metadata.contains_key(key),
            &|field, op, value| match field {
                Field::Id => value.as_u64().is_some_and(|v| op.holds(tx.id.cmp(&v))),
                _ => false,
            },
        )
    }

    pub(crate) fn matches_log(&self, log: &ChainedLog) -> bool {
        let ordering = |field: &Field, value: &Value| match field {
            Field::Id => value.as_u64().map(|v| log.id.cmp(&v)),
            Field::Date => value
                .as_str()
                .and_then(|text| clock::parse(text).ok())
                .map(|at| log.date.cmp(&at)),
            _ => None,
        };
        eval(
            &self.filter,
            &|field, value| match field {
                Field::LogType => value.as_str() == Some(log.data.type_name()),
                _ => ordering(field, value) == Some(Ordering::Equal),
            },
            &|_| false,
            &|field, op, value| ordering(field, value).is_some_and(|o| op.holds(o)),
        )
    }
}

fn eval(
    filter: &Filter,
    field: &dyn Fn(&Field, &Value) -> bool,
    exists: &dyn Fn(&str) -> bool,
    compare: &dyn Fn(&Field, Op, &Value) -> bool,
) -> bool {
    match filter {
        Filter::All => true,
        Filter::Match(f, v) => field(f, v),
        Filter::Compare(f, op, v) => compare(f, *op, v),
        Filter::MetadataExists(key) => exists(key),
        Filter::And(items) => items.iter().all(|f| eval(f, field, exists, compare)),
        Filter::Or(items) => items.iter().any(|f| eval(f, field, exists, compare)),
        Filter::Not(inner) => !eval(inner, field, exists, compare),
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::validation(format!("invalid query: {}", message.into()))
}

fn single(map: &Map<String, Value>, operator: &str) -> Result<(String, Value), ApiError> {
    if map.len() != 1 {
        return Err(invalid(format!(
            "{operator} takes exactly one field, got {}",
            map.len()
        )));
    }
    let (k, v) = map.iter().next().expect("one entry");
    Ok((k.clone(), v.clone()))
}

fn parse_filter(resource: Resource, value: &Value) -> Result<Filter, ApiError> {
    let Value::Object(map) = value else {
        return Err(invalid(format!("a filter is a JSON object, got {value}")));
    };
    let (operator, argument) = single(map, "a filter")?;
    match operator.as_str() {
        "$and" | "$or" => {
            let Value::Array(items) = argument else {
                return Err(invalid(format!("{operator} takes an array of filters")));
            };
            let items = items
                .iter()
                .map(|item| parse_filter(resource, item))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(if operator == "$and" {
                Filter::And(items)
            } else {
                Filter::Or(items)
            })
        }
        "$not" => Ok(Filter::Not(Box::new(parse_filter(resource, &argument)?))),
        "$match" => {
            let Value::Object(fields) = argument else {
                return Err(invalid("$match takes an object {field: value}"));
            };
            let (name, expected) = single(&fields, "$match")?;
            let field = parse_field(resource, &name)?;
            let type_ok = match field {
                Field::Id => expected.is_u64(),
                Field::Reverted => expected.is_boolean(),
                Field::Date => is_date(&expected),
                _ => expected.is_string(),
            };
            if !type_ok {
                return Err(invalid(format!(
                    "{expected} is not a valid value for {name}"
                )));
            }
            Ok(Filter::Match(field, expected))
        }
        operator if resource != Resource::Accounts && Op::parse(operator).is_some() => {
            let op = Op::parse(operator).expect("checked by the guard");
            let Value::Object(fields) = argument else {
                return Err(invalid(format!(
                    "{operator} takes an object {{field: value}}"
                )));
            };
            let (name, expected) = single(&fields, operator)?;
            let field = parse_field(resource, &name)?;
            let type_ok = match (resource, &field) {
                (_, Field::Id) => expected.is_u64(),
                (Resource::Logs, Field::Date) => is_date(&expected),
                (Resource::Logs, _) => {
                    return Err(invalid(format!(
                        "{operator} compares id or date, not {name}"
                    )));
                }
                _ => {
                    return Err(invalid(format!(
                        "{operator} compares only id on transactions in the dev ledger, not {name}"
                    )));
                }
            };
            if !type_ok {
                return Err(invalid(format!(
                    "{expected} is not a valid value for {name}"
                )));
            }
            Ok(Filter::Compare(field, op, expected))
        }
        "$exists" if resource != Resource::Logs => {
            let Value::Object(fields) = argument else {
                return Err(invalid("$exists takes an object {\"metadata\": \"key\"}"));
            };
            match single(&fields, "$exists")? {
                (name, Value::String(key)) if name == "metadata" => Ok(Filter::MetadataExists(key)),
                (name, _) => Err(invalid(format!(
                    "$exists supports only {{\"metadata\": \"key\"}}, got {name}"
                ))),
            }
        }
        other if resource == Resource::Logs => Err(invalid(format!(
            "operator {other} is not supported on logs by the dev ledger ($match, $lt, $lte, $gt, $gte, $and, $or, $not are)"
        ))),
        other if resource == Resource::Transactions => Err(invalid(format!(
            "operator {other} is not supported on transactions by the dev ledger ($match, $exists, $and, $or, $not, and $lt, $lte, $gt, $gte on id are)"
        ))),
        other => Err(invalid(format!(
            "operator {other} is not supported by the dev ledger ($match, $exists, $and, $or, $not are)"
        ))),
    }
}

/// An RFC 3339 date, as date filters take it.
fn is_date(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|text| clock::parse(text).is_ok())
}

fn parse_field(resource: Resource, name: &str) -> Result<Field, ApiError> {
    if let Some(key) = name
        .strip_prefix("metadata[")
        .and_then(|k| k.strip_suffix(']'))
        && resource != Resource::Logs
    {
        return Ok(Field::Metadata(key.to_owned()));
    }
    let field = match (resource, name) {
        (Resource::Accounts, "address") => Field::Address,
        (Resource::Transactions, "account") => Field::Account,
        (Resource::Transactions, "source") => Field::Source,
        (Resource::Transactions, "destination") => Field::Destination,
        (Resource::Transactions, "reference") => Field::Reference,
        (Resource::Transactions, "id") => Field::Id,
        (Resource::Transactions, "reverted") => Field::Reverted,
        (Resource::Logs, "id") => Field::Id,
        (Resource::Logs, "type") => Field::LogType,
        (Resource::Logs, "date") => Field::Date,
        _ => {
            let supported = match resource {
                Resource::Accounts => "address, metadata[key]",
                Resource::Transactions => {
                    "account, source, destination, reference, id, reverted, metadata[key]"
                }
                Resource::Logs => "id, type, date",
            };
            return Err(invalid(format!(
                "unknown field {name:?} (supported: {supported})"
            )));
        }
    };
    Ok(field)
}

/// Whether `address` matches `pattern` (exact, empty-segment wildcards, trailing `...`).
pub(crate) fn address_matches(pattern: &str, address: &str) -> bool {
    let (fixed, open) = match pattern.strip_suffix("...") {
        Some(prefix) => (prefix.strip_suffix(':').unwrap_or(prefix), true),
        None => (pattern, false),
    };
    let wanted: Vec<&str> = if fixed.is_empty() {
        Vec::new()
    } else {
        fixed.split(':').collect()
    };
    let segments: Vec<&str> = address.split(':').collect();
    let count_ok = if open {
        segments.len() > wanted.len()
    } else {
        segments.len() == wanted.len()
    };
    count_ok
        && wanted
            .iter()
            .zip(&segments)
            .all(|(w, s)| w.is_empty() || w == s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn address_patterns() {
        assert!(address_matches(
            "merchants:4471:available",
            "merchants:4471:available"
        ));
        assert!(address_matches(
            "merchants:4471:",
            "merchants:4471:available"
        ));
        assert!(!address_matches(
            "merchants:4471:",
            "merchants:4471:payouts:pending"
        ));
        assert!(address_matches(
            "merchants::available",
            "merchants:9:available"
        ));
        assert!(address_matches(
            "merchants:...",
            "merchants:4471:payouts:pending"
        ));
        assert!(address_matches(
            "merchants:4471:...",
            "merchants:4471:available"
        ));
        assert!(!address_matches("merchants:...", "merchants"));
        assert!(!address_matches("merchants:...", "world"));
        assert!(address_matches("...", "world"));
        assert!(!address_matches("merchants", "merchants:4471"));
    }

    #[test]
    fn parse_errors_are_validation() {
        for bad in [
            json!({"$match": {"address": "a", "x": "b"}}),
            json!({"$lt": {"id": 3}}),
            json!({"$match": {"nope": "x"}}),
            json!([1]),
        ] {
            let err = Query::parse(Resource::Accounts, &bad).unwrap_err();
            assert_eq!(err.code, crate::errors::ErrorCode::Validation, "{bad}");
        }
        let ok = json!({"$and": [{"$match": {"reference": "r"}}, {"$not": {"$exists": {"metadata": "k"}}}]});
        Query::parse(Resource::Transactions, &ok).unwrap();
    }
}
