//! The rejection notice: how the relay makes a ledger refusal visible on Hop 2, and
//! how it finds that notice again after a crash.
//!
//! The ledger keeps an idempotency key only for a write that succeeded: a refused
//! post (INSUFFICIENT_FUND, …) leaves nothing behind, and sending it again evaluates
//! it again — once the account is funded, it commits. So a refusal is the one outcome
//! the relay must make durable itself before anyone hears of it: the dispatcher
//! records `Rejected` in the store first, then writes this notice (an account-metadata
//! write that the ledger emits as SAVED_METADATA, which Hop 2 turns into a `rejected`
//! message), and a notice that fails is retried as a notice, never as the post.
//!
//! The notice also leaves a per-event marker on the account (`outbox_rejected:<id>`),
//! which later notices of the same account do not overwrite: before re-posting an
//! event whose outcome a crash left unknown, the relay looks for it
//! ([`crate::Ledger::rejection_notice`]) and does not re-post a refusal Hop 2 has
//! already announced.

use crate::domain::{
    EventId, Metadata, OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY, OUTBOX_SEQUENCE_KEY, OutboxEvent,
};
use crate::error::Result;
use crate::ledger::Ledger;

/// Metadata key of a rejection notice: the ledger's error code.
pub const OUTBOX_REJECTED_CODE_KEY: &str = "outbox_rejected_code";

/// The per-event marker key a notice leaves on the account; its value is the code.
pub fn rejection_marker_key(event_id: EventId) -> String {
    format!("outbox_rejected:{event_id}")
}

/// The idempotency key of `event_id`'s notice: a repeat is a replay, never a second write.
pub fn rejection_notice_key(event_id: EventId) -> String {
    format!("{event_id}:rejected")
}

/// The notice's metadata. Built only from the event and the code, so a re-sent
/// notice has the same body (and is answered as a replay).
pub fn rejection_notice_metadata(event: &OutboxEvent, code: &str) -> Metadata {
    Metadata::from([
        (OUTBOX_EVENT_ID_KEY.to_owned(), event.event_id.to_string()),
        (OUTBOX_ACCOUNT_KEY.to_owned(), event.account.to_string()),
        (OUTBOX_SEQUENCE_KEY.to_owned(), event.sequence.to_string()),
        (OUTBOX_REJECTED_CODE_KEY.to_owned(), code.to_owned()),
        (rejection_marker_key(event.event_id), code.to_owned()),
    ])
}

/// Writes the notice of `event`'s refusal with `code`.
pub(crate) async fn notify_rejection(
    ledger: &dyn Ledger,
    event: &OutboxEvent,
    code: &str,
) -> Result<()> {
    ledger
        .save_account_metadata(
            &rejection_notice_key(event.event_id),
            &event.account,
            &rejection_notice_metadata(event, code),
        )
        .await
        .map_err(|e| e.with("rejection", code))
}
