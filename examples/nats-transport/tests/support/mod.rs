//! What the suite's harness needs beyond the transport: a server of its own.

pub mod server;
