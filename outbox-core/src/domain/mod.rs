//! Domain types, validated at the boundary: once built, a value is valid.

mod account;
mod amount;
mod asset;
mod command;
mod event;
mod event_id;
mod input;
mod payload;
mod position;

pub use account::Account;
pub use amount::{Amount, Monetary};
pub use asset::Asset;
pub use command::{LedgerCommand, Metadata, PostBody, PostCommand, Posting, RevertCommand, Script};
pub use event::{NewEvent, OutboxEvent};
pub use event_id::EventId;
pub use input::{RawNewEvent, RawPosting};
pub use payload::{
    OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY, OUTBOX_SEQUENCE_KEY, Payload, PayloadKind,
};
pub use position::{Position, PositionDecoder, PositionEncoder, PositionFormat};
