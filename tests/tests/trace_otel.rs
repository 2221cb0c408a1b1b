//! With an OpenTelemetry layer installed (feature `otel`), one payout's spans from the
//! caller's enqueue to the consumer's inbox share one trace id, through the real parts
//! in one process: SQLite enqueue → dispatcher → the dev ledger over HTTP (which knows
//! nothing about tracing) → its webhook → fan-out intake and loop → the HTTP Hop 2
//! publisher → the consumer's inbox apply. Spans go to opentelemetry_sdk's in-memory
//! exporter; nothing is hard-coded: the trace ids are the ones the SDK made.
//!
//! One test in this binary: it installs the global subscriber (the parts run on
//! Tokio workers and blocking threads, which a thread-local subscriber would miss).

mod common;

use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use common::pipeline::Pipeline;
use common::{eventually, fund, payout};

/// The spans of the hops, each of which must be in the caller's trace.
const HOP_SPANS: [&str; 3] = [
    "outbox.relay.post",
    "outbox.fanout.publish",
    "outbox.inbox.apply",
];

fn install_exporter() -> InMemorySpanExporter {
    let exporter = InMemorySpanExporter::default();
    // The simple processor exports each span as it ends: nothing waits in a batch.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("payment-service")));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    exporter
}

fn text_attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The span named `name` about instruction `id` (relay spans name it `event_id`).
fn hop_span<'a>(spans: &'a [SpanData], name: &str, id: &str) -> Option<&'a SpanData> {
    spans.iter().find(|s| {
        s.name == name
            && (text_attribute(s, "event_id").as_deref() == Some(id)
                || text_attribute(s, "instruction_id").as_deref() == Some(id))
    })
}

/// A caller's request span, as a payment service would have one around its enqueue.
struct Request {
    span: tracing::Span,
    trace_id: TraceId,
    span_id: SpanId,
}

impl Request {
    fn new() -> Self {
        let span = tracing::info_span!("payment.request");
        let context = span.context();
        let span_context = context.span().span_context().clone();
        assert!(
            span_context.is_valid(),
            "the OpenTelemetry layer is installed"
        );
        Self {
            span,
            trace_id: span_context.trace_id(),
            span_id: span_context.span_id(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_payouts_spans_from_enqueue_to_inbox_share_its_trace_id() {
    let exporter = install_exporter();
    let pipeline = Pipeline::start().await;

    // Two requests, two traces: the funding and the payout.
    let requests = [Request::new(), Request::new()];
    assert_ne!(requests[0].trace_id, requests[1].trace_id);
    let events: Vec<_> = [fund("9201", 100_000), payout("9201", 48_500)]
        .into_iter()
        .zip(&requests)
        .map(|(event, request)| {
            request
                .span
                .in_scope(|| pipeline.enqueue(&[event]))
                .remove(0)
        })
        .collect();

    let summary = pipeline.relay().await;
    assert_eq!(summary.accepted, 2, "{summary:?}");
    pipeline.wait_applied(2).await;

    // A span is exported when it ends, a little after the work it covers is visible.
    let ids: Vec<String> = events.iter().map(|e| e.event_id.to_string()).collect();
    eventually(Duration::from_secs(30), "every hop's span", || {
        let spans = exporter.get_finished_spans().unwrap();
        ids.iter().all(|id| {
            HOP_SPANS
                .iter()
                .all(|name| hop_span(&spans, name, id).is_some())
        })
    })
    .await;
    let spans = exporter.get_finished_spans().unwrap();

    for ((event, request), id) in events.iter().zip(&requests).zip(&ids) {
        // The enqueue span is the request's child, and the payload took its context.
        let enqueue = spans
            .iter()
            .find(|s| s.name == "outbox.enqueue" && s.parent_span_id == request.span_id)
            .unwrap_or_else(|| panic!("no outbox.enqueue span under the request of {id}"));
        assert_eq!(enqueue.span_context.trace_id(), request.trace_id);
        let stored = event
            .payload
            .trace_context()
            .expect("the payload is traced");
        assert_eq!(stored.trace_id(), request.trace_id.to_string());
        assert_eq!(
            stored.parent_id(),
            enqueue.span_context.span_id().to_string()
        );

        // The ledger carried it in the transaction's metadata.
        let on_ledger = pipeline.ledger_transaction(event).await;
        assert_eq!(on_ledger.metadata["traceparent"], stored.traceparent());

        // Every hop after the ledger is in the same trace, below the enqueue span.
        for name in HOP_SPANS {
            let span = hop_span(&spans, name, id).unwrap();
            assert_eq!(
                span.span_context.trace_id(),
                request.trace_id,
                "{name} of {id} is in another trace"
            );
            assert_eq!(
                span.parent_span_id,
                enqueue.span_context.span_id(),
                "{name} of {id} does not follow its enqueue span"
            );
            assert!(
                span.parent_span_is_remote,
                "{name}: the parent came over the wire"
            );
        }
    }

    pipeline.shutdown().await;
}
