//! **backfill**: one idempotent write path for a data pipeline's daily sync
//! and its backfill.
//!
//! This is the workspace's own facade, for its examples and cross-store
//! tests; it is not published. Applications depend on `backfill-core` plus
//! one store crate (`backfill-sqlite` or `backfill-postgres`): see the
//! README's install section. The facade re-exports [`backfill_core`]'s items
//! by name and, behind features, the stores: `sqlite` (default) as
//! [`sqlite`], `postgres` as [`postgres`]. Its features forward to the
//! crates': `serde`, `tls` (Postgres over TLS), `conformance`.
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

pub use backfill_core::{
    adapter, backfill, sync_day, upsert, upsert_stream, BackfillError, BoxError, Clock, Counts,
    DayFailure, DayReport, DayState, DayStatus, DayWrite, Digest, Error, Event, EventDates,
    FailedDay, Fetch, Fetched, Field, FixedClock, Job, LedgerEntry, MemoryStore, Mode, NotSelected,
    ParseShardError, Problem, Record, RecordStream, Refusal, ReplaceGuard, Result, Retry, RunId,
    RunReport, Select, Shard, Status, StopHandle, Store, SyncStamp, SyncedDay, SystemClock,
    Transient, WriteOptions, DEFAULT_STREAM_MEMORY, MAX_ERROR_BYTES, MAX_KEY_BYTES,
    MAX_RUN_ID_BYTES, MAX_YEAR, MIN_YEAR,
};

/// The conformance suite every store must pass (test support, exempt from
/// semver): [`backfill_core::conformance`].
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub use backfill_core::{conformance, conformance_tests};

/// The SQLite store ([`backfill_sqlite`]).
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite {
    pub use backfill_sqlite::{
        SqliteStore, SqliteStoreBuilder, DATE_FORMAT, DEFAULT_TABLE, INSTANT_FORMAT,
    };
}

/// The Postgres store ([`backfill_postgres`]).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use backfill_postgres::{
        deadpool_postgres, tokio_postgres, Difference, PostgresStore, PostgresStoreBuilder,
        TableMismatch, DEFAULT_PAGE_BYTES, DEFAULT_PAGE_ROWS, DEFAULT_SCHEMA, DEFAULT_TABLE,
        MAX_VALUE_BYTES,
    };
}
