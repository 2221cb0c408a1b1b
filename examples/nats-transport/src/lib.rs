//! A Hop 2 transport over NATS JetStream, written only against `outbox-core`'s
//! public traits, as a team outside the project would write one: [`NatsPublisher`]
//! (a sink of the fan-out loop) and [`NatsSubscriber`] (a source feeding a
//! consumer's inbox). Its tests run `outbox-testkit`'s transport suite unchanged.
//! How it was written and how it is tested: this crate's README and
//! docs/ADAPTERS.md, "Transports".

mod config;
mod error;
mod publisher;
mod subscriber;

pub use config::NatsConfig;
pub use publisher::NatsPublisher;
pub use subscriber::NatsSubscriber;
