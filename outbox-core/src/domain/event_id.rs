//! `EventId`: the outbox event id, which is also the ledger `Idempotency-Key` and the
//! Hop 2 instruction id.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};

/// A UUID v7: time-ordered, so ids sort roughly by creation.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventId(Uuid);

impl EventId {
    /// A fresh v7 id.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }

    /// Parses and checks that the id is a UUID v7; the error names `field`.
    pub fn parse_field(field: &str, text: &str) -> Result<Self> {
        let uuid = Uuid::parse_str(text)
            .map_err(|e| Error::invalid(field, format!("{text:?} is not a UUID: {e}")))?;
        Self::from_uuid_field(field, uuid)
    }

    /// Parses an id, naming the field `event_id` in errors.
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_field("event_id", text)
    }

    /// Wraps a UUID after checking it is version 7.
    pub fn from_uuid(uuid: Uuid) -> Result<Self> {
        Self::from_uuid_field("event_id", uuid)
    }

    fn from_uuid_field(field: &str, uuid: Uuid) -> Result<Self> {
        if uuid.get_version_num() != 7 {
            return Err(Error::invalid(
                field,
                format!(
                    "{uuid} is a UUID v{}, a UUID v7 is required",
                    uuid.get_version_num()
                ),
            ));
        }
        Ok(Self(uuid))
    }

    /// The underlying UUID (always version 7).
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for EventId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventId({self})")
    }
}

impl FromStr for EventId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl TryFrom<String> for EventId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::parse(&s)
    }
}

impl From<EventId> for String {
    fn from(id: EventId) -> Self {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_v7_and_round_trips() {
        let id = EventId::new();
        assert_eq!(EventId::parse(&id.to_string()).unwrap(), id);
    }

    #[test]
    fn rejects_other_versions_naming_the_field() {
        let v4 = "2f1d3c1e-8f53-4a8e-9b59-8d5d4f3b2a10";
        let err = EventId::parse_field("event_id", v4).unwrap_err();
        assert_eq!(err.field(), Some("event_id"));
        assert!(err.message().contains("v4"), "{err}");
        let err = EventId::parse("not-a-uuid").unwrap_err();
        assert!(err.to_string().contains("not a UUID"), "{err}");
    }
}
