//! `Idempotency-Key` semantics (docs/LEDGER.md#idempotency-keys): one key space per ledger for every
//! logged write; the key and a hash of the normalised command are stored with the
//! log on success only; a replay with the same hash answers the stored result, a
//! different hash is 400 VALIDATION.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::errors::ApiError;
use crate::state::LedgerState;
use crate::stored_log::ChainedLog;

/// How a write honours its key: both true, except under the fault plan's
/// misbehaviours (`ignoreIdempotencyKey`, `ignoreBodyHash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Honour {
    /// The key is looked up and stored; false: as if the request carried none.
    pub(crate) key: bool,
    /// A stored key's hash is compared with the request's; false: any body replays.
    pub(crate) hash: bool,
}

/// A stored key's hash as the ledger keeps it in memory: the 32 bytes of SHA-256
/// that [`hash`] writes as 44 characters of text, or the text itself when it is
/// not such an encoding (a data file written some other way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredHash {
    Digest([u8; 32]),
    Text(Box<str>),
}

impl StoredHash {
    pub(crate) fn new(text: &str) -> Self {
        URL_SAFE
            .decode(text)
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .filter(|digest| URL_SAFE.encode(digest) == text)
            .map_or_else(|| Self::Text(text.into()), Self::Digest)
    }

    /// The hash as it was stored (and as the mismatch error quotes it).
    pub(crate) fn text(&self) -> String {
        match self {
            Self::Digest(digest) => URL_SAFE.encode(digest),
            Self::Text(text) => text.to_string(),
        }
    }
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
/// `Ok(Some(log))` is a replay of the log the key was stored with (its data is the
/// stored answer); `Ok(None)` means run the command and store the key with `hash`.
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
) -> Result<Option<&'a ChainedLog>, ApiError> {
    let Some(key) = key else { return Ok(None) };
    let Some(log) = state.keyed_log(key) else {
        return Ok(None);
    };
    let stored = log
        .idempotency_hash
        .as_ref()
        .map(StoredHash::text)
        .unwrap_or_default();
    if compare_hash && stored != hash {
        return Err(ApiError::validation(format!(
            "invalid idempotency hash when using idempotency key '{key}', has computed '{hash}' but '{stored}' is stored"
        )));
    }
    Ok(Some(log))
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

    #[test]
    fn a_stored_hash_reads_back_as_written() {
        let written = hash("CREATE_TRANSACTION", &serde_json::json!({"a": 1}));
        let stored = StoredHash::new(&written);
        assert!(matches!(stored, StoredHash::Digest(_)), "{stored:?}");
        assert_eq!(stored.text(), written);
        // Not the encoding of 32 bytes, or not in its canonical form: kept as text.
        for other in ["h", "", &written[..40], &written.replace('=', "")] {
            let stored = StoredHash::new(other);
            assert!(matches!(stored, StoredHash::Text(_)), "{other}: {stored:?}");
            assert_eq!(stored.text(), other);
        }
    }
}
