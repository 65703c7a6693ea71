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
//! most one.

use std::borrow::Cow;
use std::fmt;

use backfill_core::{Fetched, Record};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line [`read_day`] accepts by default: 256 MiB.
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
/// borrow from the line unless they hold escapes; `value` stays raw JSON,
/// so a string value is never parsed into a tree.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields<'a> {
    #[serde(default, borrow)]
    key: Option<Text<'a>>,
    #[serde(default, borrow)]
    event_date: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    value: Option<&'a RawValue>,
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
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Parses one line, without its `\n` (a trailing `\r` is dropped).
///
/// # Errors
///
/// [`LineError`] saying what is wrong; it has no line number, which
/// [`read_day`] adds.
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
            match self.value.map(RawValue::get) {
                None | Some("null") | Some("\"\"") => {}
                Some(_) => return Err(LineError::ValueInTombstone),
            }
            Record::tombstone(key, event_date, updated_at)
        } else {
            // Checked above: a live record has a value.
            let value = self.value.ok_or(LineError::MissingField("value"))?;
            Record::new(key, event_date, value_text(value)?, updated_at)
        };
        record.map(Line::Record).map_err(LineError::Record)
    }
}

/// The text a record stores for its raw JSON `value`.
fn value_text(raw: &RawValue) -> Result<String, LineError> {
    let json = raw.get();
    if json.starts_with('"') {
        // A string without escapes is its own text between the quotes;
        // the parser has already refused control characters in it.
        if !json.contains('\\') {
            return Ok(json[1..json.len() - 1].to_owned());
        }
        return serde_json::from_str::<String>(json).map_err(LineError::from_json);
    }
    let value: Value = serde_json::from_str(json).map_err(LineError::from_json)?;
    Ok(canonical_json(&value))
}

fn parse_date(field: &'static str, text: &str) -> Result<NaiveDate, LineError> {
    let bad = || LineError::BadDate {
        field,
        text: cut(text, QUOTED_BYTES).into_owned(),
    };
    // Exactly YYYY-MM-DD: chrono alone would also take `2026-1-3`.
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| bad())
}

fn parse_instant(field: &'static str, text: &str) -> Result<DateTime<Utc>, LineError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|reason| LineError::BadInstant {
            field,
            text: cut(text, QUOTED_BYTES).into_owned(),
            reason,
        })
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
    write_canonical(value, &mut out);
    // Only UTF-8 is ever written: serde_json's strings and ASCII.
    String::from_utf8(out).expect("canonical JSON is UTF-8")
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            // Through u64/i64/f64 rather than the Number's own text, so the
            // form does not change if a crate in the build turns on
            // serde_json's `arbitrary_precision`.
            if let Some(u) = n.as_u64() {
                write_json(out, &u);
            } else if let Some(i) = n.as_i64() {
                write_json(out, &i);
            } else {
                write_json(out, &n.as_f64().unwrap_or(f64::NAN));
            }
        }
        Value::String(s) => write_json(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            // Sorted here, not by the map: its order depends on serde_json's
            // `preserve_order` feature, which any crate in a build may enable.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, key);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
    }
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing a string or a number into a Vec cannot fail.
    serde_json::to_writer(out, value).expect("serializing a JSON scalar into memory");
}

/// Reads a whole day from `reader`, parsing each line as it arrives (a
/// malformed line fails the day before the rest is read).
///
/// A line longer than `max_line_bytes` (not counting its `\n`) is an error
/// as soon as the limit is passed, without the line being held in memory.
///
/// # Errors
///
/// [`ReadError`] naming the 1-based line: a malformed line, a record rule
/// broken, a second `as_of` line, a line too long, or an I/O error.
pub async fn read_day<R>(mut reader: R, max_line_bytes: usize) -> Result<Fetched, ReadError>
where
    R: AsyncBufRead + Unpin,
{
    let mut records = Vec::new();
    let mut as_of: Option<(u64, DateTime<Utc>)> = None;
    // A line split across reads is gathered here; a line wholly inside the
    // reader's buffer (the common case) is parsed in place.
    let mut partial: Vec<u8> = Vec::new();
    let mut line: u64 = 1;
    loop {
        let available = reader
            .fill_buf()
            .await
            .map_err(|error| ReadError::Io { line, error })?;
        let parsed;
        if available.is_empty() {
            if partial.is_empty() {
                break;
            }
            parsed = parse_line(&partial);
            partial.clear();
        } else if let Some(end) = available.iter().position(|&b| b == b'\n') {
            if partial.len() + end > max_line_bytes {
                return Err(too_long(line, max_line_bytes));
            }
            if partial.is_empty() {
                parsed = parse_line(&available[..end]);
            } else {
                partial.extend_from_slice(&available[..end]);
                parsed = parse_line(&partial);
                partial.clear();
            }
            reader.consume(end + 1);
        } else {
            let n = available.len();
            if partial.len() + n > max_line_bytes {
                return Err(too_long(line, max_line_bytes));
            }
            partial.extend_from_slice(available);
            reader.consume(n);
            continue;
        }
        match parsed.map_err(|problem| ReadError::Line { line, problem })? {
            Line::Record(record) => records.push(record),
            Line::AsOf(at) => {
                if let Some((first_line, _)) = as_of {
                    return Err(ReadError::Line {
                        line,
                        problem: LineError::SecondAsOf { first_line },
                    });
                }
                as_of = Some((line, at));
            }
            Line::Blank => {}
        }
        line += 1;
    }
    let fetched = Fetched::new(records);
    Ok(match as_of {
        Some((_, at)) => fetched.as_of(at),
        None => fetched,
    })
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

    async fn read(text: &[u8]) -> Result<Fetched, ReadError> {
        read_day(text, DEFAULT_MAX_LINE_BYTES).await
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
            "{}\n\n  \r\n{}\r\n{}\n{}",
            with_value(r#""a""#),
            r#"{"as_of":"2026-01-04T00:00:00Z"}"#,
            with_value(r#"{"n":1}"#).replace("\"k\"", "\"k2\""),
            with_value("2").replace("\"k\"", "\"k3\""),
        );
        let fetched = read(text.as_bytes()).await.unwrap();
        let values: Vec<_> = fetched
            .records()
            .iter()
            .map(|r| (r.key(), r.value()))
            .collect();
        assert_eq!(values, [("k", "a"), ("k2", r#"{"n":1}"#), ("k3", "2")]);
        assert_eq!(
            fetched.listing_as_of(),
            Some(Utc.with_ymd_and_hms(2026, 1, 4, 0, 0, 0).unwrap())
        );
        let fetched = read(b"").await.unwrap();
        assert_eq!(fetched, Fetched::new(Vec::new()));
        assert_eq!(read(b"\n\n \n").await.unwrap(), Fetched::new(Vec::new()));

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
        let fetched = read_day(reader, 1024).await.unwrap();
        let values: Vec<_> = fetched.records().iter().map(Record::value).collect();
        assert_eq!(values, ["first", r#"{"a":2,"b":1}"#]);
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
        let e = read_day(text.as_bytes(), 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 4: longer than 1024 bytes");

        let mut endless = Endless {
            served: 0,
            chunk: vec![b'x'; 64 * 1024],
        };
        let reader = tokio::io::BufReader::with_capacity(8 * 1024, &mut endless);
        let e = read_day(reader, 1024 * 1024).await.unwrap_err();
        assert_eq!(e.to_string(), "line 1: longer than 1048576 bytes");
        assert!(
            endless.served < 2 * 1024 * 1024,
            "stopped soon after the limit"
        );

        // Exactly at the limit is fine, with or without a final newline.
        let fits = with_value(r#""a""#);
        let fetched = read_day(fits.as_bytes(), fits.len()).await.unwrap();
        assert_eq!(fetched.records().len(), 1);
        let e = read_day(fits.as_bytes(), fits.len() - 1).await.unwrap_err();
        assert_eq!(e.line(), 1);
    }

    #[tokio::test]
    async fn io_errors_name_the_line() {
        let text = format!("{}\n{{\"key\"", with_value(r#""a""#));
        let failing = tokio::io::AsyncReadExt::chain(text.as_bytes(), tokio_test_failing_reader());
        let e = read_day(tokio::io::BufReader::new(failing), 1024)
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
            fetched.records().len(),
            text.len()
        );
        assert_eq!(fetched.records().len(), 300_000);
    }
}
