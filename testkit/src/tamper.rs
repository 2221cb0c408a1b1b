//! The writes the immutability cases try behind a store's back, named by what they
//! change rather than written as SQL, so that a store which is not a SQL database can
//! try each one its own way (docs/ADAPTERS.md, "Store and relay").
//!
//! Each harness answers a tamper through
//! [`StoreHarness::tamper`](crate::StoreHarness::tamper) or
//! [`FanoutStoreHarness::tamper`](crate::FanoutStoreHarness::tamper); their defaults
//! run the statement [`sql`](StoreTamper::sql) gives, written for the in-tree schema,
//! through the harness's `execute_raw`.

/// A change to an append-only record of the relay-side store ([`outbox_core::Store`],
/// "Contract"): the store's backend must refuse every one with
/// [`outbox_core::ErrorKind::Immutable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreTamper {
    /// Rewrite the account of every outbox event.
    RewriteEventAccount,
    /// Delete every outbox event.
    DeleteEvents,
    /// Rewrite the outcome of every delivery record.
    RewriteDeliveryOutcome,
    /// Delete every delivery record.
    DeleteDeliveries,
    /// Rewrite the note of every exception resolution.
    RewriteResolutionNote,
    /// Rewrite who resolved every resolved exception.
    RewriteResolutionAuthor,
    /// Delete every exception resolution.
    DeleteResolutions,
    /// Rewrite the detail of every exception.
    RewriteExceptionDetail,
    /// Delete every exception.
    DeleteExceptions,
}

impl StoreTamper {
    /// The tampers the outbox immutability case tries.
    pub const OUTBOX: [Self; 4] = [
        Self::RewriteEventAccount,
        Self::DeleteEvents,
        Self::RewriteDeliveryOutcome,
        Self::DeleteDeliveries,
    ];

    /// The tampers the exception-queue immutability case tries.
    pub const EXCEPTIONS: [Self; 5] = [
        Self::RewriteResolutionNote,
        Self::RewriteResolutionAuthor,
        Self::DeleteResolutions,
        Self::RewriteExceptionDetail,
        Self::DeleteExceptions,
    ];

    /// The statement for the in-tree schema (SQLite and PostgreSQL alike).
    pub const fn sql(self) -> &'static str {
        match self {
            Self::RewriteEventAccount => "UPDATE outbox_events SET account = 'tampered'",
            Self::DeleteEvents => "DELETE FROM outbox_events",
            Self::RewriteDeliveryOutcome => "UPDATE outbox_deliveries SET outcome = 'rejected'",
            Self::DeleteDeliveries => "DELETE FROM outbox_deliveries",
            Self::RewriteResolutionNote => "UPDATE exception_resolutions SET note = 'rewritten'",
            Self::RewriteResolutionAuthor => {
                "UPDATE exception_resolutions SET resolved_by = 'mallory'"
            }
            Self::DeleteResolutions => "DELETE FROM exception_resolutions",
            Self::RewriteExceptionDetail => "UPDATE exceptions SET detail = 'nothing to see'",
            Self::DeleteExceptions => "DELETE FROM exceptions",
        }
    }
}

/// A change to a record of the fan-out store ([`outbox_core::FanoutStore`],
/// "Contract"). Every one but [`RewriteCursors`](Self::RewriteCursors) touches an
/// append-only record and must be refused with [`outbox_core::ErrorKind::Immutable`];
/// cursors are progress, not record, and stay writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FanoutTamper {
    /// Rewrite the account of every stored message.
    RewriteMessageAccount,
    /// Give a ledger transaction id to every stored message without one (the
    /// rejection notices).
    FillMissingLedgerTxId,
    /// Delete every stored message.
    DeleteMessages,
    /// Rewrite every recorded webhook delivery id.
    RewriteDeliveryId,
    /// Delete every recorded webhook delivery id.
    DeleteDeliveries,
    /// Rewrite the reason of every dead letter.
    RewriteDeadLetterReason,
    /// Rewrite the error of every dead letter.
    RewriteDeadLetterError,
    /// Delete every dead letter.
    DeleteDeadLetters,
    /// Rewrite the account of every replay request.
    RewriteReplayAccount,
    /// Delete every replay request.
    DeleteReplayRequests,
    /// Write every saved cursor again with its own value: allowed, and answers how
    /// many cursors it wrote.
    RewriteCursors,
}

impl FanoutTamper {
    /// The tampers the message immutability case tries.
    pub const MESSAGES: [Self; 5] = [
        Self::RewriteMessageAccount,
        Self::FillMissingLedgerTxId,
        Self::DeleteMessages,
        Self::RewriteDeliveryId,
        Self::DeleteDeliveries,
    ];

    /// The tampers the dead-letter immutability case tries.
    pub const DEAD_LETTERS: [Self; 5] = [
        Self::RewriteDeadLetterReason,
        Self::RewriteDeadLetterError,
        Self::DeleteDeadLetters,
        Self::RewriteReplayAccount,
        Self::DeleteReplayRequests,
    ];

    /// The statement for the in-tree schema (SQLite and PostgreSQL alike).
    pub const fn sql(self) -> &'static str {
        match self {
            Self::RewriteMessageAccount => {
                "UPDATE fanout_messages SET account = 'merchants:tampered'"
            }
            Self::FillMissingLedgerTxId => {
                "UPDATE fanout_messages SET ledger_tx_id = 91 WHERE ledger_tx_id IS NULL"
            }
            Self::DeleteMessages => "DELETE FROM fanout_messages",
            Self::RewriteDeliveryId => "UPDATE fanout_deliveries SET delivery_id = 'wh-tampered'",
            Self::DeleteDeliveries => "DELETE FROM fanout_deliveries",
            Self::RewriteDeadLetterReason => "UPDATE fanout_dead_letters SET reason = 'set_aside'",
            Self::RewriteDeadLetterError => {
                "UPDATE fanout_dead_letters SET error = 'nothing happened'"
            }
            Self::DeleteDeadLetters => "DELETE FROM fanout_dead_letters",
            Self::RewriteReplayAccount => {
                "UPDATE fanout_replay_requests SET account = 'merchants:other'"
            }
            Self::DeleteReplayRequests => "DELETE FROM fanout_replay_requests",
            Self::RewriteCursors => "UPDATE fanout_cursors SET position = position",
        }
    }
}

/// Says a case is skipped because the harness can try no tamper (`Unsupported`: no
/// writer but the store can reach its records), and returns whether it is.
pub(crate) fn skipped(case: &str, answer: &outbox_core::Result<u64>) -> bool {
    match answer {
        Err(e) if e.kind() == &outbox_core::ErrorKind::Unsupported => {
            eprintln!("skipped {case}: the harness tries no tamper ({e})");
            true
        }
        _ => false,
    }
}
