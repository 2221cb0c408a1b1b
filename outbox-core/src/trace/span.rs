//! The spans of a payout's hops, each following the trace context its event carries,
//! so one trace id runs from the caller's enqueue to the consumer's inbox across a
//! ledger that knows nothing about tracing.
//!
//! | span | where | follows |
//! | --- | --- | --- |
//! | `outbox.enqueue` | both stores' `enqueue` | the caller's current span |
//! | `outbox.relay.post` | the dispatcher, per event (a bulk post gets one per event) | the payload's `traceparent` |
//! | `outbox.fanout.publish` | the fan-out loop, per message | the message's `traceparent` |
//! | `outbox.inbox.apply` | the consumer, per message | the message's `traceparent` |
//!
//! Without the `otel` feature (or without an OpenTelemetry layer installed) a span
//! records the trace id as its `trace_id` field, so logs can be joined on it; with
//! both, the span's OpenTelemetry parent is the remote span the `traceparent` names.

use tracing::Span;
use tracing::field::Empty;

use super::TraceContext;
use crate::domain::{Account, OutboxEvent};
use crate::fanout::FanoutMessage;

/// The trace context of the current `tracing` span: `Some` only with the `otel`
/// feature and an OpenTelemetry layer (`tracing-opentelemetry`) installed.
pub fn current() -> Option<TraceContext> {
    #[cfg(feature = "otel")]
    {
        otel::current()
    }
    #[cfg(not(feature = "otel"))]
    {
        None
    }
}

/// Makes `span` follow `context`: records its trace id as the `trace_id` field and,
/// with the `otel` feature, makes the remote span it names the span's parent.
///
/// `span` must declare `trace_id` (`trace_id = tracing::field::Empty`) for the field
/// to show; a disabled span is left alone.
pub fn follow(span: &Span, context: Option<&TraceContext>) {
    let Some(context) = context else { return };
    if span.is_disabled() {
        return;
    }
    span.record("trace_id", context.trace_id());
    #[cfg(feature = "otel")]
    otel::set_parent(span, context);
}

/// The span of one enqueue; the payload takes its trace context (with `otel`).
pub fn enqueue_span(account: &Account) -> Span {
    tracing::info_span!("outbox.enqueue", account = %account)
}

/// The span of the relay's post of `event`, following the trace context its payload
/// carries.
pub fn relay_post_span(event: &OutboxEvent) -> Span {
    let span = tracing::info_span!(
        "outbox.relay.post",
        event_id = %event.event_id,
        account = %event.account,
        sequence = event.sequence,
        trace_id = Empty,
    );
    // Read only for a span someone listens to: the relay's hot path stays as it was.
    if !span.is_disabled() {
        follow(&span, event.payload.trace_context().as_ref());
    }
    span
}

/// The span of publishing `message` to `destination`, following its trace context.
pub fn fanout_publish_span(message: &FanoutMessage, destination: &str) -> Span {
    let span = tracing::info_span!(
        "outbox.fanout.publish",
        destination,
        instruction_id = %message.instruction_id,
        account = %message.account,
        sequence = message.sequence,
        trace_id = Empty,
    );
    follow(&span, message_context(message).as_ref());
    span
}

/// The span of `consumer`'s inbox applying `message`, following its trace context.
pub fn inbox_apply_span(message: &FanoutMessage, consumer: &str) -> Span {
    let span = tracing::info_span!(
        "outbox.inbox.apply",
        consumer,
        instruction_id = %message.instruction_id,
        account = %message.account,
        sequence = message.sequence,
        kind = message.kind.as_str(),
        trace_id = Empty,
    );
    follow(&span, message_context(message).as_ref());
    span
}

/// A message's trace context; a malformed one (it came from outside, in a webhook
/// header) is ignored: tracing never holds a payout back.
pub fn message_context(message: &FanoutMessage) -> Option<TraceContext> {
    let parent = message.traceparent.as_deref()?;
    TraceContext::parse(parent, message.tracestate.as_deref())
        .inspect_err(|e| tracing::debug!(instruction_id = %message.instruction_id, "ignoring the message's trace context: {e}"))
        .ok()
}

#[cfg(feature = "otel")]
mod otel {
    //! The bridge to OpenTelemetry through `tracing-opentelemetry`.

    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use crate::trace::TraceContext;

    pub(super) fn current() -> Option<TraceContext> {
        let context = Span::current().context();
        let span = context.span();
        let span_context = span.span_context();
        if !span_context.is_valid() {
            return None;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        );
        let state = span_context.trace_state().header();
        TraceContext::parse(&traceparent, Some(&state)).ok()
    }

    pub(super) fn set_parent(span: &Span, context: &TraceContext) {
        let (Ok(trace_id), Ok(span_id)) = (
            TraceId::from_hex(context.trace_id()),
            SpanId::from_hex(context.parent_id()),
        ) else {
            return;
        };
        let state = context
            .tracestate()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let remote = SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::new(context.flags()),
            true,
            state,
        );
        // Err only when no OpenTelemetry layer is installed: nothing to link then.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
}
