//! Faults a test can make the next write meet: the answers a remote ledger gives
//! that the relay must classify (docs/ADAPTERS.md#ledger).

use std::time::Duration;

use outbox_core::{Error, ErrorKind};

/// What the next write call (post, bulk, run, revert, account metadata) meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Refused before it runs, as a server that is down asks the client to come back
    /// after `retry_after`.
    Unavailable {
        /// The delay the ledger asks for.
        retry_after: Duration,
    },
    /// Refused before it runs, as a throttling server asks to slow down.
    Throttled {
        /// The delay the ledger asks for.
        retry_after: Duration,
    },
    /// Runs and commits, then its answer is lost: the caller sees a transient error.
    AnswerLostAfterCommit,
}

impl Fault {
    /// The error the caller sees; refusals carry their `Retry-After`.
    pub(crate) fn error(self) -> Error {
        match self {
            Self::Unavailable { retry_after } => {
                Error::new(ErrorKind::Ledger, "the ledger is unavailable")
                    .with_code("UNAVAILABLE")
                    .transient(Some(retry_after))
            }
            Self::Throttled { retry_after } => {
                Error::new(ErrorKind::Ledger, "the ledger throttles this client")
                    .with_code("THROTTLED")
                    .transient(Some(retry_after))
            }
            // Committed or not, the caller cannot tell: a transport error, retried.
            Self::AnswerLostAfterCommit => Error::new(
                ErrorKind::Transport,
                "the answer was lost after the write committed",
            )
            .transient(None),
        }
    }
}
