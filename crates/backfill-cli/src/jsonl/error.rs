//! What goes wrong reading a day: what is wrong with a line
//! ([`LineError`]), and on which line ([`ReadError`]).

use std::fmt;

/// The most of a field's text or of a JSON parser's message that an error
/// quotes; the rest is cut, so a huge bad value cannot flood a ledger.
pub(super) const QUOTED_BYTES: usize = 200;

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
    pub(super) fn from_json(error: serde_json::Error) -> Self {
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

pub(super) use backfill_core::text::cut;

/// A field's text in an error, quoted (already cut by [`cut`]).
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
