//! Timestamps are stored as unix microseconds (UTC): sortable, compact, exact.

use chrono::{DateTime, Utc};

pub(crate) fn now_micros() -> i64 {
    Utc::now().timestamp_micros()
}

pub(crate) fn from_micros(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}
