//! The stored outbox payload: the exact bytes the relay sends.
//!
//! Formance hashes the normalised command under an idempotency key, so a re-send must
//! carry the same body: the relay never rebuilds it from mutable state (docs/ARCHITECTURE.md, P5).

use std::fmt;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Account, EventId, LedgerCommand};
use crate::error::{Error, ErrorKind, Result};
use crate::trace::TraceContext;

/// Metadata key carrying the outbox event id on the ledger transaction.
pub const OUTBOX_EVENT_ID_KEY: &str = "outbox_event_id";
/// Metadata key carrying the aggregate account.
pub const OUTBOX_ACCOUNT_KEY: &str = "outbox_account";
/// Metadata key carrying the per-account sequence.
pub const OUTBOX_SEQUENCE_KEY: &str = "outbox_sequence";

pub(crate) fn is_reserved_key(key: &str) -> bool {
    matches!(
        key,
        OUTBOX_EVENT_ID_KEY | OUTBOX_ACCOUNT_KEY | OUTBOX_SEQUENCE_KEY
    )
}

/// Which ledger operation a payload asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// `POST /v2/{ledger}/transactions`; the body is the stored bytes.
    Post,
    /// `POST /v2/{ledger}/transactions/{id}/revert` of the transaction carrying `target`.
    Revert {
        /// The outbox event id of the payout to revert; the relay looks up its ledger
        /// transaction id.
        target: EventId,
    },
}

/// Encoded `LedgerCommand` with the outbox identity in its metadata.
#[derive(Clone, PartialEq, Eq)]
pub struct Payload(Vec<u8>);

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Envelope<'a> {
    #[serde(borrow)]
    Post(&'a RawValue),
    #[serde(borrow)]
    Revert(&'a RawValue),
}

#[derive(Deserialize)]
struct RevertTarget {
    event_id: EventId,
}

/// Only what [`Payload::trace_context`] reads of a body; every other field is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum TracedEnvelope {
    Post(TracedBody),
    Revert(TracedBody),
}

#[derive(Deserialize)]
struct TracedBody {
    #[serde(default)]
    metadata: TracedMetadata,
}

#[derive(Deserialize, Default)]
struct TracedMetadata {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Payload {
    /// Encodes `command` once, at enqueue, adding `outbox_event_id`, `outbox_account`
    /// and `outbox_sequence` to its metadata.
    pub fn encode(
        event_id: EventId,
        account: &Account,
        sequence: u64,
        command: &LedgerCommand,
    ) -> Result<Self> {
        Self::encode_traced(event_id, account, sequence, command, None)
    }

    /// As [`encode`](Self::encode), also writing `trace` (when given) as the
    /// metadata's `traceparent` and `tracestate`: the ledger transaction then carries
    /// it, and so does every Hop 2 message of it (docs/TRACING.md).
    pub fn encode_traced(
        event_id: EventId,
        account: &Account,
        sequence: u64,
        command: &LedgerCommand,
        trace: Option<&TraceContext>,
    ) -> Result<Self> {
        command.validate()?;
        let mut command = command.clone();
        let metadata = command.metadata_mut();
        if let Some(trace) = trace {
            trace.write_into(metadata);
        }
        metadata.insert(OUTBOX_EVENT_ID_KEY.into(), event_id.to_string());
        metadata.insert(OUTBOX_ACCOUNT_KEY.into(), account.to_string());
        metadata.insert(OUTBOX_SEQUENCE_KEY.into(), sequence.to_string());
        serde_json::to_vec(&command).map(Self).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot encode the ledger command: {e}"),
            )
        })
    }

    /// Wraps bytes read back from storage.
    pub fn from_stored(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The stored bytes: a `{"post": …}` or `{"revert": …}` envelope around the body
    /// ([`split`](Self::split) takes the body out).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The stored bytes, owned (as [`as_bytes`](Self::as_bytes)).
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The operation and the exact stored bytes of its body.
    pub fn split(&self) -> Result<(PayloadKind, &[u8])> {
        let envelope: Envelope<'_> = serde_json::from_slice(&self.0).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("stored outbox payload is not a ledger command: {e}"),
            )
        })?;
        match envelope {
            Envelope::Post(raw) => Ok((PayloadKind::Post, raw.get().as_bytes())),
            Envelope::Revert(raw) => {
                let target: RevertTarget = serde_json::from_str(raw.get()).map_err(|e| {
                    Error::new(
                        ErrorKind::Internal,
                        format!("stored revert payload has no event_id: {e}"),
                    )
                })?;
                Ok((
                    PayloadKind::Revert {
                        target: target.event_id,
                    },
                    raw.get().as_bytes(),
                ))
            }
        }
    }

    /// The trace context the payload's metadata carries (`traceparent`,
    /// `tracestate`); `None` when it has none or it is not well formed (enqueue
    /// validates it, so only a row written otherwise can have a bad one).
    pub fn trace_context(&self) -> Option<TraceContext> {
        let (TracedEnvelope::Post(body) | TracedEnvelope::Revert(body)) =
            serde_json::from_slice(&self.0).ok()?;
        let metadata = body.metadata;
        TraceContext::parse(&metadata.traceparent?, metadata.tracestate.as_deref()).ok()
    }

    /// Decodes the command, metadata included.
    pub fn command(&self) -> Result<LedgerCommand> {
        serde_json::from_slice(&self.0).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("stored outbox payload is not a ledger command: {e}"),
            )
        })
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({})", String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Metadata, RevertCommand};

    #[test]
    fn revert_payload_names_its_target_and_keeps_bytes() {
        let target = EventId::new();
        let id = EventId::new();
        let account = Account::parse("merchants:4471").unwrap();
        let cmd = LedgerCommand::Revert(RevertCommand {
            event_id: target,
            metadata: Metadata::from([("event_type".into(), "payout.reversed".into())]),
        });
        let payload = Payload::encode(id, &account, 3, &cmd).unwrap();
        let (kind, body) = payload.split().unwrap();
        assert_eq!(kind, PayloadKind::Revert { target });
        let body: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(body["metadata"][OUTBOX_SEQUENCE_KEY], "3");
        assert_eq!(body["metadata"][OUTBOX_EVENT_ID_KEY], id.to_string());
        assert_eq!(body["metadata"][OUTBOX_ACCOUNT_KEY], "merchants:4471");
        assert_eq!(body["metadata"]["event_type"], "payout.reversed");
    }

    #[test]
    fn a_traced_payload_carries_its_context_in_the_metadata() {
        let trace = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("vendor=1"),
        )
        .unwrap();
        let account = Account::parse("merchants:4471").unwrap();
        let cmd = LedgerCommand::Revert(RevertCommand {
            event_id: EventId::new(),
            metadata: Metadata::new(),
        });
        let traced =
            Payload::encode_traced(EventId::new(), &account, 1, &cmd, Some(&trace)).unwrap();
        assert_eq!(traced.trace_context(), Some(trace.clone()));
        let (_, body) = traced.split().unwrap();
        let body: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(body["metadata"]["traceparent"], trace.traceparent());
        assert_eq!(body["metadata"]["tracestate"], "vendor=1");

        let plain = Payload::encode(EventId::new(), &account, 1, &cmd).unwrap();
        assert_eq!(plain.trace_context(), None);
        assert!(!String::from_utf8_lossy(plain.as_bytes()).contains("traceparent"));
    }

    #[test]
    fn garbage_is_an_internal_error() {
        let err = Payload::from_stored(b"{\"nope\":1}".to_vec())
            .split()
            .unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Internal);
    }
}
