//! `Position`: where an event sits in a relay's commit-ordered stream, in the form the
//! store that made it chose.
//!
//! The core never looks inside a position. It compares two positions of one store,
//! keeps them (the dispatcher's frontier, the "@attempted" horizon), hands them back
//! to the store that made them, and prints them. Each store defines its own encoding:
//! an order-preserving byte string (the position order is the byte order), plus a
//! function that renders those bytes for logs. [`PositionEncoder`] and
//! [`PositionDecoder`] build and read the usual layouts (a tag byte, big-endian
//! integers), so a new store needs nothing from the core beyond this file.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::error::{Error, Result};

/// Renders a position's bytes for logs and error messages (the store's own words:
/// `row 42`, `txid 9 row 4`, `lsn 16/B374D848 row 7`).
pub type PositionFormat = fn(&[u8], &mut fmt::Formatter<'_>) -> fmt::Result;

/// A resumable position in a relay's stream: an opaque, ordered byte string of at
/// most [`Position::MAX_LEN`] bytes.
///
/// Positions of one store compare in commit order: the store encodes them so that
/// byte order (shorter prefix first) is its stream order. Comparing positions of two
/// different stores is well defined but means nothing.
///
/// Equality, order and hashing look at the bytes only. The rendering function is
/// carried along for `Display` and `Debug`; a position rebuilt with
/// [`Position::from_bytes`] (without its store) renders as hexadecimal and is equal
/// to the original.
///
/// `Copy` and fixed-size on purpose: the dispatcher keeps one per event in flight.
#[derive(Clone, Copy)]
pub struct Position {
    len: u8,
    bytes: [u8; Position::MAX_LEN],
    format: PositionFormat,
}

impl Position {
    /// The longest encoding a store may use: room for a tag and three 64-bit values
    /// (31 bytes plus the length fill 32).
    pub const MAX_LEN: usize = 31;

    /// A position from a store's encoding and its rendering.
    ///
    /// # Errors
    /// `InvalidInput` on `position` when `bytes` is longer than [`Position::MAX_LEN`].
    pub fn new(bytes: &[u8], format: PositionFormat) -> Result<Self> {
        if bytes.len() > Self::MAX_LEN {
            return Err(Error::invalid(
                "position",
                format!(
                    "{} bytes; a position has at most {}",
                    bytes.len(),
                    Self::MAX_LEN
                ),
            ));
        }
        let mut buf = [0; Self::MAX_LEN];
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(Self {
            len: bytes.len() as u8,
            bytes: buf,
            format,
        })
    }

    /// A position restored from [`Position::as_bytes`] without its store (from a file,
    /// a message): equal to the original, rendered as hexadecimal.
    ///
    /// # Errors
    /// As [`Position::new`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::new(bytes, hex)
    }

    /// The store's encoding: what to persist to restore the position.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The rendering of a position restored without its store.
fn hex(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str("0x")?;
    for b in bytes {
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

impl PartialEq for Position {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Position {}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Position {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for Position {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.format)(self.as_bytes(), f)
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Builds an order-preserving encoding field by field: the byte order of the result
/// is the order of the fields' values, compared left to right.
#[derive(Debug, Clone, Copy)]
pub struct PositionEncoder {
    len: usize,
    bytes: [u8; Position::MAX_LEN],
}

impl Default for PositionEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl PositionEncoder {
    /// An empty encoding; add fields with [`u8`](Self::u8), [`u64`](Self::u64) and
    /// [`i64`](Self::i64), then [`finish`](Self::finish).
    pub const fn new() -> Self {
        Self {
            len: 0,
            bytes: [0; Position::MAX_LEN],
        }
    }

    /// One byte, typically a tag that orders kinds of positions among themselves.
    #[must_use]
    pub fn u8(self, value: u8) -> Self {
        self.push(&[value])
    }

    /// Big-endian: unsigned byte order is numeric order.
    #[must_use]
    pub fn u64(self, value: u64) -> Self {
        self.push(&value.to_be_bytes())
    }

    /// Big-endian with the sign bit flipped, so that negative values sort first.
    #[must_use]
    pub fn i64(self, value: i64) -> Self {
        self.u64((value as u64) ^ (1 << 63))
    }

    /// The position, rendered by `format`.
    pub fn finish(self, format: PositionFormat) -> Position {
        Position {
            len: self.len as u8,
            bytes: self.bytes,
            format,
        }
    }

    /// # Panics
    /// When the encoding outgrows [`Position::MAX_LEN`]: a store's layout is fixed, so
    /// that is a bug in the store, caught by its first test.
    fn push(mut self, value: &[u8]) -> Self {
        let end = self.len + value.len();
        assert!(
            end <= Position::MAX_LEN,
            "a position encoding of {end} bytes exceeds Position::MAX_LEN ({})",
            Position::MAX_LEN
        );
        self.bytes[self.len..end].copy_from_slice(value);
        self.len = end;
        self
    }
}

/// Reads back what a [`PositionEncoder`] wrote, field by field. Each read is `None`
/// when the bytes run out, so a store can turn a foreign position into its own error.
#[derive(Debug, Clone)]
pub struct PositionDecoder<'a> {
    rest: &'a [u8],
}

impl<'a> PositionDecoder<'a> {
    /// Reads `position`'s bytes from the first.
    pub fn new(position: &'a Position) -> Self {
        Self::from_bytes(position.as_bytes())
    }

    /// Reads raw encoded bytes (what a [`PositionFormat`] is given) from the first.
    pub fn from_bytes(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// The next byte, as [`PositionEncoder::u8`] wrote it.
    pub fn u8(&mut self) -> Option<u8> {
        let (&first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first)
    }

    /// The next 8 bytes as a big-endian `u64`, as [`PositionEncoder::u64`] wrote it.
    pub fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.rest.split_first_chunk::<8>()?;
        self.rest = rest;
        Some(u64::from_be_bytes(*head))
    }

    /// The next 8 bytes as an `i64`, undoing [`PositionEncoder::i64`]'s sign flip.
    pub fn i64(&mut self) -> Option<i64> {
        self.u64().map(|v| (v ^ (1 << 63)) as i64)
    }

    /// `Some` when every byte was read: a longer position is not this layout.
    pub fn end(&self) -> Option<()> {
        self.rest.is_empty().then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store of this test's own: a tag and a signed value.
    fn render(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = PositionDecoder::from_bytes(bytes);
        match (d.u8(), d.i64(), d.end()) {
            (Some(tag), Some(v), Some(())) => write!(f, "tag {tag} value {v}"),
            _ => hex(bytes, f),
        }
    }

    fn at(tag: u8, value: i64) -> Position {
        PositionEncoder::new().u8(tag).i64(value).finish(render)
    }

    #[test]
    fn byte_order_is_field_order() {
        let values = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for pair in values.windows(2) {
            assert!(at(1, pair[0]) < at(1, pair[1]), "{pair:?}");
        }
        // The tag orders first: every tag-1 position sorts before every tag-2 one.
        assert!(at(1, i64::MAX) < at(2, i64::MIN));
        let big = |v: u64| PositionEncoder::new().u64(v).finish(render);
        assert!(big(255) < big(256));
        assert!(big(u64::MAX - 1) < big(u64::MAX));
    }

    #[test]
    fn round_trips_through_bytes_and_renders_as_its_store_says() {
        let p = at(2, -42);
        assert_eq!(p.to_string(), "tag 2 value -42");
        assert_eq!(format!("{p:?}"), "tag 2 value -42");
        let restored = Position::from_bytes(p.as_bytes()).unwrap();
        assert_eq!(restored, p);
        assert_eq!(restored.cmp(&p), std::cmp::Ordering::Equal);
        assert_eq!(restored.to_string(), "0x027fffffffffffffd6");
        let mut d = PositionDecoder::new(&restored);
        assert_eq!((d.u8(), d.i64(), d.end()), (Some(2), Some(-42), Some(())));
        // A foreign layout reads as None, never as a wrong value.
        let mut short = PositionDecoder::from_bytes(&[1, 2]);
        assert_eq!(short.u8(), Some(1));
        assert_eq!(short.u64(), None);
    }

    #[test]
    fn longer_than_the_maximum_is_refused_with_the_field_named() {
        assert!(Position::from_bytes(&[0; Position::MAX_LEN]).is_ok());
        let err = Position::from_bytes(&[0; Position::MAX_LEN + 1]).unwrap_err();
        assert!(
            matches!(err.kind(), crate::ErrorKind::InvalidInput { field } if field == "position"),
            "{err}"
        );
    }

    #[test]
    #[should_panic(expected = "exceeds Position::MAX_LEN")]
    fn an_encoder_that_outgrows_the_maximum_is_a_bug() {
        let _ = PositionEncoder::new()
            .u64(1)
            .u64(2)
            .u64(3)
            .u64(4)
            .finish(render);
    }
}
