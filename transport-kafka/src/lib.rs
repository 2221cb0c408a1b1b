//! Hop 2 over Kafka (work in progress).
