//! The JSON Lines format a fetch prints: one record per line, and
//! optionally one `as_of` line for a replace listing.
//!
//! Each line is one JSON object (UTF-8). Blank lines and lines of only
//! whitespace are skipped, and a trailing `\r` is tolerated, so a file
//! written on Windows reads the same.
//!
//! A **record**:
//!
//! ```text
//! {"key": "order:1", "event_date": "2026-01-03", "value": {"total": 12}, "updated_at": "2026-01-03T09:30:00+01:00"}
//! {"key": "order:2", "event_date": "2026-01-03", "value": "kept as it is", "updated_at": "2026-01-03T08:00:00Z"}
//! {"key": "order:3", "event_date": "2026-01-03", "deleted": true, "updated_at": "2026-01-03T10:00:00Z"}
//! ```
//!
//! - `key`, `event_date` (`YYYY-MM-DD`) and `updated_at` (an RFC 3339
//!   instant, any offset) are required; the record rules of
//!   [`backfill_core::Record`] apply.
//! - `value` is required for a live record. A JSON string is stored as its
//!   text, exactly. Any other JSON value (object, array, number, bool,
//!   `null`) is stored in its canonical text, [`canonical_json`], so two
//!   upstream runs that print the same data with keys in another order or
//!   other whitespace store the same value and write nothing.
//! - `deleted` is optional (default `false`). A tombstone is
//!   `"deleted": true` with `value` absent, `""` or `null`; a deleted
//!   record with any other value is refused.
//! - Any other field is an error naming it.
//!
//! An **`as_of` line**, `{"as_of": "2026-01-04T00:00:00Z"}`, alone on its
//! line, says the instant a replace listing is true as of. A day has at
//! most one, and it must come **before the first record line** (blank lines
//! may precede it): a day is streamed, its records handed to the job in
//! chunks while the rest is still being read, and the listing's `as_of` has
//! to be known before the first chunk. A reader therefore reads ahead to
//! the first record line (or the end) and no further before it starts
//! handing records over; an `as_of` line after a record is an error naming
//! its line.
//!
//! # Reading
//!
//! [`ChunkReader`] parses a day as it arrives and hands it over in chunks
//! of at most [`CHUNK_RECORDS`] records and about [`CHUNK_BYTES`] bytes,
//! so a day of any size is read in bounded memory; [`read_day`] makes one
//! a streamed [`Fetched`]. [`read_records`] collects a whole day into a
//! `Vec`, for tests and programs that want one. Errors name the 1-based
//! line.

use std::borrow::Cow;
use std::fmt;

use backfill_core::{Fetched, Record};
use chrono::{DateTime, NaiveDate, Utc};
use futures_util::Stream;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line the fetchers accept by default: 256 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 256 * 1024 * 1024;

/// The most of a field's text or of a JSON parser's message that an error
/// quotes; the rest is cut, so a huge bad value cannot flood a ledger.
const QUOTED_BYTES: usize = 200;

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A record (live or tombstone).
    Record(Record),
    /// An `as_of` line: the instant the day's listing is true as of.
    AsOf(DateTime<Utc>),
    /// An empty line, or one of only whitespace.
    Blank,
}

/// What is wrong with one line. [`ReadError`] adds the line number.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The line is not valid UTF-8.
    #[error("not UTF-8 (invalid byte at offset {offset})")]
    NotUtf8 {
        /// The byte offset in the line of the first invalid byte.
        offset: usize,
    },

    /// The line is not one JSON value (a syntax error, trailing text).
    #[error("invalid JSON: {message} at column {column}")]
    Syntax {
        /// The parser's message, without its position.
        message: String,
        /// The 1-based column (in bytes) where the parser stopped.
        column: usize,
    },

    /// The line is JSON but not a record or an `as_of` line: an unknown or
    /// duplicate field, a field of the wrong type, not an object.
    #[error("{message}")]
    Shape {
        /// What is wrong, e.g. ``unknown field `foo`, expected one of …``.
        message: String,
    },

    /// The line is JSON but not an object.
    #[error("not a JSON object: a line is a record or an as_of line, {{…}}")]
    NotObject,

    /// A required field is absent.
    #[error("missing field `{0}`")]
    MissingField(&'static str),

    /// `event_date` is not a `YYYY-MM-DD` date.
    #[error("{field} {} is not a date (YYYY-MM-DD)", Quoted(.text))]
    BadDate {
        /// The field's name.
        field: &'static str,
        /// Its text, cut to a few hundred bytes.
        text: String,
    },

    /// `updated_at` or `as_of` is not an RFC 3339 instant.
    #[error("{field} {} is not an RFC 3339 instant (e.g. 2026-01-03T09:30:00Z): {reason}", Quoted(.text))]
    BadInstant {
        /// The field's name.
        field: &'static str,
        /// Its text, cut to a few hundred bytes.
        text: String,
        /// Why chrono refused it.
        reason: chrono::ParseError,
    },

    /// `"deleted": true` with a value other than absent, `""` or `null`.
    #[error(
        "a record with \"deleted\": true has a value; a tombstone's value must be absent, \"\" or null"
    )]
    ValueInTombstone,

    /// `as_of` on a line that also has record fields.
    #[error("as_of must be alone on its line, not in a record")]
    AsOfInRecord,

    /// A second `as_of` line in one day.
    #[error("a second as_of line (the first is line {first_line}); a day has at most one")]
    SecondAsOf {
        /// The line of the first `as_of`.
        first_line: u64,
    },

    /// An `as_of` line after a record line: a streamed day's `as_of` must
    /// be known before its records are handed over.
    #[error("as_of must come before the first record (line {first_record})")]
    AsOfAfterRecord {
        /// The line of the day's first record.
        first_record: u64,
    },

    /// The line is longer than the reader's limit.
    #[error("longer than {max} bytes")]
    TooLong {
        /// The limit, in bytes.
        max: usize,
    },

    /// The record breaks a record rule.
    #[error("{0}")]
    Record(backfill_core::Error),
}

impl LineError {
    /// Splits a serde_json error into its message and column, dropping its
    /// "at line 1 column N" (the line is ours to number).
    fn from_json(error: serde_json::Error) -> Self {
        let text = error.to_string();
        let position = format!(" at line {} column {}", error.line(), error.column());
        let message = text.strip_suffix(&position).unwrap_or(&text);
        let message = cut(message, QUOTED_BYTES).into_owned();
        if error.is_data() {
            LineError::Shape { message }
        } else {
            LineError::Syntax {
                message,
                column: error.column(),
            }
        }
    }
}

/// An error reading a day: which line, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A line is malformed or breaks a rule.
    #[error("line {line}: {problem}")]
    Line {
        /// The 1-based line number.
        line: u64,
        /// What is wrong with it.
        problem: LineError,
    },

    /// Reading failed.
    #[error("line {line}: cannot read: {error}")]
    Io {
        /// The 1-based number of the line being read.
        line: u64,
        /// The I/O error.
        error: std::io::Error,
    },
}

impl ReadError {
    /// The 1-based line the error is about.
    pub fn line(&self) -> u64 {
        match self {
            ReadError::Line { line, .. } | ReadError::Io { line, .. } => *line,
        }
    }
}

/// A line's fields as they appear, before any rule is checked. Text fields
/// borrow from the line unless they hold escapes; `value` is turned into
/// its stored text as it is parsed, with no tree built.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields<'a> {
    #[serde(default, borrow)]
    key: Option<Text<'a>>,
    #[serde(default, borrow)]
    event_date: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    value: Option<Payload>,
    #[serde(default, borrow)]
    updated_at: Option<Text<'a>>,
    #[serde(default)]
    deleted: Option<bool>,
    #[serde(default, borrow)]
    as_of: Option<Text<'a>>,
}

/// A JSON string, borrowed when it has no escapes. (A bare
/// `Option<Cow<str>>` field would always allocate: serde only borrows a
/// `Cow` that is the field itself.)
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// `value` present, even as `null` (which `Option` alone would read as
/// absent): a live record's `null` is the text `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Payload>, D::Error> {
    Payload::deserialize(d).map(Some)
}

/// A `value` as a record stores it.
enum Payload {
    /// A JSON string's own text.
    Text(String),
    /// Any other JSON value's canonical text ([`canonical_json`]).
    Json(String),
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PayloadVisitor)
    }
}

struct PayloadVisitor;

impl PayloadVisitor {
    fn json<E>(write: impl FnOnce(Canonical<'_>) -> Result<(), E>) -> Result<Payload, E> {
        let mut out = Vec::with_capacity(64);
        write(Canonical(&mut out))?;
        Ok(Payload::Json(into_string(out)))
    }
}

impl<'de> Visitor<'de> for PayloadVisitor {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Payload, E> {
        Ok(Payload::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Payload, E> {
        Ok(Payload::Text(v))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Payload, E> {
        Self::json(|c| c.visit_bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Payload, E> {
        Self::json(|c| c.visit_i64(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Payload, E> {
        Self::json(|c| c.visit_u64(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Payload, E> {
        Self::json(|c| c.visit_f64(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Payload, E> {
        Self::json(|c| c.visit_unit())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Payload, A::Error> {
        Self::json(|c| c.visit_seq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Payload, A::Error> {
        Self::json(|c| c.visit_map(map))
    }
}

/// Writes the canonical text of the value it visits into its buffer.
struct Canonical<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// The key under which serde_json hands over a number's text when its
/// `arbitrary_precision` feature is on (no crate here turns it on, but any
/// crate in a build may).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        write_json(self.0, &v);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        write_json(self.0, &v);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        write_json(self.0, &v);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        write_json(self.0, v);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push(b'[');
        let mut first = true;
        loop {
            let at = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if seq.next_element_seed(Canonical(self.0))?.is_none() {
                self.0.truncate(at);
                break;
            }
            first = false;
        }
        self.0.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut entries: Vec<(Cow<'de, str>, Vec<u8>)> = Vec::new();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if entries.is_empty() && key == NUMBER_TOKEN {
                let text: String = map.next_value()?;
                let number: serde_json::Number = text.parse().map_err(de::Error::custom)?;
                return write_number(self.0, &number).map_err(de::Error::custom);
            }
            let mut item = Vec::new();
            map.next_value_seed(Canonical(&mut item))?;
            entries.push((key, item));
        }
        // Sorted here, not by a map type, whose order would depend on
        // serde_json's `preserve_order` feature. Stable, so of a repeated
        // key the last one can be kept, as serde_json's own maps do.
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        self.0.push(b'{');
        let mut first = true;
        for (i, (key, item)) in entries.iter().enumerate() {
            if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if !first {
                self.0.push(b',');
            }
            first = false;
            write_json(self.0, key.as_ref());
            self.0.push(b':');
            self.0.extend_from_slice(item);
        }
        self.0.push(b'}');
        Ok(())
    }
}

/// A number as serde_json prints it once parsed: through u64, i64 or f64
/// rather than the number's own text.
fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) -> Result<(), &'static str> {
    if let Some(u) = n.as_u64() {
        write_json(out, &u);
    } else if let Some(i) = n.as_i64() {
        write_json(out, &i);
    } else {
        write_json(out, &n.as_f64().ok_or("a number out of range")?);
    }
    Ok(())
}

/// Parses one line, without its `\n` (a trailing `\r` is dropped).
///
/// # Errors
///
/// [`LineError`] saying what is wrong; it has no line number, which
/// [`read_records`] adds.
pub fn parse_line(bytes: &[u8]) -> Result<Line, LineError> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Line::Blank);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| LineError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    // Checked first: serde would also read a struct from a JSON array.
    if !text.trim_start().starts_with('{') {
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(LineError::from_json)?;
        return Err(LineError::NotObject);
    }
    let fields: Fields<'_> = serde_json::from_str(text).map_err(LineError::from_json)?;
    fields.into_line()
}

impl Fields<'_> {
    fn into_line(self) -> Result<Line, LineError> {
        if let Some(as_of) = self.as_of {
            let alone = self.key.is_none()
                && self.event_date.is_none()
                && self.value.is_none()
                && self.updated_at.is_none()
                && self.deleted.is_none();
            if !alone {
                return Err(LineError::AsOfInRecord);
            }
            return parse_instant("as_of", &as_of.0).map(Line::AsOf);
        }
        let key = self.key.ok_or(LineError::MissingField("key"))?;
        let event_date = self
            .event_date
            .ok_or(LineError::MissingField("event_date"))?;
        let deleted = self.deleted.unwrap_or(false);
        if !deleted && self.value.is_none() {
            return Err(LineError::MissingField("value"));
        }
        let updated_at = self
            .updated_at
            .ok_or(LineError::MissingField("updated_at"))?;
        let event_date = parse_date("event_date", &event_date.0)?;
        let updated_at = parse_instant("updated_at", &updated_at.0)?;
        let key = key.0.into_owned();
        let record = if deleted {
            match self.value {
                None => {}
                Some(Payload::Text(text)) if text.is_empty() => {}
                Some(Payload::Json(json)) if json == "null" => {}
                Some(_) => return Err(LineError::ValueInTombstone),
            }
            Record::tombstone(key, event_date, updated_at)
        } else {
            let value = match self.value {
                Some(Payload::Text(text) | Payload::Json(text)) => text,
                // Checked above: a live record has a value.
                None => return Err(LineError::MissingField("value")),
            };
            Record::new(key, event_date, value, updated_at)
        };
        record.map(Line::Record).map_err(LineError::Record)
    }
}

fn parse_date(field: &'static str, text: &str) -> Result<NaiveDate, LineError> {
    ymd(text.as_bytes()).ok_or_else(|| LineError::BadDate {
        field,
        text: cut(text, QUOTED_BYTES).into_owned(),
    })
}

/// Exactly `YYYY-MM-DD`, a real date. By hand rather than with chrono's
/// `parse_from_str`, which reads its format string again for every line
/// and takes `2026-1-3` too.
fn ymd(b: &[u8]) -> Option<NaiveDate> {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = i32::from(two_digits(b[0], b[1])?) * 100 + i32::from(two_digits(b[2], b[3])?);
    let month = two_digits(b[5], b[6])?;
    let day = two_digits(b[8], b[9])?;
    NaiveDate::from_ymd_opt(year, month.into(), day.into())
}

fn two_digits(tens: u8, ones: u8) -> Option<u8> {
    if tens.is_ascii_digit() && ones.is_ascii_digit() {
        Some((tens - b'0') * 10 + (ones - b'0'))
    } else {
        None
    }
}

fn parse_instant(field: &'static str, text: &str) -> Result<DateTime<Utc>, LineError> {
    if let Some(at) = common_instant(text.as_bytes()) {
        return Ok(at);
    }
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|reason| LineError::BadInstant {
            field,
            text: cut(text, QUOTED_BYTES).into_owned(),
            reason,
        })
}

/// The common shape of an RFC 3339 instant,
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, read by hand: chrono's
/// general parser is a good part of a line's cost. Anything else (lower
/// case, a space for `T`, a leap second, an error) is left to chrono,
/// which this agrees with on every instant it reads.
fn common_instant(b: &[u8]) -> Option<DateTime<Utc>> {
    if b.len() < 20 || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let date = ymd(&b[..10])?;
    let hour = two_digits(b[11], b[12])?;
    let minute = two_digits(b[14], b[15])?;
    let second = two_digits(b[17], b[18])?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            // Digits past nanoseconds are dropped, as chrono does.
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return None;
        }
        if digits < 9 {
            nanos *= 10u32.pow((9 - digits) as u32);
        }
    }
    let offset_seconds = match &b[i..] {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = two_digits(*h1, *h2)?;
            let minutes = two_digits(*m1, *m2)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let seconds = i64::from(hours) * 3600 + i64::from(minutes) * 60;
            if *sign == b'-' {
                -seconds
            } else {
                seconds
            }
        }
        _ => return None,
    };
    let local = date.and_hms_nano_opt(hour.into(), minute.into(), second.into(), nanos)?;
    local
        .checked_sub_signed(chrono::TimeDelta::seconds(offset_seconds))
        .map(|utc| utc.and_utc())
}

/// The canonical text of a JSON value, the form a non-string `value` is
/// stored in:
///
/// - compact: no whitespace between tokens;
/// - object keys sorted by their UTF-8 bytes, at every level (if an object
///   repeats a key, the last one counts);
/// - strings escaped as serde_json writes them (`"` `\` and control
///   characters escaped, everything else as UTF-8, so `"\u00e9"` becomes
///   `"é"`);
/// - numbers as serde_json prints them once parsed: an integer that fits
///   in 64 bits exactly, any other number as the nearest `f64` (`1.50`
///   becomes `1.5`, `1e2` becomes `100.0`).
///
/// A fetch that must keep other text exactly (a number with more digits
/// than an `f64` holds, a particular key order) sends `value` as a JSON
/// string, which is stored byte for byte.
///
/// ```
/// use backfill_cli::jsonl::canonical_json;
///
/// let value = serde_json::json!({"b": [1, 2.50, "\u{e9}"], "a": {"d": null, "c": true}});
/// assert_eq!(canonical_json(&value), r#"{"a":{"c":true,"d":null},"b":[1,2.5,"é"]}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    // The same writer as for a line's `value`; visiting a `Value` cannot
    // fail.
    let _ = value.deserialize_any(Canonical(&mut out));
    into_string(out)
}

/// Text known to be UTF-8: only serde_json's strings and ASCII are ever
/// written.
fn into_string(out: Vec<u8>) -> String {
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing a string or a number into a Vec cannot fail.
    serde_json::to_writer(out, value).expect("serializing a JSON scalar into memory");
}

/// A day as read: its records in the order of their lines, and the instant
/// of its `as_of` line, if it had one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Day {
    /// The records, in line order.
    pub records: Vec<Record>,
    /// The `as_of` line's instant.
    pub as_of: Option<DateTime<Utc>>,
}

impl From<Day> for Fetched {
    fn from(day: Day) -> Self {
        let fetched = Fetched::new(day.records);
        match day.as_of {
            Some(at) => fetched.as_of(at),
            None => fetched,
        }
    }
}

/// Streams a day from `reader` as a [`Fetched`]: the lines before the
/// first record are read at once (so the `as_of` line, if any, is known and
/// set), the records then come as chunks of at most [`CHUNK_RECORDS`]
/// records and about [`CHUNK_BYTES`] bytes, parsed as the job asks for
/// them. A malformed line further on is the stream's last item, an error.
///
/// # Errors
///
/// [`ReadError`] for a malformed line before the first record, or a read
/// that failed there.
pub async fn read_day<R>(reader: R, max_line_bytes: usize) -> Result<Fetched, ReadError>
where
    R: AsyncBufRead + Unpin + Send + 'static,
{
    let mut reader = ChunkReader::new(reader, max_line_bytes);
    let as_of = reader.read_head().await?;
    let fetched = Fetched::stream(reader.into_chunks());
    Ok(match as_of {
        Some(at) => fetched.as_of(at),
        None => fetched,
    })
}

/// Reads a whole day from `reader` into memory, parsing each line as it
/// arrives (a malformed line fails the day before the rest is read). For
/// tests and programs that want a `Vec`; a fetch streams with
/// [`read_day`] or a [`ChunkReader`] instead.
///
/// A line longer than `max_line_bytes` (not counting its `\n`) is an error
/// as soon as the limit is passed, without the line being held in memory.
///
/// # Errors
///
/// [`ReadError`] naming the 1-based line: a malformed line, a record rule
/// broken, a misplaced or second `as_of` line, a line too long, or an I/O
/// error.
pub async fn read_records<R>(reader: R, max_line_bytes: usize) -> Result<Day, ReadError>
where
    R: AsyncBufRead + Unpin,
{
    let mut reader = ChunkReader::new(reader, max_line_bytes);
    let mut records = Vec::new();
    while let Some(chunk) = reader.next_chunk().await? {
        if records.is_empty() {
            records = chunk;
        } else {
            records.extend(chunk);
        }
    }
    Ok(Day {
        records,
        as_of: reader.as_of(),
    })
}

/// The most records in one chunk of a streamed day.
pub const CHUNK_RECORDS: usize = 8192;

/// The size at which a chunk of a streamed day is closed: 8 MiB of records
/// (keys and values plus a fixed overhead per record, as the job weighs
/// them against its memory budget). A chunk passes it by at most its last
/// record.
pub const CHUNK_BYTES: usize = 8 << 20;

/// What a record weighs in a chunk.
fn weight(record: &Record) -> usize {
    record.key().len() + record.value().len() + std::mem::size_of::<Record>()
}

/// Reads a day in chunks from an [`AsyncBufRead`], parsing each line as it
/// arrives and reading no further than the chunk asked for needs, so what
/// it holds is bounded by one chunk and the reader's buffer whatever the
/// day's size.
///
/// Each line is parsed in place in the reader's buffer; only a line split
/// across two reads is copied (and one longer than the limit is refused
/// as soon as the limit is passed, without being held). After an error the
/// reader is done: every further call returns `Ok(None)`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), backfill_cli::jsonl::ReadError> {
/// use backfill_cli::jsonl::{ChunkReader, DEFAULT_MAX_LINE_BYTES};
///
/// let text = concat!(
///     r#"{"as_of": "2026-01-06T00:00:00Z"}"#, "\n",
///     r#"{"key": "order:1", "event_date": "2026-01-05", "value": 1, "updated_at": "2026-01-05T10:00:00Z"}"#, "\n",
/// );
/// let mut reader = ChunkReader::new(text.as_bytes(), DEFAULT_MAX_LINE_BYTES);
/// assert!(reader.read_head().await?.is_some(), "the as_of line comes first");
/// let chunk = reader.next_chunk().await?.expect("a chunk");
/// assert_eq!(chunk[0].key(), "order:1");
/// assert!(reader.next_chunk().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ChunkReader<R> {
    reader: R,
    max_line_bytes: usize,
    /// A line split across reads, gathered; a line wholly inside the
    /// reader's buffer (the common case) is parsed in place.
    partial: Vec<u8>,
    /// The 1-based number of the next line.
    line: u64,
    as_of: Option<(u64, DateTime<Utc>)>,
    first_record: Option<u64>,
    chunk: Vec<Record>,
    chunk_bytes: usize,
    done: bool,
}

/// How far [`ChunkReader::fill`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    FirstRecord,
    FullChunk,
}

impl<R: AsyncBufRead + Unpin> ChunkReader<R> {
    /// A reader of the day in `reader`, refusing lines longer than
    /// `max_line_bytes` (not counting the `\n`).
    pub fn new(reader: R, max_line_bytes: usize) -> Self {
        Self {
            reader,
            max_line_bytes,
            partial: Vec::new(),
            line: 1,
            as_of: None,
            first_record: None,
            chunk: Vec::new(),
            chunk_bytes: 0,
            done: false,
        }
    }

    /// Reads up to the first record line (kept for the first chunk) or the
    /// end, and returns the `as_of` line's instant: since an `as_of` line
    /// must come before the first record, it is then known for good.
    ///
    /// # Errors
    ///
    /// As [`next_chunk`](Self::next_chunk), for the lines read.
    pub async fn read_head(&mut self) -> Result<Option<DateTime<Utc>>, ReadError> {
        self.fill(Until::FirstRecord).await?;
        Ok(self.as_of())
    }

    /// The next chunk: at most [`CHUNK_RECORDS`] records, closed once past
    /// [`CHUNK_BYTES`]; `None` at the end of the day.
    ///
    /// # Errors
    ///
    /// [`ReadError`] naming the 1-based line: a malformed line, a record
    /// rule broken, a misplaced or second `as_of` line, a line too long, or
    /// an I/O error.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<Record>>, ReadError> {
        self.fill(Until::FullChunk).await?;
        if self.chunk.is_empty() {
            return Ok(None);
        }
        self.chunk_bytes = 0;
        Ok(Some(std::mem::take(&mut self.chunk)))
    }

    /// The `as_of` line's instant, if one was read.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of.map(|(_, at)| at)
    }

    /// The chunks, as a stream that ends after the end of the day or its
    /// first error.
    pub fn into_chunks(self) -> impl Stream<Item = Result<Vec<Record>, ReadError>> + Send + 'static
    where
        R: Send + 'static,
    {
        futures_util::stream::unfold(self, |mut reader| async move {
            match reader.next_chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), reader)),
                Ok(None) => None,
                // The reader is done after an error: the next call ends
                // the stream.
                Err(error) => Some((Err(error), reader)),
            }
        })
    }

    async fn fill(&mut self, until: Until) -> Result<(), ReadError> {
        let filled = self.fill_lines(until).await;
        if filled.is_err() {
            self.done = true;
            self.chunk = Vec::new();
            self.partial = Vec::new();
        }
        filled
    }

    async fn fill_lines(&mut self, until: Until) -> Result<(), ReadError> {
        while !self.done {
            let full = match until {
                Until::FirstRecord => self.first_record.is_some(),
                Until::FullChunk => {
                    self.chunk.len() >= CHUNK_RECORDS || self.chunk_bytes >= CHUNK_BYTES
                }
            };
            if full {
                break;
            }
            let line = self.line;
            let available = self
                .reader
                .fill_buf()
                .await
                .map_err(|error| ReadError::Io { line, error })?;
            let parsed;
            if available.is_empty() {
                self.done = true;
                if self.partial.is_empty() {
                    break;
                }
                parsed = parse_line(&self.partial);
                self.partial.clear();
            } else if let Some(end) = find_newline(available) {
                if self.partial.len() + end > self.max_line_bytes {
                    return Err(too_long(line, self.max_line_bytes));
                }
                if self.partial.is_empty() {
                    parsed = parse_line(&available[..end]);
                } else {
                    self.partial.extend_from_slice(&available[..end]);
                    parsed = parse_line(&self.partial);
                    self.partial.clear();
                }
                self.reader.consume(end + 1);
            } else {
                let n = available.len();
                if self.partial.len() + n > self.max_line_bytes {
                    return Err(too_long(line, self.max_line_bytes));
                }
                self.partial.extend_from_slice(available);
                self.reader.consume(n);
                continue;
            }
            self.take(parsed.map_err(|problem| ReadError::Line { line, problem })?)?;
            self.line += 1;
        }
        Ok(())
    }

    /// Keeps a parsed line.
    fn take(&mut self, parsed: Line) -> Result<(), ReadError> {
        match parsed {
            Line::Record(record) => {
                if self.first_record.is_none() {
                    self.first_record = Some(self.line);
                }
                self.chunk_bytes += weight(&record);
                self.chunk.push(record);
            }
            Line::AsOf(at) => {
                let problem = if let Some((first_line, _)) = self.as_of {
                    LineError::SecondAsOf { first_line }
                } else if let Some(first_record) = self.first_record {
                    LineError::AsOfAfterRecord { first_record }
                } else {
                    self.as_of = Some((self.line, at));
                    return Ok(());
                };
                return Err(ReadError::Line {
                    line: self.line,
                    problem,
                });
            }
            Line::Blank => {}
        }
        Ok(())
    }
}

/// The first `\n` in `bytes`, eight bytes at a time: a byte-by-byte
/// search is a noticeable part of reading a day.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut start = 0;
    for word in &mut words {
        let word = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8])) ^ NEWLINES;
        // Non-zero exactly when some byte of `word` is zero, i.e. was `\n`.
        if word.wrapping_sub(ONES) & !word & HIGHS != 0 {
            break;
        }
        start += 8;
    }
    bytes[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| start + i)
}

fn too_long(line: u64, max: usize) -> ReadError {
    ReadError::Line {
        line,
        problem: LineError::TooLong { max },
    }
}

/// `text` cut to at most `max` bytes at a character boundary, marked `…`.
fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &text[..end]))
}

/// A field's text in an error, quoted (already cut by [`cut`]).
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn day() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 1, 3).unwrap()
    }

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 3, 9, 30, 0).unwrap()
    }

    fn record(line: &str) -> Record {
        match parse_line(line.as_bytes()) {
            Ok(Line::Record(record)) => record,
            other => panic!("expected a record from {line}, got {other:?}"),
        }
    }

    fn error(line: &str) -> String {
        match parse_line(line.as_bytes()) {
            Err(e) => e.to_string(),
            Ok(other) => panic!("expected an error from {line}, got {other:?}"),
        }
    }

    fn with_value(value: &str) -> String {
        format!(
            r#"{{"key":"k","event_date":"2026-01-03","value":{value},"updated_at":"2026-01-03T09:30:00Z"}}"#
        )
    }

    async fn read(text: &[u8]) -> Result<Day, ReadError> {
        read_records(text, DEFAULT_MAX_LINE_BYTES).await
    }

    #[test]
    fn canonical_form_sorts_keys_at_every_level_and_is_compact() {
        let value: Value = serde_json::from_str(
            r#" { "z" : 1, "a" : { "y" : [ 3, { "b" : 2, "a" : 1 } ], "x" : null },
                 "m" : [true, false, "s\u00e9\n\"q\"", 1.50, -7, 1e2, 18446744073709551615] } "#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"x":null,"y":[3,{"a":1,"b":2}]},"m":[true,false,"sé\n\"q\"",1.5,-7,100.0,18446744073709551615],"z":1}"#
        );
        // Keys by their bytes: upper case before lower case, "é" (c3 a9) after "z".
        let value = json!({"é": 1, "z": 2, "Z": 3, "": 4, "a\u{0}": 5, "a": 6});
        assert_eq!(
            canonical_json(&value),
            r#"{"":4,"Z":3,"a":6,"a\u0000":5,"z":2,"é":1}"#
        );
        assert_eq!(canonical_json(&json!([])), "[]");
        assert_eq!(canonical_json(&json!({})), "{}");
        assert_eq!(canonical_json(&json!(null)), "null");
        assert_eq!(
            canonical_json(&json!(0.1 + 0.2)),
            "0.30000000000000004",
            "nearest f64, printed as serde_json does"
        );
        assert_eq!(
            canonical_json(&json!(-9_223_372_036_854_775_808_i64)),
            "-9223372036854775808"
        );
    }

    #[test]
    fn equal_values_store_the_same_text_whatever_their_layout() {
        let a = record(&with_value(r#"{"b":{"y":2,"x":1},"a":[1,{"q":1,"p":2}]}"#));
        let b = record(&with_value(
            "{ \"a\" : [ 1 , { \"p\" : 2 , \"q\" : 1 } ] ,\t\"b\":{\"x\":1,\"y\":2} }",
        ));
        assert_eq!(a.value(), r#"{"a":[1,{"p":2,"q":1}],"b":{"x":1,"y":2}}"#);
        assert_eq!(a, b);
        let escaped = record(&with_value(r#"{"\u00e9":"\u00e9\ud83d\ude00"}"#));
        assert_eq!(escaped.value(), "{\"é\":\"é😀\"}");
        assert_eq!(record(&with_value("12.0")).value(), "12.0");
        assert_eq!(record(&with_value("1E3")).value(), "1000.0");
        assert_eq!(record(&with_value("true")).value(), "true");
        assert_eq!(record(&with_value("null")).value(), "null");
        assert_eq!(record(&with_value("[ ]")).value(), "[]");
        // Of a repeated key the last counts, as in a parsed serde_json map.
        let repeated = r#"{"a":1,"b":[],"a":{"y":1,"x":[{"k":2,"k":3}]}}"#;
        assert_eq!(
            record(&with_value(repeated)).value(),
            r#"{"a":{"x":[{"k":3}],"y":1},"b":[]}"#
        );
        // A line's value and `canonical_json` of the parsed value agree.
        for json in [
            repeated,
            r#"[1, -2, 3.25, 1e-7, 12345678901234567890, -0, 0.0, "\u00e9\t\u001f", null, false, {}]"#,
            r#"{"\u00e9": {"Z": null, "a": [[], [{}]]}, "e": 18446744073709551616}"#,
        ] {
            let value: Value = serde_json::from_str(json).unwrap();
            assert_eq!(
                record(&with_value(json)).value(),
                canonical_json(&value),
                "{json}"
            );
        }
    }

    #[test]
    fn string_values_are_kept_byte_exact() {
        let r = record(&with_value(r#"" {\"b\": 1,  \"a\": 2.50} ""#));
        assert_eq!(r.value(), r#" {"b": 1,  "a": 2.50} "#);
        assert_eq!(record(&with_value(r#""plain text""#)).value(), "plain text");
        assert_eq!(record(&with_value(r#""caf\u00e9 \t""#)).value(), "café \t");
        assert_eq!(record(&with_value("\"café\"")).value(), "café");
        assert_eq!(record(&with_value(r#""""#)).value(), "");
        let r = record(&with_value(r#""x""#));
        assert_eq!(
            (r.key(), r.event_date(), r.updated_at(), r.is_deleted()),
            ("k", day(), at(), false)
        );
    }

    #[test]
    fn instants_take_any_offset_and_keys_may_be_escaped() {
        let r = record(
            r#"{"key":"caf\u00e9","event_date":"2026-01-03","value":"v","updated_at":"2026-01-03T10:30:00.1234567+01:00","deleted":false}"#,
        );
        assert_eq!(r.key(), "café");
        assert_eq!(
            r.updated_at(),
            at() + chrono::Duration::microseconds(123_456)
        );
        assert!(!r.is_deleted());
    }

    #[test]
    fn tombstones() {
        let expected = Record::tombstone("k", day(), at()).unwrap();
        for line in [
            r#"{"key":"k","event_date":"2026-01-03","updated_at":"2026-01-03T09:30:00Z","deleted":true}"#,
            r#"{"key":"k","event_date":"2026-01-03","value":"","updated_at":"2026-01-03T09:30:00Z","deleted":true}"#,
            r#"{"deleted":true,"value":null,"key":"k","event_date":"2026-01-03","updated_at":"2026-01-03T09:30:00Z"}"#,
        ] {
            assert_eq!(record(line), expected, "{line}");
        }
        for value in [r#""x""#, "{}", "0", "false", "[]", r#"" ""#] {
            let line = format!(
                r#"{{"key":"k","event_date":"2026-01-03","value":{value},"updated_at":"2026-01-03T09:30:00Z","deleted":true}}"#
            );
            let e = error(&line);
            assert!(e.contains("\"deleted\": true has a value"), "{line}: {e}");
        }
        let e = error(
            r#"{"key":"k","event_date":"2026-01-03","updated_at":"2026-01-03T09:30:00Z","deleted":false}"#,
        );
        assert_eq!(e, "missing field `value`");
    }

    #[test]
    fn unknown_and_missing_fields_are_named() {
        let e = error(&with_value(r#""v""#).replace("\"key\"", "\"colour\":1,\"key\""));
        assert!(e.starts_with("unknown field `colour`"), "{e}");
        assert!(
            !e.contains("line 1 column"),
            "our own line numbers only: {e}"
        );
        let full = with_value(r#""v""#);
        for field in ["key", "event_date", "value", "updated_at"] {
            let v: Value = serde_json::from_str(&full).unwrap();
            let mut map = v.as_object().unwrap().clone();
            map.remove(field);
            let e = error(&Value::Object(map).to_string());
            assert_eq!(e, format!("missing field `{field}`"));
        }
        let e = error(&full.replace("\"k\"", "5"));
        assert!(e.contains("invalid type: integer `5`"), "{e}");
        let e = error(&full.replace("\"v\"", "\"v\",\"key\":\"again\""));
        assert!(e.contains("duplicate field `key`"), "{e}");
        let not_object = "not a JSON object: a line is a record or an as_of line, {…}";
        for line in [
            r#"["k", "2026-01-03", "v", "2026-01-03T09:30:00Z"]"#,
            "12",
            " \"text\"",
        ] {
            assert_eq!(error(line), not_object, "{line}");
        }
        let e = error("garbage");
        assert_eq!(e, "invalid JSON: expected value at column 1");
        let e = error(&full.replace("}", r#","deleted":"yes"}"#));
        assert!(
            e.contains("invalid type: string \"yes\", expected a boolean"),
            "{e}"
        );
    }

    #[test]
    fn bad_dates_and_instants_are_refused() {
        let full = with_value(r#""v""#);
        for bad in [
            "2026-13-01",
            "2026-02-30",
            "2026-1-3",
            "20260103",
            "2026-01-03T00:00:00Z",
            "",
        ] {
            let e = error(&full.replace("\"2026-01-03\"", &format!("\"{bad}\"")));
            assert_eq!(e, format!("event_date {bad:?} is not a date (YYYY-MM-DD)"));
        }
        for bad in [
            "2026-01-03",
            "2026-01-03 09:30",
            "yesterday",
            "2026-01-03T25:00:00Z",
        ] {
            let e = error(&full.replace("\"2026-01-03T09:30:00Z\"", &format!("\"{bad}\"")));
            assert!(
                e.starts_with(&format!("updated_at {bad:?} is not an RFC 3339 instant")),
                "{e}"
            );
        }
        let e = error(&full.replace("2026-01-03T", "0000-01-03T"));
        assert!(e.contains("updated_at is outside years 1 to 9999"), "{e}");
        let e = error(&full.replace("\"k\"", "\"\""));
        assert!(e.contains("key is empty"), "{e}");
        let long = "x".repeat(10_000);
        let e = error(&full.replace("\"2026-01-03\"", &format!("\"{long}\"")));
        assert!(e.len() < 300, "a huge bad field is quoted cut: {e}");
        let e = error(&full.replace("\"k\"", &format!("\"{long}\"")));
        assert!(e.contains("key is 10000 bytes, more than 512"), "{e}");
    }

    #[test]
    fn instants_read_by_hand_agree_with_chrono() {
        for text in [
            "2026-01-03T09:30:00Z",
            "2026-01-03T09:30:00.1Z",
            "2026-01-03T09:30:00.123456789Z",
            "2026-01-03T09:30:00.1234567891234Z",
            "2026-01-03T23:59:59.999999999-23:59",
            "2026-01-03T00:00:00+14:00",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "2024-02-29T12:00:00-00:00",
            "2026-01-03T09:30:60Z",
            "2026-01-03t09:30:00z",
            "2026-01-03 09:30:00Z",
            "2026-01-03T09:30:00.Z",
            "2026-01-03T09:30:00",
            "2026-01-03T09:30:00+0100",
            "2026-01-03T09:30:00+01:60",
            "2026-01-03T24:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-01-03T09:30:00Zjunk",
            "+2026-01-03T09:30:00Z",
        ] {
            let chrono = DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|at| at.with_timezone(&Utc));
            if let Some(by_hand) = common_instant(text.as_bytes()) {
                assert_eq!(Some(by_hand), chrono, "{text}");
            }
            assert_eq!(parse_instant("updated_at", text).ok(), chrono, "{text}");
        }
        assert!(common_instant(b"2026-01-03T09:30:00.5+01:00").is_some());
        assert_eq!(ymd(b"2024-02-29"), NaiveDate::from_ymd_opt(2024, 2, 29));
        assert_eq!(ymd(b"0000-01-01"), NaiveDate::from_ymd_opt(0, 1, 1));
        assert_eq!(ymd(b"2023-02-29"), None);
    }

    #[test]
    fn newlines_are_found_anywhere() {
        for len in 0..40 {
            let mut bytes = vec![b'x'; len];
            assert_eq!(find_newline(&bytes), None);
            for at in 0..len {
                bytes[at] = b'\n';
                assert_eq!(find_newline(&bytes), Some(at), "{len} {at}");
                bytes[len - 1] = b'\n';
                assert_eq!(find_newline(&bytes), Some(at), "{len} {at}");
                bytes.fill(0x8a);
            }
        }
    }

    #[test]
    fn as_of_lines() {
        assert_eq!(
            parse_line(br#"{"as_of":"2026-01-04T01:00:00+01:00"}"#).unwrap(),
            Line::AsOf(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let e = error(r#"{"as_of":"2026-01-04T00:00:00Z","key":"k"}"#);
        assert_eq!(e, "as_of must be alone on its line, not in a record");
        let e = error(&with_value(r#""v""#).replace("}", r#","as_of":"2026-01-04T00:00:00Z"}"#));
        assert_eq!(e, "as_of must be alone on its line, not in a record");
        let e = error(r#"{"as_of":"soon"}"#);
        assert!(
            e.starts_with("as_of \"soon\" is not an RFC 3339 instant"),
            "{e}"
        );
    }

    #[test]
    fn blank_lines_crlf_and_not_json() {
        for blank in ["", " ", "\t  ", "\r", "  \r", "\n"] {
            assert_eq!(
                parse_line(blank.as_bytes()).unwrap(),
                Line::Blank,
                "{blank:?}"
            );
        }
        let crlf = with_value(r#""v""#) + "\r";
        assert_eq!(record(&crlf).value(), "v");
        let e = error("{\"key\": ");
        assert!(e.starts_with("invalid JSON: EOF while parsing"), "{e}");
        let e = error(&(with_value(r#""v""#) + " {}"));
        assert!(
            e.starts_with("invalid JSON: trailing characters at column"),
            "{e}"
        );
        let e = error("{'key': 1}");
        assert_eq!(e, "invalid JSON: key must be a string at column 2");
        let e = parse_line(b"{\"key\":\"\xff\"}").unwrap_err().to_string();
        assert_eq!(e, "not UTF-8 (invalid byte at offset 8)");
    }

    #[tokio::test]
    async fn a_day_is_read_with_right_line_numbers() {
        let text = format!(
            "\n  \r\n{}\r\n{}\n{}\n{}",
            r#"{"as_of":"2026-01-04T00:00:00Z"}"#,
            with_value(r#""a""#),
            with_value(r#"{"n":1}"#).replace("\"k\"", "\"k2\""),
            with_value("2").replace("\"k\"", "\"k3\""),
        );
        let fetched = read(text.as_bytes()).await.unwrap();
        let values: Vec<_> = fetched
            .records
            .iter()
            .map(|r| (r.key(), r.value()))
            .collect();
        assert_eq!(values, [("k", "a"), ("k2", r#"{"n":1}"#), ("k3", "2")]);
        assert_eq!(
            fetched.as_of,
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let fetched = read(b"").await.unwrap();
        assert_eq!(fetched, Day::default());
        assert_eq!(read(b"\n\n \n").await.unwrap(), Day::default());

        let bad = format!(
            "{}\n\n{}\n",
            with_value(r#""a""#),
            with_value(r#""b""#).replace("\"updated_at\"", "\"updated\"")
        );
        let e = read(bad.as_bytes()).await.unwrap_err();
        assert_eq!(e.line(), 3);
        assert!(
            e.to_string().starts_with("line 3: unknown field `updated`"),
            "{e}"
        );

        let missing = format!(
            "{}\n{}",
            with_value(r#""a""#),
            r#"{"key":"k","event_date":"2026-01-03","value":"v"}"#
        );
        let e = read(missing.as_bytes()).await.unwrap_err();
        assert_eq!(e.to_string(), "line 2: missing field `updated_at`");

        let two = "{\"as_of\":\"2026-01-04T00:00:00Z\"}\n\n{\"as_of\":\"2026-01-05T00:00:00Z\"}\n";
        let e = read(two.as_bytes()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: a second as_of line (the first is line 1); a day has at most one"
        );

        let e = read(b"\n\xc3\x28\n").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: not UTF-8 (invalid byte at offset 0)"
        );
    }

    #[tokio::test]
    async fn lines_split_across_reads_are_joined() {
        let text = format!(
            "{}\n{}\r\n\n",
            with_value(r#""first""#),
            with_value(r#"{"b":1,"a":2}"#)
        );
        // A 7-byte buffer splits every line over many reads.
        let reader = tokio::io::BufReader::with_capacity(7, text.as_bytes());
        let fetched = read_records(reader, 1024).await.unwrap();
        let values: Vec<_> = fetched.records.iter().map(Record::value).collect();
        assert_eq!(values, ["first", r#"{"a":2,"b":1}"#]);
    }

    /// `lines` record lines, `value` as each one's value, keys `k0`, `k1`, …
    fn lines(lines: usize, value: &str) -> String {
        let mut text = String::new();
        for i in 0..lines {
            text.push_str(&with_value(value).replace("\"k\"", &format!("\"k{i}\"")));
            text.push('\n');
        }
        text
    }

    /// Reads every chunk, checking each is within the bounds.
    async fn read_chunks(text: &[u8]) -> Vec<Vec<Record>> {
        let mut reader = ChunkReader::new(text, DEFAULT_MAX_LINE_BYTES);
        let mut chunks = Vec::new();
        while let Some(chunk) = reader.next_chunk().await.unwrap() {
            assert!(
                !chunk.is_empty() && chunk.len() <= CHUNK_RECORDS,
                "{}",
                chunk.len()
            );
            let bytes: usize = chunk.iter().map(weight).sum();
            let last = weight(chunk.last().unwrap());
            assert!(
                bytes - last < CHUNK_BYTES,
                "closed once past the bytes: {bytes}"
            );
            chunks.push(chunk);
        }
        chunks
    }

    #[tokio::test]
    async fn a_large_day_comes_in_bounded_chunks_in_line_order() {
        let text = lines(50_000, r#"{"n":1}"#);
        let chunks = read_chunks(text.as_bytes()).await;
        assert_eq!(chunks.len(), 50_000_usize.div_ceil(CHUNK_RECORDS));
        assert!(chunks[..chunks.len() - 1]
            .iter()
            .all(|chunk| chunk.len() == CHUNK_RECORDS));
        let keys: Vec<_> = chunks.iter().flatten().map(Record::key).collect();
        let expected: Vec<_> = (0..50_000).map(|i| format!("k{i}")).collect();
        assert_eq!(keys, expected);

        // Large values: the bytes close a chunk long before the count does.
        let big = format!("\"{}\"", "v".repeat(64 * 1024));
        let text = lines(400, &big);
        let chunks = read_chunks(text.as_bytes()).await;
        assert!(chunks.len() >= 3, "{}", chunks.len());
        assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), 400);

        // The collecting reader agrees.
        let day = read(text.as_bytes()).await.unwrap();
        assert_eq!(day.records, chunks.concat());
    }

    #[tokio::test]
    async fn as_of_must_come_before_the_first_record() {
        let as_of = r#"{"as_of":"2026-01-04T00:00:00Z"}"#;
        let after = format!("\n{}\n\n{as_of}\n", with_value(r#""a""#));
        let e = read(after.as_bytes()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: as_of must come before the first record (line 2)"
        );
        // Streamed, the error comes after the records before it.
        let mut reader = ChunkReader::new(after.as_bytes(), DEFAULT_MAX_LINE_BYTES);
        assert_eq!(reader.read_head().await.unwrap(), None);
        assert_eq!(reader.next_chunk().await.unwrap_err().line(), 4);
        assert!(
            reader.next_chunk().await.unwrap().is_none(),
            "done after an error"
        );

        let two = format!("{as_of}\n{}\n{as_of}\n", with_value(r#""a""#));
        let e = read(two.as_bytes()).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: a second as_of line (the first is line 1); a day has at most one"
        );

        // Only the as_of is known when the Fetched is returned, so nothing
        // past the first record is read before then: here reading further
        // fails.
        let head = format!("\n{as_of}\n\n{}\n{}", with_value(r#""a""#), with_value("2"));
        let failing = tokio::io::AsyncReadExt::chain(head.as_bytes(), tokio_test_failing_reader());
        let mut reader = ChunkReader::new(tokio::io::BufReader::new(failing), 1024);
        assert_eq!(
            reader.read_head().await.unwrap(),
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let e = reader.next_chunk().await.unwrap_err();
        assert_eq!(e.to_string(), "line 5: cannot read: disk on fire");
    }

    #[tokio::test]
    async fn read_day_streams_with_its_as_of() {
        let text = format!(
            "{}\n{}",
            r#"{"as_of":"2026-01-04T00:00:00Z"}"#,
            lines(20_000, "1")
        );
        let fetched = read_day(std::io::Cursor::new(text.into_bytes()), 1024)
            .await
            .unwrap();
        assert!(fetched.is_stream());
        assert_eq!(
            fetched.listing_as_of(),
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let (records, _) = fetched.collect().await.unwrap();
        assert_eq!(records.len(), 20_000);

        let bad = format!("{}{{\"as_of\":\"2026-01-04T00:00:00Z\"}}\n", lines(3, "1"));
        let fetched = read_day(std::io::Cursor::new(bad.into_bytes()), 1024)
            .await
            .unwrap();
        let e = fetched.collect().await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: as_of must come before the first record (line 1)"
        );
        let e = read_day(&b"{}\n"[..], 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 1: missing field `key`");
    }

    /// An endless reader of `x`s with no newline: proof a long line is
    /// refused without being held, since it never ends.
    struct Endless {
        served: usize,
        chunk: Vec<u8>,
    }

    impl tokio::io::AsyncRead for Endless {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let this = self.get_mut();
            let n = buf.remaining().min(this.chunk.len());
            buf.put_slice(&this.chunk[..n]);
            this.served += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn long_lines_are_refused_without_buffering_them() {
        let short = with_value(r#""a""#);
        let text = format!("{short}\n\n{short}\n{}\n", "x".repeat(10 * 1024 * 1024));
        let e = read_records(text.as_bytes(), 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 4: longer than 1024 bytes");

        let mut endless = Endless {
            served: 0,
            chunk: vec![b'x'; 64 * 1024],
        };
        let reader = tokio::io::BufReader::with_capacity(8 * 1024, &mut endless);
        let e = read_records(reader, 1024 * 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 1: longer than 1048576 bytes");
        assert!(
            endless.served < 2 * 1024 * 1024,
            "stopped soon after the limit"
        );

        // Exactly at the limit is fine, with or without a final newline.
        let fits = with_value(r#""a""#);
        let fetched = read_records(fits.as_bytes(), fits.len()).await.unwrap();
        assert_eq!(fetched.records.len(), 1);
        let e = read_records(fits.as_bytes(), fits.len() - 1)
            .await
            .unwrap_err();
        assert_eq!(e.line(), 1);
    }

    #[tokio::test]
    async fn io_errors_name_the_line() {
        let text = format!("{}\n{{\"key\"", with_value(r#""a""#));
        let failing = tokio::io::AsyncReadExt::chain(text.as_bytes(), tokio_test_failing_reader());
        let e = read_records(tokio::io::BufReader::new(failing), 1024)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "line 2: cannot read: disk on fire");
    }

    fn tokio_test_failing_reader() -> impl tokio::io::AsyncRead + Unpin {
        struct Failing;
        impl tokio::io::AsyncRead for Failing {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                _: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Err(std::io::Error::other("disk on fire")))
            }
        }
        Failing
    }

    /// 300 000 typical lines; run with
    /// `cargo test --release -p backfill-cli -- --ignored --nocapture parse_speed`.
    #[tokio::test]
    #[ignore = "a timing check, meaningful in release builds"]
    async fn parse_speed() {
        let mut text = String::new();
        for i in 0..300_000 {
            text.push_str(&format!(
                r#"{{"key":"order:{i}","event_date":"2026-01-03","value":{{"total_cents":{i},"currency":"EUR"}},"updated_at":"2026-01-03T09:30:00.123456Z"}}"#
            ));
            text.push('\n');
        }
        let started = std::time::Instant::now();
        let fetched = read(text.as_bytes()).await.unwrap();
        let took = started.elapsed();
        println!(
            "{} lines, {} bytes: {took:?}",
            fetched.records.len(),
            text.len()
        );
        assert_eq!(fetched.records.len(), 300_000);
    }
}
