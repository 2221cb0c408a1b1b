//! The stored payload around its sequence number, so that enqueue can take the number
//! and write the row in one statement: SQL puts the digits between the two halves.
//!
//! The bytes are encoded once, with sequence 0, by the same encoder as every other
//! payload; the digits of the real sequence then replace that `0`. The result is
//! byte for byte what encoding with the real sequence gives (the number is a JSON
//! string of digits, and no other byte depends on it), so the relay sends exactly the
//! stored bytes, as it always did (docs/ARCHITECTURE.md, P5).

use outbox_core::{Error, ErrorKind, EventId, NewEvent, OUTBOX_SEQUENCE_KEY, Payload};

/// An encoded payload cut where its sequence digits go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SplitPayload {
    /// Everything up to and including the opening quote of the sequence value.
    pub before: Vec<u8>,
    /// Everything from the closing quote of the sequence value on.
    pub after: Vec<u8>,
}

impl SplitPayload {
    /// Encodes `event` as event `id` and cuts it around its sequence.
    pub fn encode(event: &NewEvent, id: EventId) -> outbox_core::Result<Self> {
        let placeholder = event.encode_as(id, 0)?;
        Self::cut(placeholder.as_bytes())
    }

    /// The payload with `sequence` in place: what the row stores.
    pub fn with_sequence(&self, sequence: u64) -> Payload {
        let digits = sequence.to_string();
        let mut bytes = Vec::with_capacity(self.before.len() + digits.len() + self.after.len());
        bytes.extend_from_slice(&self.before);
        bytes.extend_from_slice(digits.as_bytes());
        bytes.extend_from_slice(&self.after);
        Payload::from_stored(bytes)
    }

    /// Cuts bytes encoded with sequence 0. Inside a JSON string every quote is escaped,
    /// so the unescaped `"outbox_sequence":"` can only be the reserved key itself,
    /// which the encoder writes exactly once (an event may not set it).
    fn cut(bytes: &[u8]) -> outbox_core::Result<Self> {
        let needle = format!("\"{OUTBOX_SEQUENCE_KEY}\":\"0\"");
        let needle = needle.as_bytes();
        let mut found = bytes
            .windows(needle.len())
            .enumerate()
            .filter(|(_, window)| *window == needle)
            .map(|(at, _)| at);
        match (found.next(), found.next()) {
            (Some(at), None) => {
                let digit = at + needle.len() - 2;
                Ok(Self {
                    before: bytes[..digit].to_vec(),
                    after: bytes[digit + 1..].to_vec(),
                })
            }
            _ => Err(Error::new(
                ErrorKind::Internal,
                "the encoded payload does not carry its sequence exactly once",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Account, LedgerCommand, Metadata, RevertCommand};

    fn revert(metadata: Metadata) -> NewEvent {
        NewEvent::new(
            Account::parse("merchants:4471").unwrap(),
            LedgerCommand::Revert(RevertCommand {
                event_id: EventId::new(),
                metadata,
            }),
        )
    }

    /// Whatever the number and however the metadata try to look like the key, the
    /// halves around the digits give the bytes of a direct encoding.
    #[test]
    fn the_halves_and_the_digits_are_the_direct_encoding() {
        let tricky = Metadata::from([
            ("note".into(), r#""outbox_sequence":"0""#.into()),
            ("a\"outbox_sequence\":\"0".into(), "0".into()),
            ("zz".into(), "outbox_sequence".into()),
        ]);
        for event in [revert(Metadata::new()), revert(tricky)] {
            let id = EventId::new();
            let split = SplitPayload::encode(&event, id).unwrap();
            for sequence in [1, 9, 10, 99, 12_345, u64::from(u32::MAX), u64::MAX] {
                assert_eq!(
                    split.with_sequence(sequence),
                    event.encode_as(id, sequence).unwrap(),
                    "sequence {sequence}"
                );
            }
        }
    }

    #[test]
    fn bytes_without_the_sequence_are_refused() {
        let err = SplitPayload::cut(br#"{"post":{"metadata":{}}}"#).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Internal);
        let twice = br#"{"outbox_sequence":"0","outbox_sequence":"0"}"#;
        assert!(SplitPayload::cut(twice).is_err());
    }
}
