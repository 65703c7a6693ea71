//! The [`Store`] trait every adapter implements.

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use crate::counts::Counts;
use crate::error::{Error, Result};
use crate::history::{rows_as_of, HistoryRow};
use crate::ledger::{DayFailure, LedgerEntry};
use crate::record::Record;
use crate::stream::DayWrite;

/// Where records are kept: an in-memory map, a SQLite file, a Postgres table,
/// or your own adapter.
///
/// Stores do not decide *what* to write: [`upsert`](crate::upsert) and
/// [`upsert_stream`](crate::upsert_stream) validate and collapse a day's
/// records into a [`DayWrite`], and a store applies it with its engine's
/// own conditional upsert. A store must, in one transaction per day (all
/// of it or none of it):
///
/// 1. merge every record, tombstones included: insert an absent key,
///    overwrite a stored version only when the incoming one
///    [supersedes](Record::supersedes) it, and not write at all when the
///    stored version is identical or newer;
/// 2. apply the **watermark rule**: a live record that would be written and
///    whose `updated_at` is at or before the listing watermark of its own
///    `event_date` (as it was before this day's write) is written as its own
///    tombstone ([`Record::to_tombstone`]) instead;
/// 3. for a listing ([`Mode::Replace`](crate::Mode::Replace),
///    [`DayWrite::as_of`]): turn every live row of the day whose key is not
///    among its records and whose `updated_at` is at or before `as_of`
///    into its own tombstone (nothing is physically deleted), after asking
///    [`DayWrite::check_replace`] whether that many may go; then raise the
///    day's watermark to `as_of` if it is lower;
/// 4. serialize with concurrent writes on the days it touches
///    ([`DayWrite::days`] shared, a listing's own day exclusively, in date
///    order), reading watermarks after the lock;
/// 5. make each decision in the engine (`INSERT … ON CONFLICT … DO UPDATE
///    … WHERE`, `MERGE`), never by reading into Rust and writing back;
/// 6. refuse a record that breaks the record rules, failing the whole
///    day (a last line of defence: `upsert` never sends one);
/// 7. read every page ([`DayWrite::next_page`]) and report exact
///    [`Counts`], by what happened to each key;
/// 8. write the day's ledger row ([`DayWrite::synced`]) in the same
///    transaction: synced now, by this run, with these counts, its last
///    failure cleared.
///
/// [`MemoryStore`](crate::MemoryStore) is the reference: it does exactly
/// this, as plainly as it reads. Prove all of it by running the conformance
/// suite (the `conformance` feature) against your store.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Reads the stored version of `key` if it is live (`None` for an
    /// absent or deleted key).
    async fn get(&self, key: &str) -> Result<Option<Record>>;

    /// Reads every live row, ordered by key bytes.
    async fn rows(&self) -> Result<Vec<Record>>;

    /// Reads the live rows whose `event_date` is `day`, ordered by key
    /// bytes.
    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>>;

    /// Reads every stored version, tombstones included, ordered by key
    /// bytes: the state the convergence guarantee is about.
    async fn rows_with_tombstones(&self) -> Result<Vec<Record>>;

    /// Applies one day atomically, reading its pages one at a time (a
    /// day fetched whole is one page), and reports what happened to each
    /// key. `collapsed` is left at zero: the job fills it in. Pages arrive
    /// in key order with unique keys across the day, so each page's counts
    /// are exact on their own; a listing tombstones the day's live rows it
    /// lacks (those between and after the pages' keys) and asks
    /// [`DayWrite::check_replace`] before committing; the ledger row is
    /// [`DayWrite::synced`], after the last page. A store that applies a
    /// day in memory reads it with [`DayWrite::read_all`].
    async fn apply(&self, day: DayWrite) -> Result<Counts>;

    /// Removes the tombstones whose `updated_at` is before `before` and
    /// returns how many. A maintenance call, never made by a sync.
    ///
    /// It reopens one door: a stale re-delivery of a live version older
    /// than a purged tombstone finds the key absent and brings it back. Set
    /// `before` further back than the longest delay with which your
    /// upstream may re-deliver an old version.
    async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64>;

    /// Reads the ledger rows of the days in `days`, in day order; a day
    /// with no row is missing.
    async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>>;

    /// Records that `day` failed after its last attempt, in a transaction
    /// of its own, keeping its last success; the next successful apply
    /// clears it.
    async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()>;

    /// Marks `day` accepted by a person at `at` (`None`: takes the
    /// acceptance back), in a transaction of its own: the per-day
    /// [checks](crate::check) no longer flag or refuse it, whatever its
    /// count, through re-runs and failures. The acceptance is in the day's
    /// [`LedgerEntry::accepted`]; a day that never ran can be accepted
    /// ahead. Nothing else of the ledger or the rows changes.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] for a store that keeps no acceptance (what
    /// this default does); the store's error if it cannot write.
    async fn accept(&self, day: NaiveDate, at: Option<DateTime<Utc>>) -> Result<()> {
        let _ = (day, at);
        Err(Error::Unsupported("keep a day's acceptance"))
    }

    /// Reads every row of [history](crate::history): each version of each
    /// key with the instants it was valid between, ordered by key bytes,
    /// then `valid_from`.
    ///
    /// # Errors
    ///
    /// [`Error::HistoryOff`] for a store that keeps no history (what this
    /// default does).
    async fn history(&self) -> Result<Vec<HistoryRow>> {
        Err(Error::HistoryOff)
    }

    /// Reads the live rows as they were at `at`, by history: each key's
    /// version valid at that instant unless it was deleted, ordered by key
    /// bytes. Before the first version of a key, the key is absent.
    ///
    /// # Errors
    ///
    /// [`Error::HistoryOff`] for a store that keeps no history.
    async fn as_of(&self, at: DateTime<Utc>) -> Result<Vec<Record>> {
        Ok(rows_as_of(&self.history().await?, at))
    }
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<S: Store + ?Sized> Store for $ty {
            async fn get(&self, key: &str) -> Result<Option<Record>> {
                (**self).get(key).await
            }
            async fn rows(&self) -> Result<Vec<Record>> {
                (**self).rows().await
            }
            async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
                (**self).day_rows(day).await
            }
            async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
                (**self).rows_with_tombstones().await
            }
            async fn apply(&self, day: DayWrite) -> Result<Counts> {
                (**self).apply(day).await
            }
            async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
                (**self).purge_tombstones(before).await
            }
            async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
                (**self).ledger(days).await
            }
            async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
                (**self).record_failure(day, failure).await
            }
            async fn accept(&self, day: NaiveDate, at: Option<DateTime<Utc>>) -> Result<()> {
                (**self).accept(day, at).await
            }
            async fn history(&self) -> Result<Vec<HistoryRow>> {
                (**self).history().await
            }
            async fn as_of(&self, at: DateTime<Utc>) -> Result<Vec<Record>> {
                (**self).as_of(at).await
            }
        }
    )*};
}

forward_store!(&S, Box<S>, Arc<S>);
