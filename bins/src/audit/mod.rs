//! `outbox audit <event-id>`: one event across both hops — its outbox row, every
//! delivery attempt, the ledger transaction carrying its id (and its revert, or the
//! rejection notice), with `--verify-log` the ledger's hash chain up to its log
//! entry, the Hop 2 messages and where each destination's cursor stands, the
//! consumer's inbox record, and every exception that names it — and whether those
//! records agree.

mod findings;
mod gather;
mod report;
mod text;

pub use gather::{Source, Sources, gather};
pub use report::Report;
pub use text::render;
