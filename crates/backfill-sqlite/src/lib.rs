//! A SQLite [`Store`](backfill_core::Store) for backfill, on rusqlite with
//! SQLite bundled.
//!
//! Each day's batch is one `BEGIN IMMEDIATE` transaction that applies every
//! record with SQLite's own conditional upsert,
//! `INSERT … ON CONFLICT(key) DO UPDATE … WHERE (incoming) > (stored)`, in
//! key order; identical and older records are not written at all. Files are
//! opened in WAL mode with `synchronous=NORMAL`. Blocking calls run on
//! tokio's blocking pool.
//!
//! Dates are stored as `YYYY-MM-DD` text and instants as
//! `YYYY-MM-DDTHH:MM:SS.ffffffZ` text, fixed width, so SQLite's byte order is
//! time order and the rows stay readable with any SQLite tool.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::{backfill, Record, Store};
//! use backfill_sqlite::SqliteStore;
//! use chrono::NaiveDate;
//!
//! async fn fetch(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
//!     let at = day.and_hms_opt(8, 30, 0).unwrap().and_utc();
//!     Ok(vec![Record::new(format!("invoice:{day}"), day, r#"{"paid":true}"#, at).unwrap()])
//! }
//!
//! // `SqliteStore::open("pipeline.db")` for a file.
//! let store = SqliteStore::builder_in_memory().table("invoices").open().await?;
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//! backfill(&store, &fetch, jan(1)..=jan(10)).await?;
//! let rerun = backfill(&store, &fetch, jan(1)..=jan(10)).await?;
//! assert_eq!(rerun.totals().written(), 0);
//! assert_eq!(store.rows().await?.len(), 10);
//! # Ok(()) }
//! ```
//!
//! # An existing table
//!
//! Opening creates the table and its index only when they are missing, so a
//! database opened read-only (a `file:…?mode=ro` URI, or
//! [`SqliteStoreBuilder::read_only`]) can be read. A table that already
//! exists is used only if it is the one the store would have created: the
//! same columns with the same declared types, `NOT NULL`, `BINARY`
//! collation, `key` as the primary key, the same `CHECK`s, and `STRICT`.
//! Anything else is refused when opening, with an error that names the
//! column and what differs: a table that merely looks right can store wrong
//! data (keys `a` and `A` are one row under `COLLATE NOCASE`; a non-STRICT
//! `INTEGER` column turns `"042"` into 42).
//!
//! # Which errors retry
//!
//! A job retries a day whose error
//! [`is_retryable`](backfill_core::Error::is_retryable). Here that is lock
//! contention only: `SQLITE_BUSY` (another connection held the lock past
//! the [busy timeout](SqliteStoreBuilder::busy_timeout)), `SQLITE_LOCKED`,
//! `SQLITE_PROTOCOL` (a lost WAL locking race) and `SQLITE_SCHEMA`.
//! Everything else, a read-only database, a full disk, a constraint, a
//! corrupt file, fails the day at once.
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

// Layout: `store.rs` holds `SqliteStore` and the one write (`apply_batch`),
// `builder.rs` opening, `schema.rs` the check of an existing table, `sql.rs`
// every SQL text, `error.rs` which SQLite errors are worth a retry.
mod builder;
mod error;
mod schema;
mod sql;
mod store;

pub use builder::SqliteStoreBuilder;
pub use store::SqliteStore;

/// The name this adapter gives itself in errors.
const BACKEND: &str = "sqlite";

/// How `event_date` is stored: `YYYY-MM-DD` text (a chrono format string).
pub const DATE_FORMAT: &str = "%Y-%m-%d";

/// How `updated_at` is stored: `YYYY-MM-DDTHH:MM:SS.ffffffZ` text, fixed
/// width, so byte order is time order (a chrono format string).
pub const INSTANT_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// The default table name.
pub const DEFAULT_TABLE: &str = "backfill_records";
