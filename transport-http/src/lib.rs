#![doc = include_str!("../README.md")]

mod config;
mod content_type;
mod error;
mod intake;
mod publisher;
mod receiver;
mod signing;
mod subscriber;

pub use config::{PublisherConfig, ReceiverConfig, SubscriberConfig};
pub use intake::{FanoutIntake, start_intake};
pub use publisher::HttpPublisher;
pub use receiver::{RunningReceiver, WEBHOOK_PATH, start_receiver};
pub use signing::{
    DEFAULT_TOLERANCE, DELIVERY_ID_HEADER, SIGNATURE_HEADER, SIGNED_HEADERS, TIMESTAMP_HEADER, sign,
};
pub use subscriber::{HttpSubscriber, MESSAGES_PATH};
