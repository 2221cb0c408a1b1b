//! Request bodies parsed into normalised commands.
//!
//! A command is what the controller runs *and* what the idempotency hash covers
//! (docs/LEDGER.md#idempotency-keys): key order, whitespace and date spellings of the raw body do not
//! reach it; postings order, amounts, metadata, reference, timestamp and `force` do.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use outbox_core::{Account, Amount, Asset, Metadata, Posting};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock;
use crate::errors::{ApiError, ErrorCode};
use crate::model::Target;
use crate::numscript::Runtime;

/// `POST /v2/{ledger}/transactions` (and bulk `CREATE_TRANSACTION`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CreateTransaction {
    pub(crate) body: CreateBody,
    #[serde(serialize_with = "opt_time")]
    pub(crate) timestamp: Option<DateTime<Utc>>,
    /// `None` for both absent and `""` (the unique index ignores empty references).
    pub(crate) reference: Option<String>,
    /// Postings mode normalises absent to `{}`; script mode keeps `null` apart from
    /// `{}`, as the real hash does.
    pub(crate) metadata: Option<Metadata>,
    pub(crate) account_metadata: BTreeMap<String, Metadata>,
    #[serde(serialize_with = "runtime_name")]
    pub(crate) runtime: Runtime,
}

/// Postings or a script: exactly one per request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CreateBody {
    /// `force` is part of the command only here: it changes the generated script.
    Postings { postings: Vec<Posting>, force: bool },
    Script {
        plain: String,
        vars: BTreeMap<String, String>,
    },
}

/// `POST /v2/{ledger}/transactions/{id}/revert` (and bulk `REVERT_TRANSACTION`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RevertTransaction {
    pub(crate) id: u64,
    pub(crate) force: bool,
    pub(crate) at_effective_date: bool,
    pub(crate) metadata: Metadata,
}

/// Account or transaction metadata, added (`Save`) or removed (`Delete`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) enum MetadataCommand {
    Save { target: Target, metadata: Metadata },
    Delete { target: Target, key: String },
}

/// The raw `TransactionRequest` (`internal/api/bulking/elements.go`). Unknown
/// fields are ignored, as Go's decoder does.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TransactionRequest {
    #[serde(default)]
    postings: Option<Vec<PostingRequest>>,
    #[serde(default)]
    script: Option<ScriptRequest>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    reference: Option<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    account_metadata: Option<BTreeMap<String, Metadata>>,
    #[serde(default)]
    runtime: Option<String>,
    #[serde(default)]
    force: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct PostingRequest {
    source: String,
    destination: String,
    /// A JSON number; a quoted `"100"` fails to decode, as on the real ledger.
    #[serde(default)]
    amount: Option<u64>,
    asset: String,
}

#[derive(Debug, Deserialize)]
struct ScriptRequest {
    #[serde(default)]
    plain: Option<String>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    vars: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RevertRequest {
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BulkRevertRequest {
    id: u64,
    #[serde(default)]
    force: bool,
    #[serde(default)]
    at_effective_date: bool,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BulkMetadataRequest {
    target_type: String,
    target_id: Value,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    key: Option<String>,
}

fn opt_time<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&clock::format(t)),
        None => s.serialize_none(),
    }
}

fn runtime_name<S: serde::Serializer>(r: &Runtime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match r {
        Runtime::Machine => "machine",
        Runtime::Interpreter => "experimental-interpreter",
    })
}

fn decode_error(what: &str, e: &serde_json::Error) -> ApiError {
    ApiError::validation(format!("invalid {what}: {e}"))
}

/// Parses a JSON body, treating an empty one as a validation error.
pub(crate) fn parse_json(body: &[u8], what: &str) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::validation(format!(
            "invalid {what}: the body is empty"
        )));
    }
    serde_json::from_slice(body).map_err(|e| decode_error(what, &e))
}

/// Parses a create-transaction body. `query_force` is `?force=true` (OR'ed with
/// the body's `force`).
pub(crate) fn create_transaction(
    body: Value,
    query_force: bool,
) -> Result<CreateTransaction, ApiError> {
    decode::<TransactionRequest>(body, "transaction request")?.into_command(query_force)
}

/// Decodes a JSON value; a shape error (wrong type, quoted amount) is VALIDATION.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    value: Value,
    what: &str,
) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| decode_error(what, &e))
}

impl TransactionRequest {
    /// Checks what decoding alone cannot and normalises into a command.
    pub(crate) fn into_command(self, query_force: bool) -> Result<CreateTransaction, ApiError> {
        let req = self;
        let force = req.force.unwrap_or(false) || query_force;

        let postings = req.postings.unwrap_or_default();
        let (plain, template, raw_vars) = match req.script {
            Some(s) => (
                s.plain.filter(|p| !p.is_empty()),
                s.template.filter(|t| !t.is_empty()),
                s.vars.unwrap_or_default(),
            ),
            None => (None, None, BTreeMap::new()),
        };
        let given: Vec<&str> = [
            (!postings.is_empty()).then_some("postings"),
            plain.is_some().then_some("script"),
            template.is_some().then_some("template"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if given.len() > 1 {
            return Err(ApiError::validation(format!(
                "cannot pass {} and {} in the same request",
                given[0], given[1]
            )));
        }
        if template.is_some() {
            return Err(ApiError::validation(
                "transaction templates (script.template) are not supported by the dev ledger; send script.plain",
            ));
        }

        let runtime = match req.runtime.as_deref() {
            None | Some("") | Some("machine") => Runtime::Machine,
            Some("experimental-interpreter") => Runtime::Interpreter,
            Some(other) => {
                return Err(ApiError::validation(format!(
                    "unknown runtime {other:?}: use \"machine\" or \"experimental-interpreter\""
                )));
            }
        };

        let body = if let Some(plain) = plain {
            CreateBody::Script {
                plain,
                vars: script_vars(raw_vars)?,
            }
        } else if !postings.is_empty() {
            CreateBody::Postings {
                postings: validate_postings(postings)?,
                force,
            }
        } else {
            return Err(ApiError::new(
                ErrorCode::NoPostings,
                "transaction has no postings: send postings or script.plain",
            ));
        };

        let metadata = match (&body, req.metadata) {
            (CreateBody::Postings { .. }, None) => Some(Metadata::new()),
            (_, metadata) => metadata,
        };
        let timestamp = req
            .timestamp
            .map(|t| {
                clock::parse(&t)
                    .map_err(|e| ApiError::validation(format!("invalid timestamp: {e}")))
            })
            .transpose()?;
        let mut account_metadata = BTreeMap::new();
        for (address, metadata) in req.account_metadata.unwrap_or_default() {
            Account::parse_field(&format!("accountMetadata.{address}"), &address)?;
            account_metadata.insert(address, metadata);
        }
        Ok(CreateTransaction {
            body,
            timestamp,
            reference: req.reference.filter(|r| !r.is_empty()),
            metadata,
            account_metadata,
            runtime,
        })
    }
}

fn validate_postings(raw: Vec<PostingRequest>) -> Result<Vec<Posting>, ApiError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, p)| {
            let amount = p.amount.ok_or_else(|| {
                ApiError::validation(format!("invalid postings[{i}].amount: missing"))
            })?;
            Ok(Posting {
                source: Account::parse_field(&format!("postings[{i}].source"), &p.source)?,
                destination: Account::parse_field(
                    &format!("postings[{i}].destination"),
                    &p.destination,
                )?,
                amount: Amount::new(amount),
                asset: Asset::parse_field(&format!("postings[{i}].asset"), &p.asset)?,
            })
        })
        .collect()
}

/// Variable values are strings; the legacy `{"amount": N, "asset": "X"}` object
/// becomes `"X N"` (`ScriptV1.ToCore`). Anything else is invalid vars.
fn script_vars(raw: BTreeMap<String, Value>) -> Result<BTreeMap<String, String>, ApiError> {
    raw.into_iter()
        .map(|(name, value)| {
            let text = match &value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Object(o) => match (o.get("asset").and_then(Value::as_str), o.get("amount")) {
                    (Some(asset), Some(Value::Number(amount))) => format!("{asset} {amount}"),
                    _ => {
                        return Err(ApiError::new(
                            ErrorCode::CompilationFailed,
                            format!("invalid variable ${name}: an object must be {{\"asset\": \"X\", \"amount\": N}}"),
                        ));
                    }
                },
                other => {
                    return Err(ApiError::new(
                        ErrorCode::CompilationFailed,
                        format!("invalid variable ${name}: {other} is not a string"),
                    ));
                }
            };
            Ok((name, text))
        })
        .collect()
}

/// Parses a revert: the id from the path, flags from the query, an optional
/// `{"metadata": {}}` body.
pub(crate) fn revert_transaction(
    id: &str,
    body: &[u8],
    force: bool,
    at_effective_date: bool,
) -> Result<RevertTransaction, ApiError> {
    let id = transaction_id(id)?;
    let req: RevertRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RevertRequest::default()
    } else {
        serde_json::from_slice(body).map_err(|e| decode_error("revert request", &e))?
    };
    Ok(RevertTransaction {
        id,
        force,
        at_effective_date,
        metadata: req.metadata.unwrap_or_default(),
    })
}

/// Parses a metadata body: a JSON object of strings.
pub(crate) fn metadata_body(body: &[u8]) -> Result<Metadata, ApiError> {
    let value = parse_json(body, "metadata")?;
    serde_json::from_value(value)
        .map_err(|e| decode_error("metadata (an object of string values)", &e))
}

/// A transaction id from a path segment.
pub(crate) fn transaction_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::validation(format!(
            "invalid transaction id {text:?}: expected an unsigned integer"
        ))
    })
}

/// An account address from a path segment.
pub(crate) fn address(text: &str) -> Result<String, ApiError> {
    Ok(Account::parse_field("address", text)?.to_string())
}

impl BulkRevertRequest {
    /// Bulk `REVERT_TRANSACTION` data as a command.
    pub(crate) fn into_command(self) -> RevertTransaction {
        RevertTransaction {
            id: self.id,
            force: self.force,
            at_effective_date: self.at_effective_date,
            metadata: self.metadata.unwrap_or_default(),
        }
    }
}

impl BulkMetadataRequest {
    /// Bulk `ADD_METADATA` / `DELETE_METADATA` data as a command.
    pub(crate) fn into_command(self, delete: bool) -> Result<MetadataCommand, ApiError> {
        let req = self;
        let target = match (req.target_type.as_str(), &req.target_id) {
            ("ACCOUNT", Value::String(address)) => Target::Account(self::address(address)?),
            ("TRANSACTION", Value::Number(n)) => {
                Target::Transaction(n.as_u64().ok_or_else(|| {
                    ApiError::validation(format!("invalid targetId {n}: expected a transaction id"))
                })?)
            }
            ("ACCOUNT" | "TRANSACTION", other) => {
                return Err(ApiError::validation(format!(
                    "invalid targetId {other} for targetType {}: an ACCOUNT takes an address string, a TRANSACTION an integer id",
                    req.target_type
                )));
            }
            (other, _) => {
                return Err(ApiError::validation(format!(
                    "invalid targetType {other:?}: expected ACCOUNT or TRANSACTION"
                )));
            }
        };
        if delete {
            let key = req.key.filter(|k| !k.is_empty()).ok_or_else(|| {
                ApiError::validation("invalid metadata element: DELETE_METADATA needs a key")
            })?;
            Ok(MetadataCommand::Delete { target, key })
        } else {
            Ok(MetadataCommand::Save {
                target,
                metadata: req.metadata.unwrap_or_default(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<CreateTransaction, ApiError> {
        create_transaction(v, false)
    }

    #[test]
    fn postings_are_validated() {
        let ok = parse(
            json!({"postings":[{"source":"world","destination":"a:b","amount":5,"asset":"USD/2"}]}),
        )
        .unwrap();
        assert_eq!(
            ok.metadata,
            Some(Metadata::new()),
            "postings mode normalises metadata"
        );
        for bad in [
            json!({"postings":[{"source":"world","destination":"a:b","amount":"5","asset":"USD/2"}]}),
            json!({"postings":[{"source":"world","destination":"a:b","amount":-5,"asset":"USD/2"}]}),
            json!({"postings":[{"source":"world","destination":"a:b","asset":"USD/2"}]}),
            json!({"postings":[{"source":"@world","destination":"a:b","amount":5,"asset":"USD/2"}]}),
            json!({"postings":[{"source":"world","destination":"a:b","amount":5,"asset":"usd"}]}),
            json!({"postings":[{"source":"world","destination":"a","amount":5,"asset":"USD"}],"script":{"plain":"x"}}),
        ] {
            let err = parse(bad.clone()).unwrap_err();
            assert_eq!(err.code, ErrorCode::Validation, "{bad}: {err}");
        }
        assert_eq!(parse(json!({})).unwrap_err().code, ErrorCode::NoPostings);
        assert_eq!(
            parse(json!({"postings": []})).unwrap_err().code,
            ErrorCode::NoPostings
        );
    }

    #[test]
    fn legacy_object_vars() {
        let cmd = parse(
            json!({"script":{"plain":"x","vars":{"m":{"amount":100,"asset":"USD"},"a":"b"}}}),
        )
        .unwrap();
        match cmd.body {
            CreateBody::Script { vars, .. } => {
                assert_eq!(vars["m"], "USD 100");
                assert_eq!(vars["a"], "b");
            }
            other => panic!("{other:?}"),
        }
        let err = parse(json!({"script":{"plain":"x","vars":{"m":[1]}}})).unwrap_err();
        assert_eq!(err.code, ErrorCode::CompilationFailed);
    }
}
