//! Topic administration: create the fan-out topic with its partition count, once.

use std::time::Duration;

use outbox_core::{Error, ErrorKind, Result};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

use crate::error::{map_code, map_kafka_error};

/// What [`create_topic`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicOutcome {
    Created,
    /// The topic was there already; its partition count was left as it is.
    AlreadyExists,
}

/// Creates `topic` with `partitions` partitions (replication factor 1 when
/// `replication` is `None`, else that factor), tolerating "already exists".
///
/// The partition count bounds the consumer group's parallelism and fixes which
/// partition each account's key lands on: changing it later moves accounts between
/// partitions, so pick it once.
///
/// # Errors
/// `Config` for bad input, `Transport` (transient when the broker cannot be reached
/// within `timeout`) otherwise.
pub async fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    replication: Option<i32>,
    timeout: Duration,
) -> Result<TopicOutcome> {
    if partitions < 1 {
        return Err(
            Error::new(ErrorKind::Config, "a topic needs at least one partition")
                .with("topic", topic),
        );
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| map_kafka_error("admin client", &e).with("brokers", brokers))?;
    let options = AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout));
    let new_topic = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(replication.unwrap_or(1)),
    );
    let request = admin.create_topics([&new_topic], &options);
    let answer = tokio::time::timeout(timeout + Duration::from_secs(1), request).await;
    let results = match answer {
        Ok(Ok(results)) => results,
        Ok(Err(e)) => return Err(map_kafka_error("create topic", &e).with("topic", topic)),
        Err(_) => {
            return Err(
                map_code("create topic", RDKafkaErrorCode::OperationTimedOut)
                    .with("topic", topic)
                    .with("brokers", brokers),
            );
        }
    };
    let mut outcome = TopicOutcome::Created;
    for result in results {
        match result {
            Ok(_) => {}
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => outcome = TopicOutcome::AlreadyExists,
            Err((name, code)) => return Err(map_code("create topic", code).with("topic", name)),
        }
    }
    Ok(outcome)
}
