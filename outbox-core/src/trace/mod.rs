//! W3C trace context across both hops: recorded at enqueue in the payload's ledger
//! metadata (`traceparent`, `tracestate`), carried by the ledger transaction, taken
//! back from it by the fan-out and put on every Hop 2 message (docs/TRACING.md).

mod context;
mod span;

pub use context::{TRACEPARENT_KEY, TRACESTATE_KEY, TraceContext};
pub use span::{
    current, enqueue_span, fanout_publish_span, follow, inbox_apply_span, message_context,
    relay_post_span,
};
