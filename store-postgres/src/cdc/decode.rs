//! pgoutput (protocol version 1, binary values) decoding: Relation messages describe the
//! outbox table's columns, Insert messages become [`OutboxEvent`]s. Begin, Commit and
//! logical-decoding Messages are parsed by pgwire-replication itself.
//!
//! Columns are found by name, not by position, so the other columns of the table
//! (`txid`, anything added later) and their order do not matter.

use chrono::{DateTime, Utc};
use outbox_core::{Account, Error, ErrorKind, EventId, OutboxEvent, Payload, Result};
use uuid::Uuid;

use crate::position::PgPosition;

/// One decoded pgoutput message (the kinds the library passes through).
#[derive(Debug)]
pub(crate) enum Message<'a> {
    Relation(Relation),
    Insert {
        relation: u32,
        tuple: Vec<Datum<'a>>,
    },
    Update {
        relation: u32,
    },
    Delete {
        relation: u32,
    },
    Truncate,
    /// Type ('Y') and Origin ('O'): nothing the relay needs.
    Ignored,
}

/// One column value of a tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Datum<'a> {
    Null,
    /// Only in UPDATEs: an unchanged TOASTed value. Never in an INSERT.
    UnchangedToast,
    Text(&'a [u8]),
    Binary(&'a [u8]),
}

/// A table as a Relation message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Relation {
    pub id: u32,
    /// Empty for `pg_catalog`, as pgoutput sends it.
    pub namespace: String,
    pub name: String,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    pub name: String,
    pub type_oid: u32,
}

/// Parses one pgoutput message (the payload of an XLogData).
pub(crate) fn parse(data: &[u8]) -> Result<Message<'_>> {
    let mut r = Reader { buf: data };
    let tag = r.u8()?;
    match tag {
        b'R' => {
            let id = r.u32()?;
            let namespace = r.cstr()?.to_owned();
            let name = r.cstr()?.to_owned();
            let _replica_identity = r.u8()?;
            let count = r.u16()?;
            let mut columns = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let _flags = r.u8()?;
                let name = r.cstr()?.to_owned();
                let type_oid = r.u32()?;
                let _type_modifier = r.u32()?;
                columns.push(Column { name, type_oid });
            }
            Ok(Message::Relation(Relation {
                id,
                namespace,
                name,
                columns,
            }))
        }
        b'I' => {
            let relation = r.u32()?;
            let kind = r.u8()?;
            if kind != b'N' {
                return Err(protocol(format!(
                    "Insert carries tuple kind {:?}, expected 'N'",
                    char::from(kind)
                )));
            }
            let tuple = r.tuple()?;
            Ok(Message::Insert { relation, tuple })
        }
        b'U' => Ok(Message::Update { relation: r.u32()? }),
        b'D' => Ok(Message::Delete { relation: r.u32()? }),
        b'T' => Ok(Message::Truncate),
        b'Y' | b'O' => Ok(Message::Ignored),
        other => Err(protocol(format!(
            "unexpected pgoutput message {:?} (protocol version 1 without streaming)",
            char::from(other)
        ))),
    }
}

// Type OIDs from pg_type.dat: stable across PostgreSQL versions.
const INT4: u32 = 23;
const INT8: u32 = 20;
const TEXT: u32 = 25;
const VARCHAR: u32 = 1043;
const UUID: u32 = 2950;
const BYTEA: u32 = 17;
const JSON: u32 = 114;
const JSONB: u32 = 3802;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const XID8: u32 = 5069;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00:00 UTC).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Where the outbox columns sit in the outbox table's tuples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutboxLayout {
    position: (usize, u32),
    event_id: (usize, u32),
    account: (usize, u32),
    sequence: (usize, u32),
    payload: (usize, u32),
    created_at: (usize, u32),
    /// Only needed to skip rows the catch-up delivered (see `catch_up`).
    txid: Option<(usize, u32)>,
}

impl OutboxLayout {
    /// Finds the outbox columns of `relation` and checks their types.
    pub(crate) fn of(relation: &Relation) -> Result<Self> {
        let find = |name: &str, allowed: &[u32]| -> Result<(usize, u32)> {
            let (index, column) = relation
                .columns
                .iter()
                .enumerate()
                .find(|(_, c)| c.name == name)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Config,
                        format!(
                            "the published outbox table {}.{} has no column {name:?} \
                             (a publication column list must include it)",
                            relation.namespace, relation.name
                        ),
                    )
                })?;
            if !allowed.contains(&column.type_oid) {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "outbox column {name:?} has type oid {}, expected one of {allowed:?}",
                        column.type_oid
                    ),
                ));
            }
            Ok((index, column.type_oid))
        };
        Ok(Self {
            position: find("position", &[INT8, INT4])?,
            event_id: find("event_id", &[UUID])?,
            account: find("account", &[TEXT, VARCHAR])?,
            sequence: find("sequence", &[INT8, INT4])?,
            payload: find("payload", &[BYTEA, JSONB, JSON, TEXT])?,
            created_at: find("created_at", &[TIMESTAMPTZ, TIMESTAMP])?,
            txid: if relation.columns.iter().any(|c| c.name == "txid") {
                Some(find("txid", &[XID8, INT8])?)
            } else {
                None
            },
        })
    }

    /// The row's `txid` column (the polling reader's order), to tell the rows the
    /// catch-up delivered from the stream's own.
    pub(crate) fn txid(&self, tuple: &[Datum<'_>]) -> Result<u64> {
        let Some(txid) = self.txid else {
            return Err(Error::new(
                ErrorKind::Config,
                "the published outbox table has no column \"txid\" (a publication column list \
                 must include it): the relay needs it to skip rows its catch-up delivered",
            ));
        };
        let value = integer(column(tuple, txid, "txid")?, "txid")?;
        // xid8 is unsigned 64-bit on the wire; an int8 column must not be negative.
        match txid.1 {
            XID8 => Ok(value as u64),
            _ => u64::try_from(value).map_err(|_| protocol(format!("txid {value} is negative"))),
        }
    }

    /// The row position of an Insert, read before the rest so errors can name it.
    pub(crate) fn position(&self, tuple: &[Datum<'_>]) -> Result<i64> {
        integer(column(tuple, self.position, "position")?, "position")
    }

    /// Builds the event of one inserted outbox row committed at `commit_lsn`.
    pub(crate) fn event(&self, tuple: &[Datum<'_>], commit_lsn: u64) -> Result<OutboxEvent> {
        let row = self.position(tuple)?;
        let with_row = |e: Error| e.with("position", row);
        let event_id = {
            let bytes = column(tuple, self.event_id, "event_id").map_err(with_row)?;
            let uuid = Uuid::from_slice(bytes)
                .map_err(|e| protocol(format!("event_id: {e}")).with("position", row))?;
            EventId::from_uuid(uuid).map_err(|e| {
                Error::new(ErrorKind::Internal, format!("stored event id: {e}"))
                    .with("position", row)
            })?
        };
        let with_id = |e: Error| e.with("position", row).with("event_id", event_id);
        let account = {
            let bytes = column(tuple, self.account, "account").map_err(with_id)?;
            let text = utf8(bytes, "account").map_err(with_id)?;
            Account::parse(text).map_err(|e| {
                Error::new(ErrorKind::Internal, format!("stored account: {e}"))
                    .with("event_id", event_id)
            })?
        };
        let sequence = {
            let value = integer(
                column(tuple, self.sequence, "sequence").map_err(with_id)?,
                "sequence",
            )
            .map_err(with_id)?;
            u64::try_from(value)
                .ok()
                .filter(|s| *s >= 1)
                .ok_or_else(|| with_id(protocol(format!("sequence {value} is not positive"))))?
        };
        let payload = {
            let bytes = column(tuple, self.payload, "payload").map_err(with_id)?;
            // jsonb's binary form is a version byte (1) before the text.
            let bytes = match (self.payload.1, bytes.split_first()) {
                (JSONB, Some((1, text))) => text,
                (JSONB, _) => return Err(with_id(protocol("jsonb payload of an unknown version"))),
                _ => bytes,
            };
            Payload::from_stored(bytes.to_vec())
        };
        let created_at = {
            let micros = integer(
                column(tuple, self.created_at, "created_at").map_err(with_id)?,
                "created_at",
            )
            .map_err(with_id)?;
            micros
                .checked_add(PG_EPOCH_MICROS)
                .and_then(DateTime::<Utc>::from_timestamp_micros)
                .ok_or_else(|| with_id(protocol(format!("created_at {micros} is out of range"))))?
        };
        Ok(OutboxEvent {
            position: PgPosition::Log {
                lsn: commit_lsn,
                row,
            }
            .encode(),
            event_id,
            account,
            sequence,
            payload,
            created_at,
        })
    }
}

/// The binary value of column `(index, type)`; text only for text-like types, whose
/// binary and text forms are the same bytes.
fn column<'a>(
    tuple: &[Datum<'a>],
    (index, type_oid): (usize, u32),
    name: &str,
) -> Result<&'a [u8]> {
    match tuple.get(index) {
        Some(Datum::Binary(bytes)) => Ok(bytes),
        Some(Datum::Text(bytes)) if matches!(type_oid, TEXT | VARCHAR | JSON) => Ok(bytes),
        Some(Datum::Text(_)) => Err(protocol(format!(
            "column {name:?} arrived in text format; the relay asks for binary"
        ))),
        Some(Datum::Null) => Err(protocol(format!("column {name:?} is NULL"))),
        Some(Datum::UnchangedToast) => Err(protocol(format!(
            "column {name:?} is an unchanged TOAST value in an INSERT"
        ))),
        None => Err(protocol(format!(
            "the tuple has {} columns, {name:?} is column {index}",
            tuple.len()
        ))),
    }
}

/// A big-endian int8 or int4.
fn integer(bytes: &[u8], name: &str) -> Result<i64> {
    match bytes.len() {
        8 => Ok(i64::from_be_bytes(bytes.try_into().expect("8 bytes"))),
        4 => Ok(i64::from(i32::from_be_bytes(
            bytes.try_into().expect("4 bytes"),
        ))),
        n => Err(protocol(format!("{name}: {n} bytes is not an integer"))),
    }
}

fn utf8<'a>(bytes: &'a [u8], name: &str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| protocol(format!("{name}: {e}")))
}

fn protocol(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, format!("pgoutput: {}", message.into()))
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(protocol(format!(
                "message truncated: needed {n} more bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn cstr(&mut self) -> Result<&'a str> {
        let end = self
            .buf
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| protocol("unterminated string"))?;
        let text = utf8(&self.buf[..end], "name")?;
        self.buf = &self.buf[end + 1..];
        Ok(text)
    }

    fn tuple(&mut self) -> Result<Vec<Datum<'a>>> {
        let count = self.u16()?;
        let mut values = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let value = match self.u8()? {
                b'n' => Datum::Null,
                b'u' => Datum::UnchangedToast,
                kind @ (b't' | b'b') => {
                    let len = self.u32()? as usize;
                    let bytes = self.take(len)?;
                    if kind == b't' {
                        Datum::Text(bytes)
                    } else {
                        Datum::Binary(bytes)
                    }
                }
                other => {
                    return Err(protocol(format!(
                        "unknown tuple value kind {:?}",
                        char::from(other)
                    )));
                }
            };
            values.push(value);
        }
        Ok(values)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds pgoutput messages the way PostgreSQL 15 sends them.
    pub(crate) fn relation_message(
        id: u32,
        namespace: &str,
        name: &str,
        columns: &[(&str, u32)],
    ) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(id.to_be_bytes());
        for s in [namespace, name] {
            m.extend(s.as_bytes());
            m.push(0);
        }
        m.push(b'd');
        m.extend((columns.len() as u16).to_be_bytes());
        for (column, oid) in columns {
            m.push(0);
            m.extend(column.as_bytes());
            m.push(0);
            m.extend(oid.to_be_bytes());
            m.extend((-1i32).to_be_bytes());
        }
        m
    }

    pub(crate) fn insert_message(id: u32, values: &[Option<Vec<u8>>]) -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend(id.to_be_bytes());
        m.push(b'N');
        m.extend((values.len() as u16).to_be_bytes());
        for value in values {
            match value {
                None => m.push(b'n'),
                Some(bytes) => {
                    m.push(b'b');
                    m.extend((bytes.len() as u32).to_be_bytes());
                    m.extend(bytes);
                }
            }
        }
        m
    }

    const COLUMNS: [(&str, u32); 7] = [
        ("position", INT8),
        ("event_id", UUID),
        ("account", TEXT),
        ("sequence", INT8),
        ("payload", BYTEA),
        ("created_at", TIMESTAMPTZ),
        ("txid", 5069),
    ];

    #[test]
    fn relation_then_insert_decode_to_an_event() {
        let relation = match parse(&relation_message(
            16384,
            "tenant_a",
            "outbox_events",
            &COLUMNS,
        ))
        .unwrap()
        {
            Message::Relation(r) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(relation.namespace, "tenant_a");
        let layout = OutboxLayout::of(&relation).unwrap();
        let id = EventId::new();
        // 2026-10-07 00:00:00 UTC in PostgreSQL microseconds.
        let created = DateTime::parse_from_rfc3339("2026-10-07T00:00:00Z")
            .unwrap()
            .timestamp_micros()
            - PG_EPOCH_MICROS;
        let data = insert_message(
            16384,
            &[
                Some(42i64.to_be_bytes().to_vec()),
                Some(id.as_uuid().as_bytes().to_vec()),
                Some(b"merchants:4471".to_vec()),
                Some(3i64.to_be_bytes().to_vec()),
                Some(br#"{"post":{}}"#.to_vec()),
                Some(created.to_be_bytes().to_vec()),
                Some(77u64.to_be_bytes().to_vec()),
            ],
        );
        let Message::Insert {
            relation: rel,
            tuple,
        } = parse(&data).unwrap()
        else {
            panic!("not an insert")
        };
        assert_eq!(rel, 16384);
        let event = layout.event(&tuple, 0x1_0000_0010).unwrap();
        assert_eq!(
            event.position,
            PgPosition::Log {
                lsn: 0x1_0000_0010,
                row: 42
            }
            .encode()
        );
        assert_eq!(event.event_id, id);
        assert_eq!(event.account.as_str(), "merchants:4471");
        assert_eq!(event.sequence, 3);
        assert_eq!(event.payload.as_bytes(), br#"{"post":{}}"#);
        assert_eq!(event.created_at.to_rfc3339(), "2026-10-07T00:00:00+00:00");
        assert_eq!(layout.txid(&tuple).unwrap(), 77);

        // Without a txid column the event still decodes; only skipping needs it.
        let Message::Relation(narrow) =
            parse(&relation_message(1, "s", "t", &COLUMNS[..6])).unwrap()
        else {
            panic!()
        };
        let narrow = OutboxLayout::of(&narrow).unwrap();
        narrow.event(&tuple, 1).unwrap();
        let err = narrow.txid(&tuple).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Config);
        assert!(err.message().contains("\"txid\""), "{err}");
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert!(parse(b"").is_err());
        assert!(parse(b"I\0\0").is_err());
        assert!(parse(b"X").is_err());
        let mut relation = relation_message(1, "s", "t", &COLUMNS);
        relation.truncate(relation.len() - 3);
        assert!(parse(&relation).is_err());
        let without_payload = relation_message(1, "s", "t", &COLUMNS[..4]);
        let Message::Relation(r) = parse(&without_payload).unwrap() else {
            panic!()
        };
        let err = OutboxLayout::of(&r).unwrap_err();
        assert!(err.message().contains("payload"), "{err}");
    }

    #[test]
    fn a_null_column_names_itself() {
        let Message::Relation(r) = parse(&relation_message(1, "s", "t", &COLUMNS)).unwrap() else {
            panic!()
        };
        let layout = OutboxLayout::of(&r).unwrap();
        let data = insert_message(
            1,
            &[
                Some(1i64.to_be_bytes().to_vec()),
                None,
                None,
                None,
                None,
                None,
                None,
            ],
        );
        let Message::Insert { tuple, .. } = parse(&data).unwrap() else {
            panic!()
        };
        let err = layout.event(&tuple, 1).unwrap_err();
        assert!(err.message().contains("event_id"), "{err}");
        assert_eq!(err.context("position"), Some("1"));
    }
}
