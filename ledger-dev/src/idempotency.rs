//! `Idempotency-Key` semantics (docs/LEDGER.md#idempotency-keys): one key space per ledger for every
//! logged write; the key and a hash of the normalised command are stored with the
//! log on success only; a replay with the same hash answers the stored result, a
//! different hash is 400 VALIDATION.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::errors::ApiError;
use crate::log::LogData;
use crate::state::LedgerState;

/// How a write honours its key: both true, except under the fault plan's
/// misbehaviours (`ignoreIdempotencyKey`, `ignoreBodyHash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Honour {
    /// The key is looked up and stored; false: as if the request carried none.
    pub(crate) key: bool,
    /// A stored key's hash is compared with the request's; false: any body replays.
    pub(crate) hash: bool,
}

/// What a key remembers: the hash it was stored with and the log it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdempotencyRecord {
    pub(crate) hash: String,
    pub(crate) log_id: u64,
    pub(crate) data: LogData,
}

/// Hash of a normalised command: base64url (padded) SHA-256 of its JSON plus a
/// newline, the shape of Go's `json.Encoder` output that Formance hashes. Only
/// equality matters; the bytes need not match the real ledger's.
pub(crate) fn hash<T: Serialize>(operation: &str, command: &T) -> String {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        operation: &'a str,
        command: &'a T,
    }
    let mut json =
        serde_json::to_vec(&Tagged { operation, command }).expect("commands serialise to JSON");
    json.push(b'\n');
    URL_SAFE.encode(Sha256::digest(&json))
}

/// Looks `key` up before anything runs (the lookup precedes the reference check).
///
/// `Ok(Some(record))` is a replay; `Ok(None)` means run the command and store the
/// key with `hash`.
///
/// `compare_hash` false (a misbehaviour fault) answers a stored key whatever the hash.
///
/// # Errors
/// 400 VALIDATION when the key was stored with another hash.
pub(crate) fn lookup<'a>(
    state: &'a LedgerState,
    key: Option<&str>,
    hash: &str,
    compare_hash: bool,
) -> Result<Option<&'a IdempotencyRecord>, ApiError> {
    let Some(key) = key else { return Ok(None) };
    let Some(record) = state.idempotency.get(key) else {
        return Ok(None);
    };
    if compare_hash && record.hash != hash {
        return Err(ApiError::validation(format!(
            "invalid idempotency hash when using idempotency key '{key}', has computed '{hash}' but '{}' is stored",
            record.hash
        )));
    }
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_operation_and_command() {
        let a = hash("CREATE_TRANSACTION", &serde_json::json!({"a": 1}));
        assert_eq!(a, hash("CREATE_TRANSACTION", &serde_json::json!({"a": 1})));
        assert_ne!(a, hash("REVERT_TRANSACTION", &serde_json::json!({"a": 1})));
        assert_ne!(a, hash("CREATE_TRANSACTION", &serde_json::json!({"a": 2})));
        assert!(a.ends_with('='), "padded base64url: {a}");
    }
}
