//! One write path for a pipeline's daily sync and its backfill.
//!
//! A daily job and a backfill job that share [`upsert`] converge to the same
//! stored state whatever you re-run: any day, any number of times, in any
//! order, one at a time or concurrently. No duplicate rows, no stale
//! re-delivery clobbering a newer row, and no bookkeeping of which days were
//! already backfilled.
//!
//! - A [`Record`] is a keyed, dated, versioned row, valid by construction.
//! - For one key, the version with the greatest
//!   `(updated_at, deleted, value, event_date)` wins ([`Record::supersedes`]);
//!   the order is total, so the winner never depends on arrival order.
//! - [`upsert`] (or [`upsert_stream`], for a day too large to hold)
//!   validates a day's records, collapses duplicate keys and hands the
//!   [`DayWrite`] to a [`Store`], which applies it in one transaction with
//!   its engine's own conditional upsert. Identical rows are not written.
//! - A [`Job`] ([`sync_day`], [`backfill`], and the daily
//!   [`Job::sync_with_lookback`]) fetches through your [`Fetch`] function
//!   and calls `upsert`; it holds no write logic of its own.
//!
//! Stores: [`MemoryStore`] here, `backfill-sqlite` and `backfill-postgres`
//! beside this crate, or your own: implement [`Store`] and run the
//! conformance suite (feature `conformance`) against it.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::{backfill, sync_day, MemoryStore, Record, Store};
//! use chrono::NaiveDate;
//!
//! // Your upstream call: the records of one day.
//! async fn fetch(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
//!     let at = day.and_hms_opt(23, 0, 0).unwrap().and_utc();
//!     Ok((0..3)
//!         .map(|i| Record::new(format!("order:{day}:{i}"), day, format!("{{\"n\":{i}}}"), at))
//!         .collect::<Result<_, _>>()
//!         .expect("valid records"))
//! }
//!
//! let store = MemoryStore::new();
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//!
//! let report = backfill(&store, &fetch, jan(1)..=jan(5)).await?;
//! assert_eq!(report.totals().inserted, 15);
//!
//! // Re-running anything writes nothing and changes nothing.
//! let rerun = backfill(&store, &fetch, jan(2)..=jan(4)).await?;
//! assert_eq!(rerun.totals().written(), 0);
//! let day = sync_day(&store, &fetch, jan(5)).await?;
//! assert_eq!(day.counts.unchanged, 3);
//! assert_eq!(store.rows().await?.len(), 15);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adapter;
pub mod check;
pub mod columns;
mod counts;
mod error;
mod fetch;
mod guard;
pub mod history;
mod job;
pub mod json;
mod ledger;
#[cfg(feature = "openlineage")]
#[cfg_attr(docsrs, doc(cfg(feature = "openlineage")))]
pub mod lineage;
mod memory;
mod record;
pub mod settings;
mod store;
mod stream;
pub mod text;
mod write;

#[cfg(any(feature = "conformance", test))]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;

pub use check::{CheckAction, Checks, Flag};
pub use counts::{Counts, Mode, UnknownMode};
pub use error::{BoxError, Error, Fatal, Field, Problem, Result, Transient};
pub use fetch::{Fetch, Fetched, RecordStream};
pub use guard::{Refusal, ReplaceGuard, DEFAULT_MAX_DELETE_FRACTION};
pub use history::HistoryRow;
pub use job::{
    backfill, sync_day, BackfillError, Clock, DayReport, DayStatus, Event, FailedDay, FixedClock,
    Job, NotSelected, ParseShardError, Retry, RunReport, Select, Shard, Status, StopHandle,
    SystemClock,
};
pub use ledger::{
    merge_acceptance, DayFailure, DayState, Digest, LedgerEntry, RunId, SyncStamp, SyncedDay,
    Timing, MAX_ERROR_BYTES, MAX_RUN_ID_BYTES,
};
pub use memory::{Applied, MemoryStore, PageCounts};
pub use record::{EventDates, Record, MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};
pub use store::Store;
pub use stream::{DayWrite, DEFAULT_STREAM_MEMORY};
pub use write::{upsert, upsert_stream, WriteOptions};

/// What the `conformance_tests!` macro's expansion needs, by a path that
/// resolves wherever it expands. Not public API.
#[cfg(any(feature = "conformance", test))]
#[doc(hidden)]
pub mod __private {
    pub use tokio;
}
