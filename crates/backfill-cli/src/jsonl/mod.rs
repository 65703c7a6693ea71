//! The JSON Lines format a fetch prints: one record per line, and
//! optionally one `as_of` line for a replace listing.
//!
//! Each line is one JSON object (UTF-8). Blank lines and lines of only
//! whitespace are skipped, a trailing `\r` is tolerated, and so is a UTF-8
//! byte-order mark at the very start of the day, so a file written on
//! Windows reads the same.
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
//! a streamed [`Fetched`](backfill_core::Fetched). [`read_records`]
//! collects a whole day into a `Vec`, for tests and programs that want one.
//! Errors name the 1-based line.

mod canonical;
mod error;
mod instant;
mod line;
mod reader;
#[cfg(test)]
mod testing;

pub use canonical::canonical_json;
pub use error::{LineError, ReadError};
pub use line::{parse_line, Line};
pub use reader::{
    read_day, read_records, ChunkReader, Day, CHUNK_BYTES, CHUNK_RECORDS, DEFAULT_MAX_LINE_BYTES,
};
