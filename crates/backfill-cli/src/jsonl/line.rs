//! One line of a day, parsed: a record, an `as_of` line or a blank.

use backfill_core::Record;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};

use super::canonical::{Payload, Text};
use super::error::LineError;
use super::instant::{parse_date, parse_instant};

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

/// `value` present, even as `null` (which `Option` alone would read as
/// absent): a live record's `null` is the text `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Payload>, D::Error> {
    Payload::deserialize(d).map(Some)
}

/// Parses one line, without its `\n` (a trailing `\r` is dropped).
///
/// # Errors
///
/// [`LineError`] saying what is wrong; it has no line number, which
/// [`read_records`](super::read_records) adds.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::testing::{at, day, error, record, with_value};
    use chrono::TimeZone;
    use serde_json::Value;

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
}
