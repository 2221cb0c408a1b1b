//! [`TraceContext`]: a validated W3C trace context (`traceparent` and its optional
//! `tracestate`), as <https://www.w3.org/TR/trace-context/> defines them.
//!
//! Validated once, where it enters (enqueue, an `outbox enqueue` line), so what the
//! outbox stores and every hop after it forwards is well formed.

use std::sync::LazyLock;

use regex::Regex;

use crate::domain::Metadata;
use crate::error::{Error, Result};

/// Ledger metadata key (and Hop 2 header) carrying the W3C `traceparent`.
pub const TRACEPARENT_KEY: &str = crate::fanout::headers::TRACEPARENT;
/// Ledger metadata key (and Hop 2 header) carrying the W3C `tracestate`.
pub const TRACESTATE_KEY: &str = crate::fanout::headers::TRACESTATE;

/// The longest `tracestate` accepted: the length every vendor must propagate.
const MAX_TRACESTATE_LEN: usize = 512;
/// The most list members a `tracestate` may have.
const MAX_TRACESTATE_MEMBERS: usize = 32;

static TRACESTATE_KEY_SYNTAX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})$",
    )
    .expect("static regex")
});
static TRACESTATE_VALUE_SYNTAX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$")
        .expect("static regex")
});

/// A W3C trace context: the `traceparent` (version, trace id, parent id, flags) and
/// the vendors' `tracestate` that travels with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// Validates `traceparent` and `tracestate` (an empty `tracestate` is none);
    /// errors name the field `traceparent` or `tracestate`.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self> {
        Self::parse_fields(TRACEPARENT_KEY, traceparent, TRACESTATE_KEY, tracestate)
    }

    /// As [`parse`](Self::parse), naming the fields as the caller wrote them
    /// (`metadata.traceparent`).
    pub fn parse_fields(
        traceparent_field: &str,
        traceparent: &str,
        tracestate_field: &str,
        tracestate: Option<&str>,
    ) -> Result<Self> {
        check_traceparent(traceparent).map_err(|why| Error::invalid(traceparent_field, why))?;
        let tracestate = tracestate.map(str::trim).filter(|s| !s.is_empty());
        if let Some(state) = tracestate {
            check_tracestate(state).map_err(|why| Error::invalid(tracestate_field, why))?;
        }
        Ok(Self {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        })
    }

    /// The trace context the caller wrote in a command's own metadata
    /// (`traceparent`, `tracestate`); `None` when it has no `traceparent`. Errors name
    /// `metadata.traceparent` or `metadata.tracestate` (a `tracestate` alone is one).
    pub fn from_metadata(metadata: &Metadata) -> Result<Option<Self>> {
        let field = |key: &str| format!("metadata.{key}");
        match (metadata.get(TRACEPARENT_KEY), metadata.get(TRACESTATE_KEY)) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(Error::invalid(
                field(TRACESTATE_KEY),
                "a tracestate travels with a traceparent: give both or neither",
            )),
            (Some(parent), state) => Self::parse_fields(
                &field(TRACEPARENT_KEY),
                parent,
                &field(TRACESTATE_KEY),
                state.map(String::as_str),
            )
            .map(Some),
        }
    }

    /// The `traceparent` header value (`00-<trace id>-<parent id>-<flags>`).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header value, when there is one.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The 32 lowercase hex digits every span of the trace shares.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The 16 hex digits of the span this context was taken from.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags byte (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).expect("validated hex")
    }

    /// Writes `traceparent` and (when there is one) `tracestate` into `metadata`.
    pub(crate) fn write_into(&self, metadata: &mut Metadata) {
        metadata.insert(TRACEPARENT_KEY.into(), self.traceparent.clone());
        if let Some(state) = &self.tracestate {
            metadata.insert(TRACESTATE_KEY.into(), state.clone());
        }
    }
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `version "-" trace-id "-" parent-id "-" trace-flags`; a version above `00` may
/// append fields after a `-` (the spec's forward compatibility).
fn check_traceparent(value: &str) -> std::result::Result<(), String> {
    const SHAPE: &str = "is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lowercase)";
    let bad = || Err(format!("{value:?} {SHAPE}"));
    if value.len() < 55 || !value.is_ascii() {
        return bad();
    }
    let (version, trace_id, parent_id, flags) =
        (&value[0..2], &value[3..35], &value[36..52], &value[53..55]);
    let dashes = [2, 35, 52].iter().all(|&i| value.as_bytes()[i] == b'-');
    if !dashes
        || ![version, trace_id, parent_id, flags]
            .iter()
            .all(|p| is_lower_hex(p))
    {
        return bad();
    }
    if version == "ff" {
        return Err(format!("{value:?}: version ff is invalid"));
    }
    if version == "00" && value.len() != 55 {
        return bad();
    }
    if value.len() > 55 && value.as_bytes()[55] != b'-' {
        return bad();
    }
    if trace_id.bytes().all(|b| b == b'0') {
        return Err(format!("{value:?}: an all-zero trace id is invalid"));
    }
    if parent_id.bytes().all(|b| b == b'0') {
        return Err(format!("{value:?}: an all-zero parent id is invalid"));
    }
    Ok(())
}

/// A comma-separated list of at most 32 `key=value` members, each key once.
fn check_tracestate(value: &str) -> std::result::Result<(), String> {
    if value.len() > MAX_TRACESTATE_LEN {
        return Err(format!(
            "{} characters: a tracestate is at most {MAX_TRACESTATE_LEN}",
            value.len()
        ));
    }
    let members: Vec<&str> = value
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    if members.len() > MAX_TRACESTATE_MEMBERS {
        return Err(format!(
            "{} members: a tracestate has at most {MAX_TRACESTATE_MEMBERS}",
            members.len()
        ));
    }
    let mut keys = Vec::with_capacity(members.len());
    for member in members {
        let Some((key, val)) = member.split_once('=') else {
            return Err(format!("{member:?} is not a key=value list member"));
        };
        if !TRACESTATE_KEY_SYNTAX.is_match(key) {
            return Err(format!(
                "{key:?} is not a tracestate key (lowercase, digits, _-*/, optionally tenant@system)"
            ));
        }
        if !TRACESTATE_VALUE_SYNTAX.is_match(val) {
            return Err(format!(
                "the value of {key:?} is not a tracestate value (printable ASCII without , or =)"
            ));
        }
        if keys.contains(&key) {
            return Err(format!("{key:?} appears twice"));
        }
        keys.push(key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_context_exposes_its_parts() {
        let ctx =
            TraceContext::parse(GOOD, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(ctx.traceparent(), GOOD);
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ctx.parent_id(), "00f067aa0ba902b7");
        assert_eq!(ctx.flags(), 1);
        assert_eq!(
            ctx.tracestate(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
    }

    #[test]
    fn an_empty_tracestate_is_none() {
        let ctx = TraceContext::parse(GOOD, Some("  ")).unwrap();
        assert_eq!(ctx.tracestate(), None);
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let future = format!("cc{}-what-the-future-holds", &GOOD[2..]);
        assert!(TraceContext::parse(&future, None).is_ok());
        let glued = format!("cc{}x", &GOOD[2..]);
        assert!(TraceContext::parse(&glued, None).is_err());
    }

    #[test]
    fn malformed_traceparents_are_refused_naming_the_field() {
        let too_long = format!("{GOOD}-extra");
        let cases = [
            "",
            "garbage",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // uppercase
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", // dash misplaced
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", // not hex
            too_long.as_str(),                                         // 00 has exactly four fields
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
        ];
        for case in cases {
            let err = TraceContext::parse(case, None).unwrap_err();
            assert_eq!(err.field(), Some("traceparent"), "{case:?}: {err}");
        }
    }

    #[test]
    fn malformed_tracestates_are_refused_naming_the_field() {
        let long = format!("a={}", "x".repeat(MAX_TRACESTATE_LEN));
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        let cases = [
            "novalue",
            "Upper=1",
            "a=1,a=2",
            "a=has=equals",
            "a=tab\there",
            "a=caf\u{e9}",
            long.as_str(),
            many.as_str(),
        ];
        for case in cases {
            let err = TraceContext::parse(GOOD, Some(case)).unwrap_err();
            assert_eq!(err.field(), Some("tracestate"), "{case:?}: {err}");
        }
        assert!(TraceContext::parse(GOOD, Some("tenant@system=v, b=2 ,,")).is_ok());
    }

    #[test]
    fn metadata_gives_a_context_or_names_its_key() {
        let none = Metadata::from([("event_type".into(), "payout".into())]);
        assert_eq!(TraceContext::from_metadata(&none).unwrap(), None);

        let given = Metadata::from([
            (TRACEPARENT_KEY.into(), GOOD.into()),
            (TRACESTATE_KEY.into(), "vendor=1".into()),
        ]);
        let ctx = TraceContext::from_metadata(&given).unwrap().unwrap();
        assert_eq!(
            (ctx.traceparent(), ctx.tracestate()),
            (GOOD, Some("vendor=1"))
        );

        let alone = Metadata::from([(TRACESTATE_KEY.into(), "vendor=1".into())]);
        let err = TraceContext::from_metadata(&alone).unwrap_err();
        assert_eq!(err.field(), Some("metadata.tracestate"));

        let bad = Metadata::from([(TRACEPARENT_KEY.into(), "00-nope".into())]);
        let err = TraceContext::from_metadata(&bad).unwrap_err();
        assert_eq!(err.field(), Some("metadata.traceparent"));
    }

    #[test]
    fn writing_into_metadata_round_trips() {
        let ctx = TraceContext::parse(GOOD, Some("vendor=1")).unwrap();
        let mut metadata = Metadata::new();
        ctx.write_into(&mut metadata);
        assert_eq!(TraceContext::from_metadata(&metadata).unwrap(), Some(ctx));
    }
}
