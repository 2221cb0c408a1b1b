//! `outbox demo`: the whole Hop 1 story on the embedded default, in under a minute.
//!
//! SQLite outbox → relay (a child process, killed with SIGKILL mid-flight and
//! restarted) → the local dev ledger → signed webhooks → an HTTP receiver whose inbox
//! applies them to a treasury table. See the README for what each step shows.

mod hold_sink;
mod run;
mod scenario;

pub use run::{DemoArgs, run};
/// The reference scenario's events, for tests that probe or check them.
pub use scenario::Scenario;
