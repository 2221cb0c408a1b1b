#![doc = include_str!("../README.md")]

mod database;
mod enqueue;
mod exceptions;
mod inbox;
mod position;
mod store;

pub use enqueue::MemoryTransaction;
pub use inbox::{MemoryConsumer, MemoryInbox, ProcessedMarker};
pub use store::MemoryStore;
