//! The calendar, records and options that tests of a store or of the engine
//! keep needing, so that every test binary builds them one way.
//!
//! **Test support, exempt from semver**, like the rest of
//! [`conformance`](super).
//!
//! One calendar serves every test: it starts on 2026-01-01 ([`day`]`(0)`,
//! [`jan`]`(1)`) at 00:00:00 UTC ([`at`]`(0)`). The record makers panic,
//! naming the caller's line, when a test asks for a record the engine
//! refuses: a test that wants the refusal calls [`Record::new`] itself.
//!
//! ```
//! use backfill_core::conformance::fixtures::{at, day, jan, kv, listing, rec, tomb};
//! use backfill_core::Mode;
//!
//! assert_eq!(jan(2), day(1));
//! let live = rec("order:1", jan(2), r#"{"total":3}"#, at(60));
//! let gone = tomb("order:2", jan(2), at(60));
//! assert!(gone.is_deleted() && !live.is_deleted());
//! assert_eq!(kv("k", "v"), rec("k", day(0), "v", at(0)));
//! assert_eq!(listing(at(3600)).mode, Mode::Replace);
//! ```

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};

use crate::{Mode, Record, ReplaceGuard, WriteOptions};

/// Day `n` of the calendar: 2026-01-01 is day 0, and `n` may be negative.
pub fn day(n: i64) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 1, 1).unwrap() + Duration::days(n)
}

/// 2026-01-`d`: the calendar's January counted from 1, for tests that
/// name days by date (`jan(d) == day(d - 1)`).
#[track_caller]
pub fn jan(d: u32) -> NaiveDate {
    match NaiveDate::from_ymd_opt(2026, 1, d) {
        Some(date) => date,
        None => panic!("January has no day {d}"),
    }
}

/// `secs` seconds after the calendar's first instant, 2026-01-01 00:00:00
/// UTC.
pub fn at(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::seconds(secs)
}

/// A live record: `key` = `value` in day `d`, as of `when`.
#[track_caller]
pub fn rec(key: &str, d: NaiveDate, value: &str, when: DateTime<Utc>) -> Record {
    match Record::new(key, d, value, when) {
        Ok(record) => record,
        Err(e) => panic!("test record is invalid: {e}"),
    }
}

/// `key` = `value` in day 0 as of instant 0 ([`rec`]`(key, day(0), value,
/// at(0))`), for tests in which only keys and values matter.
#[track_caller]
pub fn kv(key: &str, value: &str) -> Record {
    rec(key, day(0), value, at(0))
}

/// A tombstone: `key` deleted from day `d` as of `when`.
#[track_caller]
pub fn tomb(key: &str, d: NaiveDate, when: DateTime<Utc>) -> Record {
    match Record::tombstone(key, d, when) {
        Ok(record) => record,
        Err(e) => panic!("test tombstone is invalid: {e}"),
    }
}

/// Options for a listing of a day: the whole day as the upstream held it
/// at `as_of` ([`Mode::Replace`]), with the guard against large deletes
/// off.
pub fn listing(as_of: DateTime<Utc>) -> WriteOptions {
    WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(as_of)
        .replace_guard(ReplaceGuard::off())
}

/// A day of 25 records, sorted by key, with what a store's encoding of a
/// row must keep exactly: multi-byte text in keys and values, a 9 000-byte
/// value (`b/long`), a tombstone (`c/gone`), an instant before 2000
/// (`d/old`) and one with microseconds (`e/micros`), then `f/00`…`f/19`
/// with values `v0`…`v19` at [`at`]`(0)`…[`at`]`(19)`.
pub fn awkward_day() -> Vec<Record> {
    let long: String = "x".repeat(9_000) + "é";
    let mut records = vec![
        rec("a/ünï", day(0), r#"{"name":"Zoë","n":1}"#, at(5)),
        rec("b/long", day(0), &long, at(6)),
        tomb("c/gone", day(0), at(7)),
        rec(
            "d/old",
            day(0),
            "1999",
            Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 59).unwrap() + Duration::microseconds(1),
        ),
        rec(
            "e/micros",
            day(0),
            "µs",
            at(8) + Duration::microseconds(123_457),
        ),
    ];
    records.extend((0..20).map(|i| rec(&format!("f/{i:02}"), day(0), &format!("v{i}"), at(i))));
    records
}

/// The refusal of a record that does not fit a typed column: `e`'s
/// [`ColumnError`](crate::columns::ColumnError), or a panic naming the
/// error it is instead.
#[track_caller]
pub fn invalid_column(e: crate::Error) -> crate::columns::ColumnError {
    match e {
        crate::Error::InvalidColumn(e) => *e,
        other => panic!("expected Error::InvalidColumn, got {other:?}"),
    }
}
