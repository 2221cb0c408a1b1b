//! `NewEvent` (what a caller enqueues) and `OutboxEvent` (what the outbox stores).

use chrono::{DateTime, Utc};

use super::{Account, EventId, LedgerCommand, Payload, Position};
use crate::error::{Error, ErrorKind, Result};
use crate::trace::{self, TRACEPARENT_KEY, TraceContext};

/// An event to enqueue in the caller's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The aggregate whose per-account sequence orders this event (usually the merchant).
    pub account: Account,
    /// What the ledger is asked to do; encoded once, at enqueue, into the payload.
    pub command: LedgerCommand,
    /// Supplied when the caller already has an id (an API request id); otherwise a fresh v7.
    pub event_id: Option<EventId>,
    /// The caller's W3C trace context, written into the payload's ledger metadata
    /// (`traceparent`, `tracestate`). `None`: the command's own metadata keys if it
    /// has them, else the current span's context (feature `otel`), else none
    /// (docs/TRACING.md).
    pub trace: Option<TraceContext>,
}

impl NewEvent {
    /// An event of `account` asking for `command`, with a fresh event id at enqueue.
    pub fn new(account: Account, command: LedgerCommand) -> Self {
        Self {
            account,
            command,
            event_id: None,
            trace: None,
        }
    }

    /// Records `trace` (the caller's W3C trace context) in the payload's ledger
    /// metadata at enqueue.
    #[must_use]
    pub fn with_trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Checks everything enqueue can check before writing: the command, and that a
    /// trace context given both on the event and in the command's metadata is the
    /// same one. Errors name the field.
    pub fn validate(&self) -> Result<()> {
        self.command.validate()?;
        self.given_trace().map(drop)
    }

    /// The trace context enqueue writes into the metadata: the event's own, or (when
    /// the command's metadata has none) the current span's; `None` when there is none
    /// to add. A caller's own metadata keys are never overwritten: they must agree
    /// with the event's `trace`, or the event is refused naming
    /// `metadata.traceparent`.
    fn trace_to_write(&self) -> Result<Option<TraceContext>> {
        match self.given_trace()? {
            Given::Event(trace) => Ok(Some(trace.clone())),
            Given::Metadata => Ok(None),
            Given::Nothing => Ok(trace::current()),
        }
    }

    fn given_trace(&self) -> Result<Given<'_>> {
        let own = TraceContext::from_metadata(self.command.metadata())?;
        match (&self.trace, own) {
            (Some(given), Some(own)) if *given != own => Err(Error::invalid(
                format!("metadata.{TRACEPARENT_KEY}"),
                format!(
                    "{} differs from the event's trace context {}: give the trace context once",
                    own.traceparent(),
                    given.traceparent()
                ),
            )),
            (Some(given), _) => Ok(Given::Event(given)),
            (None, Some(_)) => Ok(Given::Metadata),
            (None, None) => Ok(Given::Nothing),
        }
    }

    /// Uses `id` as the event id (idempotency key and instruction id) instead of a
    /// fresh one.
    #[must_use]
    pub fn with_event_id(mut self, id: EventId) -> Self {
        self.event_id = Some(id);
        self
    }

    /// The event a revert undoes; `None` for a post.
    pub fn revert_target(&self) -> Option<EventId> {
        match &self.command {
            LedgerCommand::Revert(revert) => Some(revert.event_id),
            LedgerCommand::Post(_) => None,
        }
    }

    /// Checks a revert against its target's account as the outbox stores it (`None`:
    /// the target is not in the outbox). A revert must follow its target in the same
    /// account's sequence: then the relay sends it only after the target's outcome is
    /// known, and never reverts a transaction that does not exist yet. Errors name the
    /// field `revert`.
    pub fn check_revert_target(&self, target_account: Option<&str>) -> Result<()> {
        let Some(target) = self.revert_target() else {
            return Ok(());
        };
        let owner = target_account
            .map(Account::parse)
            .transpose()
            .map_err(|e| Error::new(ErrorKind::Internal, format!("outbox_events.account: {e}")))?;
        match owner.as_ref() {
            None => Err(Error::invalid(
                "revert",
                format!(
                    "{target} is not in the outbox: a revert names an event enqueued before it"
                ),
            )),
            Some(owner) if *owner != self.account => Err(Error::invalid(
                "revert",
                format!(
                    "{target} belongs to account {owner}, not {}: enqueue the revert on its target's account so it follows the target in sequence order",
                    self.account
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Fixes the event id and encodes the payload for `sequence`; errors name the field.
    pub fn encode(&self, sequence: u64) -> Result<(EventId, Payload)> {
        let id = self.event_id.unwrap_or_default();
        Ok((id, self.encode_as(id, sequence)?))
    }

    /// Encodes the payload of event `id` at `sequence`, with the outbox identity and
    /// the trace context (see [`trace`](Self::trace)) in its metadata.
    pub fn encode_as(&self, id: EventId, sequence: u64) -> Result<Payload> {
        let trace = self.trace_to_write()?;
        Payload::encode_traced(id, &self.account, sequence, &self.command, trace.as_ref())
    }
}

/// Where an event's trace context was given.
enum Given<'a> {
    /// On the event ([`NewEvent::trace`]).
    Event(&'a TraceContext),
    /// In the command's own metadata, as the payload will carry it.
    Metadata,
    /// Nowhere.
    Nothing,
}

/// An immutable, committed outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// Where the row sits in its store's commit-ordered stream (the store's own
    /// encoding): what a relay resumes after.
    pub position: Position,
    /// The UUID v7 sent as `Idempotency-Key` and carried to consumers as the
    /// instruction id.
    pub event_id: EventId,
    /// The account whose sequence orders the event.
    pub account: Account,
    /// Gapless per account, starting at 1.
    pub sequence: u64,
    /// The exact bytes the relay sends, outbox identity included.
    pub payload: Payload,
    /// When enqueue wrote the row (on PostgreSQL, the enqueuing transaction's `now()`).
    pub created_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Metadata, RevertCommand};

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn event(metadata: Metadata) -> NewEvent {
        NewEvent::new(
            Account::parse("merchants:4471").unwrap(),
            LedgerCommand::Revert(RevertCommand {
                event_id: EventId::new(),
                metadata,
            }),
        )
    }

    fn metadata_of(payload: &Payload) -> Metadata {
        payload.command().unwrap().metadata().clone()
    }

    #[test]
    fn the_events_trace_context_is_written_into_the_metadata() {
        let trace = TraceContext::parse(PARENT, Some("vendor=1")).unwrap();
        let e = event(Metadata::new()).with_trace(trace.clone());
        e.validate().unwrap();
        let (_, payload) = e.encode(1).unwrap();
        let metadata = metadata_of(&payload);
        assert_eq!(metadata["traceparent"], PARENT);
        assert_eq!(metadata["tracestate"], "vendor=1");
        assert_eq!(payload.trace_context(), Some(trace));
    }

    #[test]
    fn the_callers_own_metadata_keys_are_kept_as_written() {
        let own = Metadata::from([("traceparent".into(), PARENT.into())]);
        let (_, payload) = event(own.clone()).encode(1).unwrap();
        assert_eq!(metadata_of(&payload)["traceparent"], PARENT);
        assert!(!metadata_of(&payload).contains_key("tracestate"));

        // The same context given twice is one context.
        let same = event(own).with_trace(TraceContext::parse(PARENT, None).unwrap());
        same.validate().unwrap();
        assert_eq!(
            metadata_of(&same.encode(1).unwrap().1)["traceparent"],
            PARENT
        );
    }

    #[test]
    fn a_conflicting_trace_context_is_refused_naming_the_metadata_key() {
        let own = Metadata::from([("traceparent".into(), PARENT.into())]);
        let e = event(own).with_trace(TraceContext::parse(OTHER, None).unwrap());
        assert_eq!(
            e.validate().unwrap_err().field(),
            Some("metadata.traceparent")
        );
        assert_eq!(
            e.encode(1).unwrap_err().field(),
            Some("metadata.traceparent")
        );
    }

    #[test]
    fn a_malformed_traceparent_in_the_metadata_is_refused() {
        let bad = Metadata::from([("traceparent".into(), "not-a-trace".into())]);
        assert_eq!(
            event(bad).validate().unwrap_err().field(),
            Some("metadata.traceparent")
        );
    }

    #[test]
    fn without_a_trace_context_the_payload_is_unchanged() {
        let e = event(Metadata::from([("event_type".into(), "x".into())]));
        let id = EventId::new();
        let traced = e.encode_as(id, 1).unwrap();
        let plain = Payload::encode(id, &e.account, 1, &e.command).unwrap();
        assert_eq!(traced, plain);
    }
}
