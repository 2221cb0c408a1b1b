//! The `Relay` trait: a resumable source of committed outbox events in commit order.

use std::time::Duration;

use async_trait::async_trait;

use crate::domain::{OutboxEvent, Position};
use crate::error::Result;

/// A source of committed outbox events in commit order.
///
/// # Contract
/// - [`Relay::next_batch`] returns events after the last one it returned (after the
///   saved cursor right after opening), in commit order, never one twice in a session.
///   Per account that is sequence order, as the store reads it ([`crate::Store`],
///   "Contract"); a relay never reorders within an account.
/// - [`Relay::acknowledge`] saves `through` as the relay's cursor (named
///   [`Relay::name`]) in its store, by the store's cursor rule ([`crate::Store`],
///   "Cursors"): only forward, durable on return, fenced where the fleet fences. A
///   relay adds no rule of its own: acknowledging a position at or before the saved
///   cursor succeeds and changes nothing. It may refuse a position it never returned
///   (`InvalidInput`), since saving it could skip events. Nothing is written to the
///   event rows. After a crash the relay resumes after the saved cursor, so events
///   after it are delivered again: the ledger's idempotency absorbs that.
/// - [`Relay::acknowledged`] is the highest position loaded or acknowledged; it never
///   moves back.
/// - [`Relay::wait`] returns when new events may be there (an in-process wake-up, a
///   database notification) or after the poll interval, whichever comes first. It never
///   spins.
#[async_trait]
pub trait Relay: Send {
    /// The relay's name, which keys its cursor.
    fn name(&self) -> &str;

    /// Up to `max` events after the last returned one; empty when none are committed.
    async fn next_batch(&mut self, max: usize) -> Result<Vec<OutboxEvent>>;

    /// Durably records that every event up to and including `through` has a terminal
    /// outcome, through the store's cursor rule (see the contract).
    async fn acknowledge(&mut self, through: Position) -> Result<()>;

    /// The highest position loaded or acknowledged.
    fn acknowledged(&self) -> Option<Position>;

    /// Waits for a wake-up or at most `interval`.
    async fn wait(&mut self, interval: Duration);
}

mod polling;

pub use polling::{PollingRelay, Wakeup};
