//! Mapping of lapin errors and broker answers to [`outbox_core::Error`]: the one place
//! where this crate decides what is transient and what is permanent.
//!
//! | cause | retry class |
//! | --- | --- |
//! | I/O error, refused connection, missed heartbeat, closed channel or connection | transient |
//! | broker closing the connection (`CONNECTION_FORCED`, shutdown), `INTERNAL_ERROR`, `RESOURCE_ERROR` | transient |
//! | publisher confirm `Nack`, confirm timeout | transient |
//! | `ACCESS_REFUSED`, `NOT_FOUND`, `PRECONDITION_FAILED`, `RESOURCE_LOCKED`, `NOT_ALLOWED`, `CONTENT_TOO_LARGE`, frame/syntax errors | permanent |
//! | message returned as unroutable (`mandatory`) | permanent |
//! | undecodable headers on a delivery | permanent (`InvalidInput` naming the header) |

use std::time::Duration;

use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use outbox_core::{Error, ErrorKind};

/// Classifies a lapin error; `doing` says what was attempted (`connect`, `publish`).
pub(crate) fn lapin(error: &lapin::Error, doing: &'static str) -> Error {
    use lapin::ErrorKind as L;
    let transient = match error.kind() {
        L::IOError(_)
        | L::RuntimeShutdownError(_)
        | L::MissingHeartbeatError
        | L::InvalidChannel(_)
        | L::InvalidChannelState(..)
        | L::InvalidConnectionState(_) => true,
        L::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(soft) => match soft {
                AMQPSoftError::ACCESSREFUSED
                | AMQPSoftError::NOTFOUND
                | AMQPSoftError::RESOURCELOCKED
                | AMQPSoftError::PRECONDITIONFAILED
                | AMQPSoftError::CONTENTTOOLARGE
                | AMQPSoftError::NOROUTE => false,
                AMQPSoftError::NOCONSUMERS => true,
            },
            AMQPErrorKind::Hard(hard) => matches!(
                hard,
                AMQPHardError::CONNECTIONFORCED
                    | AMQPHardError::INTERNALERROR
                    | AMQPHardError::RESOURCEERROR
                    | AMQPHardError::CHANNELERROR
            ),
        },
        // Parsing/serialisation bugs, authentication provider failures, protocol
        // version mismatch, channel limit, runtime misconfiguration: retrying the
        // same thing cannot help.
        _ => false,
    };
    let e = Error::new(ErrorKind::Transport, format!("amqp {doing}: {error}"))
        .with_source(error.clone());
    if transient { e.transient(None) } else { e }
}

/// The connection attempt did not finish within its bound.
pub(crate) fn connect_timeout(after: Duration) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("amqp connect: no connection within {after:?}"),
    )
    .transient(None)
}

/// The broker did not confirm a publish in time; it may still have it.
pub(crate) fn confirm_timeout(after: Duration) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("amqp publish: no confirm within {after:?}"),
    )
    .transient(None)
}

/// The broker negatively acknowledged a publish (queue full with `reject-publish`,
/// internal error): it did not take responsibility for the message.
pub(crate) fn nack() -> Error {
    Error::new(
        ErrorKind::Transport,
        "amqp publish: the broker nacked the message",
    )
    .transient(None)
}

/// A `mandatory` publish came back: no queue is bound for its routing key. Retrying
/// cannot help until an operator fixes the topology.
pub(crate) fn unroutable(exchange: &str, routing_key: &str, code: u16, text: &str) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!(
            "amqp publish: unroutable, exchange {exchange:?} has no queue bound for routing key {routing_key:?} ({code} {text})"
        ),
    )
    .with("routing_key", routing_key)
}

/// The broker answered a confirm-mode publish without a confirm; a bug.
pub(crate) fn not_confirmed() -> Error {
    Error::new(
        ErrorKind::Internal,
        "amqp publish: publisher confirms are not enabled on the channel",
    )
}

/// A value that does not fit an AMQP short string (255 bytes).
pub(crate) fn too_long(field: &'static str, len: usize) -> Error {
    Error::invalid(
        field,
        format!("{len} bytes do not fit an AMQP short string (255 bytes)"),
    )
}

/// The broker ended a consumer (queue deleted, broker-side cancel) or its stream.
pub(crate) fn consumer_ended(queue: &str) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("amqp consume: the broker ended the consumer on {queue}"),
    )
    .transient(None)
}

pub(crate) fn config(field: &'static str, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message).with("field", field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::protocol::AMQPError;
    use outbox_core::Retry;

    fn protocol(kind: AMQPErrorKind) -> lapin::Error {
        lapin::ErrorKind::ProtocolError(AMQPError::new(kind, "test".into())).into()
    }

    #[test]
    fn connection_trouble_is_transient() {
        let io: lapin::Error = lapin::ErrorKind::IOError(std::sync::Arc::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        ))
        .into();
        let e = lapin(&io, "connect");
        assert_eq!(e.kind(), &ErrorKind::Transport);
        assert!(e.is_transient(), "{e}");
        assert!(lapin(&lapin::ErrorKind::MissingHeartbeatError.into(), "consume").is_transient());
        let forced = protocol(AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED));
        assert!(lapin(&forced, "publish").is_transient());
        assert!(nack().is_transient());
        assert!(confirm_timeout(Duration::from_secs(1)).is_transient());
        assert!(connect_timeout(Duration::from_secs(1)).is_transient());
    }

    #[test]
    fn configuration_conflicts_are_permanent() {
        for soft in [
            AMQPSoftError::ACCESSREFUSED,
            AMQPSoftError::NOTFOUND,
            AMQPSoftError::PRECONDITIONFAILED,
        ] {
            let e = lapin(&protocol(AMQPErrorKind::Soft(soft)), "declare");
            assert_eq!(e.retry(), Retry::Permanent, "{e}");
        }
        let e = lapin(
            &protocol(AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED)),
            "connect",
        );
        assert_eq!(e.retry(), Retry::Permanent);
        let e = unroutable("ledger-events", "3", 312, "NO_ROUTE");
        assert_eq!(e.retry(), Retry::Permanent);
        assert_eq!(e.context("routing_key"), Some("3"));
        assert!(e.message().contains("\"ledger-events\""), "{e}");
    }
}
