//! Hop 2 over RabbitMQ (work in progress).
