//! **backfill**: one idempotent write path for a data pipeline's daily sync
//! and its backfill.
//!
//! This is the workspace's own facade, for its examples and cross-store
//! tests; it is not published. Applications depend on `backfill-core` plus
//! one store crate (`backfill-sqlite` or `backfill-postgres`): see the
//! README's install section. The facade re-exports every item of
//! [`backfill_core`] and, behind features, each store crate whole: `sqlite`
//! (default) as [`sqlite`], `postgres` as [`postgres`]. Its features forward
//! to the crates': `serde`, `tls` (Postgres over TLS), `conformance` (the
//! suite and its fixtures, as `backfill::conformance`).
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
#![cfg_attr(docsrs, feature(doc_cfg))]

// Whole crates, not lists of names: an item a crate adds is here at once,
// so the facade cannot fall behind the crates it stands for.
pub use backfill_core::*;

/// The SQLite store: the whole of [`backfill_sqlite`].
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use backfill_sqlite as sqlite;

/// The Postgres store: the whole of [`backfill_postgres`].
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use backfill_postgres as postgres;

#[cfg(feature = "delta")]
#[cfg_attr(docsrs, doc(cfg(feature = "delta")))]
pub use backfill_delta as delta;
