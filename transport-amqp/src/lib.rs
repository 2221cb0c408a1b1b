#![doc = include_str!("../README.md")]

mod config;
mod error;
mod publisher;
mod subscriber;
mod topology;

pub use config::{AmqpConfig, DEFAULT_URI};
pub use publisher::AmqpPublisher;
pub use subscriber::AmqpSubscriber;
pub use topology::{Topology, stable_hash};
