//! Time as Formance renders it: UTC, microsecond precision, Go's RFC3339Nano layout.
//!
//! Go's `time.RFC3339Nano` trims trailing zeros of the fraction (and the dot when
//! the fraction is zero), so `10:00:00.120000` prints as `10:00:00.12Z` and a whole
//! second as `10:00:00Z`. Clients that compare dates textually see the same strings
//! as with the real ledger.

use chrono::{DateTime, SubsecRound, Utc};

/// Now, truncated to microseconds like the ledger's Postgres columns.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Formats `t` like go-libs `time.Time` marshals it.
pub(crate) fn format(t: &DateTime<Utc>) -> String {
    let base = t.format("%Y-%m-%dT%H:%M:%S");
    let micros = t.timestamp_subsec_micros();
    if micros == 0 {
        return format!("{base}Z");
    }
    let fraction = format!("{micros:06}");
    format!("{base}.{}Z", fraction.trim_end_matches('0'))
}

/// Parses an RFC3339 date (any offset) into UTC, truncated to microseconds.
pub(crate) fn parse(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc).trunc_subsecs(6))
        .map_err(|e| format!("{text:?} is not an RFC3339 date: {e}"))
}

/// `#[serde(with = "clock::serde_time")]` for `DateTime<Utc>` fields.
pub(crate) mod serde_time {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(t))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "clock::serde_opt_time")]` for `Option<DateTime<Utc>>` fields.
pub(crate) mod serde_opt_time {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        t: &Option<DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&super::format(t)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| super::parse(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go_rfc3339nano() {
        let t = parse("2025-01-15T10:00:00.123456789Z").unwrap();
        assert_eq!(format(&t), "2025-01-15T10:00:00.123456Z");
        let t = parse("2025-01-15T10:00:00.120Z").unwrap();
        assert_eq!(format(&t), "2025-01-15T10:00:00.12Z");
        let t = parse("2025-01-15T12:00:00+02:00").unwrap();
        assert_eq!(format(&t), "2025-01-15T10:00:00Z");
        assert!(parse("yesterday").unwrap_err().contains("RFC3339"));
    }
}
