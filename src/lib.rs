//! **backfill**: one idempotent write path for a data pipeline's daily sync
//! and its backfill.
//!
//! This facade re-exports [`backfill_core`] and, behind features, the stores:
//! `sqlite` (default) as `sqlite`, `postgres` as `postgres`. See the
//! [README](https://github.com/backfill-rs/backfill#readme) for the pattern
//! and its guarantees.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill::Result<()> {
//! use backfill::sqlite::SqliteStore;
//! use backfill::{backfill, Record, Store};
//! use chrono::NaiveDate;
//!
//! async fn fetch(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
//!     let at = day.and_hms_opt(6, 0, 0).unwrap().and_utc();
//!     Ok(vec![Record::new(format!("user:{day}"), day, "{}", at).unwrap()])
//! }
//!
//! let store = SqliteStore::open_in_memory().await?;
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//! backfill(&store, &fetch, jan(1)..=jan(3)).await?;
//! let rerun = backfill(&store, &fetch, jan(1)..=jan(3)).await?;
//! assert_eq!(rerun.totals().written(), 0);
//! assert_eq!(store.rows().await?.len(), 3);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

pub use backfill_core::*;

/// The SQLite store ([`backfill_sqlite`]).
#[cfg(feature = "sqlite")]
pub mod sqlite {
    pub use backfill_sqlite::*;
}

/// The Postgres store ([`backfill_postgres`]).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use backfill_postgres::*;
}
