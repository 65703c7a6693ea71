//! [`Record`]: the unit every store keeps, and the order that decides which
//! version of a key wins.

use std::cmp::Ordering;
use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, SubsecRound, Timelike, Utc};

use crate::error::{Error, Field, Problem, Result};

/// The longest key a record may have, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// The earliest year a date or instant may fall in.
///
/// Years 1 to 9999 are what every common engine can store and sort the same
/// way (BigQuery's `TIMESTAMP` range, four-digit ISO text in SQLite), so a
/// record that one store accepts, every store accepts.
pub const MIN_YEAR: i32 = 1;
/// The latest year a date or instant may fall in (see [`MIN_YEAR`]).
pub const MAX_YEAR: i32 = 9999;

/// One version of one keyed row: a live row, or a **tombstone** saying the
/// key was deleted.
///
/// A `Record` can only be built through [`Record::new`] (live) or
/// [`Record::tombstone`], which enforce the record rules, so every `Record`
/// a program holds is valid:
///
/// | field | rule |
/// |---|---|
/// | `key` | non-empty, at most [`MAX_KEY_BYTES`] bytes, no NUL character |
/// | `event_date` | the day partition the record belongs to; years 1–9999 |
/// | `value` | the payload (often JSON); no NUL character; empty for a tombstone |
/// | `updated_at` | UTC, truncated to whole microseconds; years 1–9999, no leap second |
/// | `deleted` | whether this version is a tombstone: the key deleted as of `updated_at` |
///
/// # Which version wins
///
/// For one key, the version with the greater
/// `(updated_at, deleted, value, event_date)` wins, compared left to right,
/// `false < true`, text by its UTF-8 bytes. This is a total order, so the
/// winner among any set of versions does not depend on the order they
/// arrive in; see [`Record::supersedes`]. A tombstone beats every live
/// version with the same or an earlier `updated_at`; a live version with a
/// later `updated_at` brings the key back.
///
/// ```
/// use backfill_core::Record;
/// use chrono::{NaiveDate, TimeZone, Utc};
///
/// let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
/// let at = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
/// let old = Record::new("order:1", day, r#"{"total":10}"#, at)?;
/// let new = Record::new("order:1", day, r#"{"total":12}"#, at + chrono::Duration::seconds(1))?;
/// assert!(new.supersedes(&old));
/// # Ok::<(), backfill_core::Error>(())
/// ```
///
/// With the `serde` feature a record serializes as
/// `{"key", "event_date", "value", "updated_at", "deleted"}` and
/// deserializes through the same checks (`deleted` may be left out: a live
/// record), so the rules hold for records read from JSON too.
#[derive(Clone, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "RecordFields")
)]
pub struct Record {
    key: String,
    event_date: NaiveDate,
    value: String,
    updated_at: DateTime<Utc>,
    deleted: bool,
}

impl Record {
    /// Builds a record, enforcing the record rules.
    ///
    /// `updated_at` is truncated to whole microseconds, so every store sees
    /// the identical instant (Postgres `timestamptz` keeps microseconds).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRecord`] naming the key, the field and the problem.
    pub fn new(
        key: impl Into<String>,
        event_date: NaiveDate,
        value: impl Into<String>,
        updated_at: DateTime<Utc>,
    ) -> Result<Self> {
        let record = Self::new_unchecked(key.into(), event_date, value.into(), updated_at);
        record.validate()?;
        Ok(record)
    }

    /// Builds a tombstone: `key` deleted as of `deleted_at`, in the day
    /// partition `event_date` (the day of the key's last live version), with
    /// an empty value. It goes through [`upsert`](crate::upsert) like any
    /// record and wins or loses by the version order.
    ///
    /// ```
    /// use backfill_core::Record;
    /// use chrono::{Duration, NaiveDate, TimeZone, Utc};
    ///
    /// let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    /// let at = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    /// let live = Record::new("order:1", day, "{}", at)?;
    /// let gone = Record::tombstone("order:1", day, at)?;
    /// assert!(gone.is_deleted() && gone.value().is_empty());
    /// assert!(gone.supersedes(&live), "deleted as of the same instant");
    /// let back = Record::new("order:1", day, "{}", at + Duration::seconds(1))?;
    /// assert!(back.supersedes(&gone), "a later version brings the key back");
    /// # Ok::<(), backfill_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRecord`] naming the key, the field and the problem.
    pub fn tombstone(
        key: impl Into<String>,
        event_date: NaiveDate,
        deleted_at: DateTime<Utc>,
    ) -> Result<Self> {
        let mut record = Self::new_unchecked(key.into(), event_date, String::new(), deleted_at);
        record.deleted = true;
        record.validate()?;
        Ok(record)
    }

    /// This version as its own tombstone: the same key, `event_date` and
    /// `updated_at`, deleted, with an empty value. It supersedes exactly
    /// this version and every older one; a listing that lacks a row, and
    /// the listing watermark, delete rows this way.
    pub fn to_tombstone(&self) -> Self {
        Self {
            key: self.key.clone(),
            event_date: self.event_date,
            value: String::new(),
            updated_at: self.updated_at,
            deleted: true,
        }
    }

    /// The tombstone of this key and `event_date` as of `at`: how history
    /// shows the delete a listing saw (`at` is a stored instant, as valid
    /// as this record's own).
    pub(crate) fn deleted_at(&self, at: DateTime<Utc>) -> Self {
        Self {
            updated_at: at,
            ..self.to_tombstone()
        }
    }

    /// Builds a record without checking the rules (microseconds are still
    /// truncated). Only the conformance suite uses it, to prove that a bad
    /// record never reaches a table.
    pub(crate) fn new_unchecked(
        key: String,
        event_date: NaiveDate,
        value: String,
        updated_at: DateTime<Utc>,
    ) -> Self {
        Self {
            key,
            event_date,
            value,
            updated_at: truncate_to_micros(updated_at),
            deleted: false,
        }
    }

    /// Checks the record rules; [`Record::new`] already did, so this only
    /// fails for a record built around them. The write path and the stores
    /// call it again as a last line of defence.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRecord`] naming the key, the field and the problem.
    pub fn validate(&self) -> Result<()> {
        let fail = |field, problem| {
            Err(Error::InvalidRecord {
                key: self.key.clone(),
                field,
                problem,
            })
        };
        if self.key.is_empty() {
            return fail(Field::Key, Problem::Empty);
        }
        if self.key.len() > MAX_KEY_BYTES {
            return fail(
                Field::Key,
                Problem::TooLong {
                    len: self.key.len(),
                    max: MAX_KEY_BYTES,
                },
            );
        }
        if self.key.contains('\0') {
            return fail(Field::Key, Problem::ContainsNul);
        }
        if self.value.contains('\0') {
            return fail(Field::Value, Problem::ContainsNul);
        }
        if self.deleted && !self.value.is_empty() {
            return fail(Field::Value, Problem::NotEmptyInTombstone);
        }
        if !year_in_range(self.event_date.year()) {
            return fail(Field::EventDate, Problem::OutOfRange);
        }
        if !year_in_range(self.updated_at.year()) {
            return fail(Field::UpdatedAt, Problem::OutOfRange);
        }
        // chrono encodes a leap second as a nanosecond count past one
        // second; no engine we target can store it.
        if self.updated_at.nanosecond() >= 1_000_000_000 {
            return fail(Field::UpdatedAt, Problem::LeapSecond);
        }
        Ok(())
    }

    /// The record's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The day partition the record belongs to.
    pub fn event_date(&self) -> NaiveDate {
        self.event_date
    }

    /// The payload.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// When this version was written upstream (for a tombstone, when the
    /// key was deleted), at microsecond precision.
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }

    /// Whether this version is a tombstone.
    pub fn is_deleted(&self) -> bool {
        self.deleted
    }

    /// Splits the record into `(key, event_date, value, updated_at)`; see
    /// [`Record::is_deleted`] first if it may be a tombstone.
    pub fn into_parts(self) -> (String, NaiveDate, String, DateTime<Utc>) {
        (self.key, self.event_date, self.value, self.updated_at)
    }

    /// Compares the *versions* of two records:
    /// `(updated_at, deleted, value, event_date)`, left to right,
    /// `false < true`, text by UTF-8 bytes. Keys are not compared.
    pub fn cmp_version(&self, other: &Self) -> Ordering {
        self.updated_at
            .cmp(&other.updated_at)
            .then_with(|| self.deleted.cmp(&other.deleted))
            .then_with(|| self.value.as_bytes().cmp(other.value.as_bytes()))
            .then_with(|| self.event_date.cmp(&other.event_date))
    }

    /// Whether this version wins over `other` (for the same key).
    pub fn supersedes(&self, other: &Self) -> bool {
        self.cmp_version(other) == Ordering::Greater
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key", &self.key)
            .field("event_date", &self.event_date)
            .field("value", &self.value)
            .field("updated_at", &self.updated_at)
            .field("deleted", &self.deleted)
            .finish()
    }
}

/// The unchecked shape a record is deserialized into before [`Record::new`].
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
struct RecordFields {
    key: String,
    event_date: NaiveDate,
    value: String,
    updated_at: DateTime<Utc>,
    #[serde(default)]
    deleted: bool,
}

#[cfg(feature = "serde")]
impl TryFrom<RecordFields> for Record {
    type Error = Error;

    fn try_from(f: RecordFields) -> Result<Self> {
        let mut record = Record::new_unchecked(f.key, f.event_date, f.value, f.updated_at);
        record.deleted = f.deleted;
        record.validate()?;
        Ok(record)
    }
}

fn year_in_range(year: i32) -> bool {
    (MIN_YEAR..=MAX_YEAR).contains(&year)
}

fn truncate_to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// Whether a day's batch may hold records of other days.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventDates {
    /// Every record's `event_date` must be the day being synced; anything
    /// else is a fetch bug and rejects the batch (the default).
    #[default]
    Strict,
    /// Records of other days are accepted and merged like any other.
    Lenient,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    use crate::conformance::fixtures::{at, day};

    fn problem(result: Result<Record>) -> (Field, Problem) {
        match result {
            Err(Error::InvalidRecord { field, problem, .. }) => (field, problem),
            other => panic!("expected InvalidRecord, got {other:?}"),
        }
    }

    #[test]
    fn key_rules() {
        assert_eq!(
            problem(Record::new("", day(0), "v", at(0))),
            (Field::Key, Problem::Empty)
        );
        assert!(Record::new("k".repeat(MAX_KEY_BYTES), day(0), "v", at(0)).is_ok());
        assert_eq!(
            problem(Record::new(
                "k".repeat(MAX_KEY_BYTES + 1),
                day(0),
                "v",
                at(0)
            )),
            (
                Field::Key,
                Problem::TooLong {
                    len: MAX_KEY_BYTES + 1,
                    max: MAX_KEY_BYTES
                }
            )
        );
        // 171 three-byte characters are 513 bytes: the limit is bytes.
        assert!(matches!(
            problem(Record::new("€".repeat(171), day(0), "v", at(0))),
            (Field::Key, Problem::TooLong { len: 513, .. })
        ));
        assert_eq!(
            problem(Record::new("a\0b", day(0), "v", at(0))),
            (Field::Key, Problem::ContainsNul)
        );
    }

    #[test]
    fn value_and_time_rules() {
        assert_eq!(
            problem(Record::new("k", day(0), "a\0", at(0))),
            (Field::Value, Problem::ContainsNul)
        );
        assert!(Record::new("k", day(0), "", at(0)).is_ok());
        let far = NaiveDate::from_ymd_opt(10_000, 1, 1).unwrap();
        assert_eq!(
            problem(Record::new("k", far, "v", at(0))),
            (Field::EventDate, Problem::OutOfRange)
        );
        let far_at = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(
            problem(Record::new("k", day(0), "v", far_at)),
            (Field::UpdatedAt, Problem::OutOfRange)
        );
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
            .unwrap()
            .and_utc();
        assert_eq!(
            problem(Record::new("k", day(0), "v", leap)),
            (Field::UpdatedAt, Problem::LeapSecond)
        );
    }

    #[test]
    fn truncates_to_microseconds() {
        let fine = at(0) + chrono::Duration::nanoseconds(1_234_567_891);
        let r = Record::new("k", day(0), "v", fine).unwrap();
        assert_eq!(
            r.updated_at(),
            at(0) + chrono::Duration::nanoseconds(1_234_567_000)
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json_round_trip_enforces_the_rules() {
        let json = r#"{"key":"k","event_date":"2026-01-01","value":"{}","updated_at":"2026-01-01T00:00:00.123456789Z"}"#;
        let r: Record = serde_json::from_str(json).unwrap();
        assert_eq!(
            r.updated_at(),
            at(0) + chrono::Duration::microseconds(123_456)
        );
        let back: Record = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let bad = json.replace(r#""key":"k""#, r#""key":"""#);
        let err = serde_json::from_str::<Record>(&bad).unwrap_err();
        assert!(err.to_string().contains("key is empty"), "{err}");
        let gone = Record::tombstone("k", day(0), at(0)).unwrap();
        let text = serde_json::to_string(&gone).unwrap();
        assert!(text.contains(r#""deleted":true"#), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), gone);
        let with_value = json.replace(r#""value":"{}""#, r#""value":"{}","deleted":true"#);
        let err = serde_json::from_str::<Record>(&with_value).unwrap_err();
        assert!(err.to_string().contains("tombstone"), "{err}");
    }

    #[test]
    fn version_order_is_total_and_byte_wise() {
        let a = Record::new("k", day(0), "b", at(0)).unwrap();
        let b = Record::new("k", day(0), "a", at(0) + chrono::Duration::microseconds(1)).unwrap();
        assert!(b.supersedes(&a), "later updated_at wins over greater value");
        let z = Record::new("k", day(0), "z", at(0)).unwrap();
        let e = Record::new("k", day(0), "é", at(0)).unwrap();
        assert!(e.supersedes(&z), "UTF-8 bytes: é (c3 a9) > z (7a)");
        let later_day = Record::new("k", day(0).succ_opt().unwrap(), "b", at(0)).unwrap();
        assert!(later_day.supersedes(&a), "event_date breaks the last tie");
        assert!(!a.supersedes(&a.clone()));
    }

    #[test]
    fn tombstones_order_after_live_versions_of_the_same_instant() {
        let live = Record::new("k", day(0), "zzz", at(0)).unwrap();
        let gone = Record::tombstone("k", day(0), at(0)).unwrap();
        assert!(
            gone.supersedes(&live),
            "deleted beats live at the same instant"
        );
        assert_eq!(live.to_tombstone(), gone);
        let later =
            Record::new("k", day(0), "", at(0) + chrono::Duration::microseconds(1)).unwrap();
        assert!(
            later.supersedes(&gone),
            "a later live version brings the key back"
        );
        let earlier_gone = Record::tombstone("k", day(0), at(0) - chrono::Duration::seconds(1));
        assert!(live.supersedes(&earlier_gone.unwrap()));
        assert!(Record::tombstone("", day(0), at(0)).is_err());
    }
}
