//! The one place where librdkafka errors become `outbox_core::Error`s: transient when
//! retrying the same message can succeed, permanent otherwise.

use outbox_core::{Error, ErrorKind};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Whether a librdkafka or broker error code is worth retrying.
///
/// Transient: a full local queue, timeouts, broker or transport down, leadership and
/// coordinator moves, throttling, and the idempotent producer's own recoverable states
/// (a re-created producer re-sends). Everything else (message too large, invalid or
/// unauthorised topic, bad configuration, authentication) is permanent.
pub fn is_transient_code(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::QueueFull
            | C::MessageTimedOut
            | C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::OperationTimedOut
            | C::TimedOutQueue
            | C::RequestTimedOut
            | C::NetworkException
            | C::BrokerNotAvailable
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::ReplicaNotAvailable
            | C::PreferredLeaderNotAvailable
            | C::EligibleLeadersNotAvailable
            | C::FencedLeaderEpoch
            | C::UnknownLeaderEpoch
            | C::UnknownTopicOrPartition
            | C::UnknownTopic
            | C::UnknownPartition
            | C::NotEnoughReplicas
            | C::NotEnoughReplicasAfterAppend
            | C::ISRInsufficient
            | C::KafkaStorageError
            | C::CoordinatorLoadInProgress
            | C::CoordinatorNotAvailable
            | C::NotCoordinator
            | C::WaitingForCoordinator
            | C::RebalanceInProgress
            | C::UnstableOffsetCommit
            | C::ThrottlingQuotaExceeded
            | C::InvalidMessage
            | C::Retry
            | C::PurgeQueue
            | C::PurgeInflight
            | C::Interrupted
            | C::InProgress
            | C::BrokerDestroy
            | C::DestroyBroker
            | C::NodeUpdate
            | C::RebootstrapRequired
            // The idempotent producer lost its state (a restarted broker without its
            // log, a fatal sequence error): the publisher re-creates the producer and
            // the loop re-sends.
            | C::Fatal
            | C::OutOfOrderSequenceNumber
            | C::UnknownProducerId
            | C::InvalidProducerEpoch
            | C::InvalidProducerIdMapping
            | C::ProducerFenced
    )
}

/// Whether a failed offset commit means the partition moved to another group member
/// (the new owner re-reads from the last committed offset: nothing is lost).
pub(crate) fn is_rebalance_code(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::IllegalGeneration
            | C::UnknownMemberId
            | C::FencedInstanceId
            | C::FencedMemberEpoch
            | C::StaleMemberEpoch
            | C::AssignmentLost
            | C::RevokePartitions
            | C::AssignPartitions
    )
}

/// Whether the broker refused us outright (credentials, ACLs, a bad group id): a
/// consumer that sees one stops instead of polling forever.
pub(crate) fn is_refusal_code(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::TopicAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::SaslAuthenticationFailed
            | C::Authentication
            | C::InvalidGroupId
            | C::UnsupportedSASLMechanism
            | C::IllegalSASLState
    )
}

/// Maps a librdkafka error to the core error, naming `what` was being done.
pub fn map_kafka_error(what: &str, err: &KafkaError) -> Error {
    classify(what, err).with_source(err.clone())
}

fn classify(what: &str, err: &KafkaError) -> Error {
    let message = format!("kafka {what}: {err}");
    match err {
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) | KafkaError::Nul(_) => {
            Error::new(ErrorKind::Config, message)
        }
        // The producer was dropped before it reported: nothing was confirmed.
        KafkaError::Canceled => Error::new(ErrorKind::Transport, message).transient(None),
        KafkaError::AdminOpCreation(_) | KafkaError::Subscription(_) => {
            Error::new(ErrorKind::Transport, message)
        }
        _ => {
            let error = Error::new(ErrorKind::Transport, message);
            match err.rdkafka_error_code() {
                Some(code) => {
                    let error = error.with("code", format!("{code:?}"));
                    if is_transient_code(code) {
                        error.transient(None)
                    } else {
                        error
                    }
                }
                None => error,
            }
        }
    }
}

/// Maps a bare error code (admin results, fatal errors) the same way.
pub(crate) fn map_code(what: &str, code: RDKafkaErrorCode) -> Error {
    map_kafka_error(what, &KafkaError::Global(code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::Retry;

    #[test]
    fn classification_follows_the_table() {
        for code in [
            RDKafkaErrorCode::QueueFull,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::NotLeaderForPartition,
        ] {
            let err = map_kafka_error("produce", &KafkaError::MessageProduction(code));
            assert_eq!(err.kind(), &ErrorKind::Transport, "{code:?}");
            assert!(err.is_transient(), "{code:?} should be transient");
            assert_eq!(err.context("code"), Some(format!("{code:?}").as_str()));
        }
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::InvalidTopic,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::ClusterAuthorizationFailed,
            RDKafkaErrorCode::SaslAuthenticationFailed,
            RDKafkaErrorCode::InvalidArgument,
        ] {
            let err = map_kafka_error("produce", &KafkaError::MessageProduction(code));
            assert_eq!(
                err.retry(),
                Retry::Permanent,
                "{code:?} should be permanent"
            );
        }
        assert_eq!(
            map_kafka_error("create", &KafkaError::ClientCreation("bad".into())).kind(),
            &ErrorKind::Config
        );
        assert!(map_kafka_error("deliver", &KafkaError::Canceled).is_transient());
    }

    #[test]
    fn rebalance_codes_are_recognised() {
        assert!(is_rebalance_code(RDKafkaErrorCode::IllegalGeneration));
        assert!(is_rebalance_code(RDKafkaErrorCode::UnknownMemberId));
        assert!(!is_rebalance_code(RDKafkaErrorCode::MessageSizeTooLarge));
        assert!(is_refusal_code(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert!(!is_refusal_code(RDKafkaErrorCode::BrokerTransportFailure));
    }
}
