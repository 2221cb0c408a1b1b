#![doc = include_str!("../README.md")]

mod config;
mod error;
mod publisher;
mod subscriber;
mod topics;

pub use config::{
    DEFAULT_BROKERS, DEFAULT_CLIENT_ID, DEFAULT_TOPIC, PublisherConfig, SubscriberConfig,
};
pub use error::{is_transient_code, map_kafka_error};
pub use publisher::KafkaPublisher;
pub use subscriber::KafkaSubscriber;
pub use topics::{TopicOutcome, create_topic};
