//! A trace context given explicitly at enqueue travels both hops without any
//! OpenTelemetry layer: the stored payload's metadata, the ledger transaction's
//! metadata (the dev ledger over HTTP, which knows nothing about tracing), the fan-out
//! store, the Hop 2 HTTP headers (the subscriber rebuilds the message from them) and
//! the consumer. An event enqueued without one carries none anywhere.

mod common;

use outbox_core::{FanoutMessage, TraceContext};
use outbox_testkit::ProbeConsumer;

use common::pipeline::Pipeline;
use common::{fund, payout};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACESTATE: &str = "vendor=opaque,other=1";

fn trace_of(message: &FanoutMessage) -> (Option<&str>, Option<&str>) {
    (
        message.traceparent.as_deref(),
        message.tracestate.as_deref(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_traceparent_reaches_the_ledger_the_hop2_headers_and_the_consumer() {
    let pipeline = Pipeline::start().await;
    let trace = TraceContext::parse(TRACEPARENT, Some(TRACESTATE)).unwrap();
    let events = pipeline.enqueue(&[
        fund("9101", 100_000),
        payout("9101", 48_500).with_trace(trace.clone()),
    ]);
    let (untraced, traced) = (&events[0], &events[1]);

    // Stored: the payload's metadata carries it, and it is what the relay sends.
    assert_eq!(traced.payload.trace_context(), Some(trace.clone()));
    assert_eq!(untraced.payload.trace_context(), None);

    let summary = pipeline.relay().await;
    assert_eq!(summary.accepted, 2, "{summary:?}");

    // Hop 1: the ledger transaction's metadata, read back over HTTP.
    let on_ledger = pipeline.ledger_transaction(traced).await;
    assert_eq!(on_ledger.metadata["traceparent"], TRACEPARENT);
    assert_eq!(on_ledger.metadata["tracestate"], TRACESTATE);
    let plain = pipeline.ledger_transaction(untraced).await;
    assert!(!plain.metadata.contains_key("traceparent"), "{plain:?}");

    // Hop 2: the webhook carried no trace header, the fan-out took it from the metadata.
    pipeline.wait_applied(2).await;
    let stored = pipeline.fanout_store.read_after(0, 10).await.unwrap();
    let stored_trace = |id: &str| {
        let m = stored
            .iter()
            .find(|s| s.message.instruction_id == id)
            .unwrap_or_else(|| panic!("{id} not in the fan-out store"));
        trace_of(&m.message)
    };
    assert_eq!(
        stored_trace(&traced.event_id.to_string()),
        (Some(TRACEPARENT), Some(TRACESTATE))
    );
    assert_eq!(stored_trace(&untraced.event_id.to_string()), (None, None));

    // The consumer got it through the Hop 2 HTTP headers, and applied both.
    let received = pipeline.probe.received();
    let at_consumer = |id: String| {
        received
            .iter()
            .find(|m| m.instruction_id == id)
            .map(trace_of)
            .unwrap_or_else(|| panic!("{id} never reached the consumer"))
    };
    assert_eq!(
        at_consumer(traced.event_id.to_string()),
        (Some(TRACEPARENT), Some(TRACESTATE))
    );
    assert_eq!(at_consumer(untraced.event_id.to_string()), (None, None));
    let applied: Vec<String> = pipeline
        .probe
        .applied()
        .into_iter()
        .map(|(_, _, id)| id)
        .collect();
    assert!(
        applied.contains(&traced.event_id.to_string()),
        "{applied:?}"
    );
    assert_eq!(
        pipeline
            .probe
            .balance("merchants:9101:payouts:pending", "USD/2"),
        48_500
    );

    pipeline.shutdown().await;
}
