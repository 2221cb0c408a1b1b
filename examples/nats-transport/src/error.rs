//! Mapping of async-nats errors and JetStream answers to [`outbox_core::Error`]: the
//! one place where this crate decides what is transient and what is permanent.
//!
//! | cause | retry class |
//! | --- | --- |
//! | connection refused, I/O, DNS, connect timeout | transient |
//! | no publish acknowledgement in time, broken pipe, too many acks pending | transient |
//! | a JetStream API error with a 5xx status (`JetStream system temporarily unavailable`, no quorum, store failure) | transient |
//! | no stream captures the subject (`no responders`) | permanent |
//! | message larger than the server's `max_payload` | permanent |
//! | a JetStream API error with a 4xx status (message over the stream's `max_msg_size`, bad configuration, stream not found) | permanent |
//! | authentication, authorization, TLS, bad server URL | permanent |
//! | undecodable headers on a delivery | permanent (`InvalidInput` naming the header) |
//!
//! Every error is [`ErrorKind::Transport`] except the undecodable headers.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::{ConnectError, ConnectErrorKind};
use outbox_core::{Error, ErrorKind};

/// A failed connection attempt.
pub(crate) fn connect(error: &ConnectError) -> Error {
    let transient = matches!(
        error.kind(),
        ConnectErrorKind::Io
            | ConnectErrorKind::TimedOut
            | ConnectErrorKind::Dns
            | ConnectErrorKind::MaxReconnects
    );
    classified(format!("nats connect: {error}"), transient)
}

/// A publish that the stream did not acknowledge.
pub(crate) fn publish(error: &async_nats::jetstream::context::PublishError) -> Error {
    let transient = match error.kind() {
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending => true,
        // No stream listens on the subject: retrying cannot help until an operator
        // creates one (the AMQP transport's "unroutable").
        PublishErrorKind::StreamNotFound | PublishErrorKind::MaxPayloadExceeded => false,
        // The stream answered with an API error, or the client failed before sending.
        _ => api_status(error).is_some_and(|status| status >= 500),
    };
    classified(format!("nats publish: {error}"), transient)
}

/// What a JetStream API call (stream or consumer lookup and creation) came back with.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    /// The server answered with this HTTP-like status.
    Status(usize),
    /// The client refused the request (an invalid name): permanent.
    Refused,
    /// No answer: a timeout or a lost connection, transient.
    Silent,
}

/// A failed JetStream API call: a 4xx answer or a refused request is permanent, a 5xx
/// answer or no answer transient.
pub(crate) fn api(doing: &str, error: &dyn std::fmt::Display, answer: Answer) -> Error {
    let transient = match answer {
        Answer::Status(status) => status >= 500,
        Answer::Refused => false,
        Answer::Silent => true,
    };
    classified(format!("nats {doing}: {error}"), transient)
}

/// The server did not confirm an ack in time: the message will come again.
pub(crate) fn ack(error: &dyn std::fmt::Display) -> Error {
    classified(format!("nats ack: {error}"), true)
}

fn classified(message: String, transient: bool) -> Error {
    let e = Error::new(ErrorKind::Transport, message);
    if transient { e.transient(None) } else { e }
}

/// The status code of the first JetStream API error in `error`'s source chain.
fn api_status(error: &(dyn std::error::Error + 'static)) -> Option<usize> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(api) = e.downcast_ref::<async_nats::jetstream::Error>() {
            return Some(api.code());
        }
        current = e.source();
    }
    None
}
