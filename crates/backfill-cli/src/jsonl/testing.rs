//! Lines and parsing helpers the format's tests share.

use backfill_core::Record;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};

use super::{parse_line, Line};

/// The day the tests' lines belong to.
pub(super) fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 1, 3).unwrap()
}

/// The `updated_at` of [`with_value`]'s record.
pub(super) fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 3, 9, 30, 0).unwrap()
}

/// The record `line` holds; panics if it holds none.
pub(super) fn record(line: &str) -> Record {
    match parse_line(line.as_bytes()) {
        Ok(Line::Record(record)) => record,
        other => panic!("expected a record from {line}, got {other:?}"),
    }
}

/// The error `line` is refused with; panics if it is not refused.
pub(super) fn error(line: &str) -> String {
    match parse_line(line.as_bytes()) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("expected an error from {line}, got {other:?}"),
    }
}

/// A record line of key `k` on [`day`] at [`at`], with `value` as its JSON.
pub(super) fn with_value(value: &str) -> String {
    format!(
        r#"{{"key":"k","event_date":"2026-01-03","value":{value},"updated_at":"2026-01-03T09:30:00Z"}}"#
    )
}
