//! The time a balance is as of: an instant with its offset, or the end of a day.
//!
//! The balance check asks the ledger for its balances at exactly this instant, so a
//! time without an offset is refused rather than read as UTC: a provider in UTC+1
//! would otherwise be compared an hour off, and a payout in that hour would show as
//! a drift nobody can explain.

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};

use crate::error::{Error, Result};

/// Reads an RFC 3339 / ISO 8601 instant with an offset (`2026-11-30T23:59:59Z`,
/// `2026-11-30T18:00:00-05:00`, fractional seconds allowed).
pub(super) fn parse_instant(field: &str, text: &str) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let without_offset = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
        || NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok();
    let why = if without_offset {
        format!(
            "{text:?} has no UTC offset: write the instant with one (2026-11-30T23:59:59Z or 2026-11-30T23:59:59+01:00), it is not guessed"
        )
    } else {
        format!("{text:?} is not an RFC 3339 time with an offset (2026-11-30T23:59:59Z)")
    };
    Err(Error::invalid(field, why))
}

/// Reads an ISO 8601 date (`2026-11-30`) as the last microsecond of that day in UTC
/// (`2026-11-30T23:59:59.999999Z`): a closing balance "on" a date includes every
/// booking of the date.
pub(super) fn parse_end_of_day(field: &str, text: &str) -> Result<DateTime<Utc>> {
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| {
        Error::invalid(
            field,
            format!("{text:?} is not a date (YYYY-MM-DD, without an offset)"),
        )
    })?;
    let last = NaiveTime::from_hms_micro_opt(23, 59, 59, 999_999).expect("a valid time of day");
    Ok(date.and_time(last).and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_keep_their_offset() {
        let t = parse_instant("as_of", "2026-11-30T18:00:00-05:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-30T23:00:00+00:00");
        let t = parse_instant("as_of", "2026-11-30T23:59:59.5Z").unwrap();
        assert_eq!(t.timestamp_subsec_millis(), 500);
    }

    #[test]
    fn instants_without_offset_are_refused() {
        for text in ["2026-11-30T23:59:59", "2026-11-30"] {
            let err = parse_instant("line 2: as_of", text).unwrap_err();
            assert_eq!(err.field(), Some("line 2: as_of"));
            assert!(err.message().contains("no UTC offset"), "{text}: {err}");
        }
        let err = parse_instant("as_of", "yesterday").unwrap_err();
        assert!(err.message().contains("not an RFC 3339 time"), "{err}");
    }

    #[test]
    fn a_date_is_the_end_of_that_day_in_utc() {
        let t = parse_end_of_day("Dt", "2026-11-30").unwrap();
        assert_eq!(
            t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "2026-11-30T23:59:59.999999Z"
        );
        let err = parse_end_of_day("Stmt[1]/Bal[2]/Dt/Dt", "2026-11-31").unwrap_err();
        assert_eq!(err.field(), Some("Stmt[1]/Bal[2]/Dt/Dt"));
    }
}
