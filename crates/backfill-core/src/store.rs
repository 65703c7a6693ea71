//! The [`Store`] trait every adapter implements, and the [`Batch`] it applies.

use std::fmt;
use std::ops::{AddAssign, RangeInclusive};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use crate::error::{Error, Result};
use crate::ledger::{DayFailure, Digest, LedgerEntry, SyncStamp, SyncedDay};
use crate::record::Record;
use crate::stream::DayPages;

/// Where records are kept: an in-memory map, a SQLite file, a Postgres table,
/// or your own adapter.
///
/// Stores do not decide *what* to write: [`upsert`](crate::upsert) validates
/// and collapses a day's records into a [`Batch`], and a store applies that
/// batch with its engine's own conditional upsert. A store must, in one
/// transaction per batch (all of it or none of it):
///
/// 1. merge every record, tombstones included: insert an absent key,
///    overwrite a stored version only when the incoming one
///    [supersedes](Record::supersedes) it, and not write at all when the
///    stored version is identical or newer;
/// 2. apply the **watermark rule**: a live record that would be written and
///    whose `updated_at` is at or before the listing watermark of its own
///    `event_date` (as it was before this batch) is written as its own
///    tombstone ([`Record::to_tombstone`]) instead;
/// 3. for a listing ([`Mode::Replace`], [`Batch::as_of`]): turn every live
///    row of the batch's day whose key is not in the batch and whose
///    `updated_at` is at or before `as_of` into its own tombstone (nothing
///    is physically deleted), after asking [`Batch::check_replace`] whether
///    that many may go; then raise the day's watermark to `as_of` if it is
///    lower;
/// 4. serialize with concurrent batches on the days it touches
///    ([`Batch::days`] shared, a listing's own day exclusively, in date
///    order), reading watermarks after the lock;
/// 5. make each decision in the engine (`INSERT … ON CONFLICT … DO UPDATE
///    … WHERE`, `MERGE`), never by reading into Rust and writing back;
/// 6. refuse a record that breaks the record rules, failing the whole
///    batch (a last line of defence: `upsert` never sends one);
/// 7. report exact [`Counts`], by what happened to each key;
/// 8. write the day's ledger row ([`Batch::synced`]) in the same
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

    /// Applies one day's batch atomically and reports what happened to each
    /// key. `collapsed` is left at zero: `upsert` fills it in.
    async fn apply(&self, batch: &Batch) -> Result<Counts>;

    /// Applies a streamed day, read page by page, atomically: everything
    /// [`Store::apply`] does for a batch, in one transaction across every
    /// page, with the same result, counts and ledger row as the same
    /// records in one batch. Pages arrive in key order with unique keys,
    /// so each page's counts are exact on their own; a listing tombstones
    /// the day's live rows it lacks (those between and after the pages'
    /// keys) and asks [`DayPages::check_replace`] before committing; the
    /// ledger row is [`DayPages::synced`], after the last page. Every page
    /// must be read.
    ///
    /// The default reads every page into one [`Batch`] (the whole day in
    /// memory) and calls [`Store::apply`]; a store that can, overrides it
    /// to hold one page at a time.
    async fn apply_pages(&self, pages: &mut DayPages) -> Result<Counts> {
        let mut records = Vec::new();
        while let Some(page) = pages.next_page(usize::MAX, usize::MAX)? {
            records.extend(page);
        }
        let batch = pages.batch_of(records);
        self.apply(&batch).await
    }

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
            async fn apply(&self, batch: &Batch) -> Result<Counts> {
                (**self).apply(batch).await
            }
            async fn apply_pages(&self, pages: &mut DayPages) -> Result<Counts> {
                (**self).apply_pages(pages).await
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
        }
    )*};
}

forward_store!(&S, Box<S>, Arc<S>);

/// How a batch treats the live rows of its day that it does not mention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Mode {
    /// Keep them: only the batch's own keys are touched (the default).
    #[default]
    Merge,
    /// The batch is a **listing** of its day, true as of an instant
    /// ([`Batch::as_of`]): the day's live rows it lacks, and that are not
    /// newer than that instant, become tombstones (for upstreams that only
    /// list what exists). Guarded by [`ReplaceGuard`].
    Replace,
}

/// A validated day's batch, ready for [`Store::apply`].
///
/// Only [`upsert`](crate::upsert) builds one, so a store never sees an
/// unchecked record, a duplicate key, or records out of key order: keys are
/// unique and sorted by their bytes, which is also the order rows must be
/// written in, so that two writers with overlapping keys cannot deadlock.
///
/// Cloning is cheap (the records are shared), so a store may move a clone
/// onto another thread.
#[derive(Debug, Clone)]
pub struct Batch {
    day: NaiveDate,
    mode: Mode,
    as_of: DateTime<Utc>,
    guard: ReplaceGuard,
    collapsed: u64,
    digest: Digest,
    stamp: SyncStamp,
    // `Arc<Vec<_>>` rather than `Arc<[_]>`: wrapping takes the vector as
    // it is, where a slice would copy a million-record batch once more.
    records: Arc<Vec<Record>>,
}

impl Batch {
    /// `records` must already be sorted by key with unique keys.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        day: NaiveDate,
        mode: Mode,
        as_of: DateTime<Utc>,
        guard: ReplaceGuard,
        records: Vec<Record>,
        collapsed: u64,
        stamp: SyncStamp,
    ) -> Self {
        debug_assert!(records.windows(2).all(|w| w[0].key() < w[1].key()));
        Self {
            day,
            mode,
            as_of,
            guard,
            collapsed,
            digest: Digest::of(&records),
            stamp,
            records: Arc::new(records),
        }
    }

    /// The digest of the batch's records, for its ledger row.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// How many duplicate keys were collapsed away before the batch was
    /// built, for its ledger row's counts.
    pub fn collapsed(&self) -> u64 {
        self.collapsed
    }

    /// When, and by which run, the batch is applied, for its ledger row.
    pub fn stamp(&self) -> &SyncStamp {
        &self.stamp
    }

    /// The ledger row a successful apply of this batch writes for its day,
    /// in its own transaction, given what the apply did: synced now, by
    /// this run, no failure. (`listing_watermark` is left to the store,
    /// which raises it.)
    pub fn synced(&self, counts: Counts) -> SyncedDay {
        SyncedDay {
            at: self.stamp.at,
            run_id: self.stamp.run_id.clone(),
            mode: self.mode,
            as_of: self.as_of(),
            digest: self.digest,
            counts: Counts {
                collapsed: self.collapsed,
                ..counts
            },
        }
    }

    /// The day being synced.
    pub fn day(&self) -> NaiveDate {
        self.day
    }

    /// Merge or replace.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// For a listing ([`Mode::Replace`]), the instant it is true as of:
    /// live rows of the day it lacks are deleted only when they are not
    /// newer than this, and the day's watermark rises to it. `None` in
    /// merge mode.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        (self.mode == Mode::Replace).then_some(self.as_of)
    }

    /// The records, unique keys, sorted by key bytes.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// How many records the batch holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The days a store locks while applying this batch, in date order,
    /// without duplicates: the `event_date` of every record (shared: the
    /// watermarks of live records' days are read there, and a listing of
    /// one of these days must not interleave with the batch's writes to
    /// it). A listing also locks its own day, [`Batch::day`], exclusively.
    pub fn days(&self) -> Vec<NaiveDate> {
        let mut days: Vec<NaiveDate> = self.records.iter().map(Record::event_date).collect();
        days.sort_unstable();
        days.dedup();
        days
    }

    /// Whether a listing may turn `would_delete` of the day's `live` rows
    /// into tombstones, under the job's [`ReplaceGuard`]. A store asks
    /// inside its transaction, after merging the batch's own records, with
    /// the number of the day's live rows at that moment; on an error it
    /// rolls back and returns the error, so a refused replace writes
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ReplaceRefused`] when the guard refuses.
    pub fn check_replace(&self, would_delete: u64, live: u64) -> Result<()> {
        self.guard
            .check(self.day, self.is_empty(), would_delete, live)
    }
}

/// What one replace may delete: the guard against an upstream outage that
/// answers "200, no rows" wiping a day, or a bug that lists a fraction of
/// it.
///
/// By default an empty listing for a day that has live rows is refused,
/// and any fraction is allowed. Both can be changed:
///
/// ```
/// use backfill_core::ReplaceGuard;
///
/// // Refuse any replace that would delete more than 20% of a day.
/// let careful = ReplaceGuard::default().max_delete_fraction(0.2);
/// // A day may really become empty upstream.
/// let trusting = ReplaceGuard::default().allow_empty(true);
/// # let _ = (careful, trusting);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReplaceGuard {
    allow_empty: bool,
    max_delete_fraction: Option<f64>,
}

impl ReplaceGuard {
    /// No guard at all: every replace applies.
    pub fn off() -> Self {
        Self {
            allow_empty: true,
            max_delete_fraction: None,
        }
    }

    /// Whether an empty listing may delete a day's live rows (default
    /// false).
    pub fn allow_empty(mut self, allow: bool) -> Self {
        self.allow_empty = allow;
        self
    }

    /// The largest fraction (0 to 1) of a day's live rows one replace may
    /// delete (default: no limit). Values outside 0..=1 are clamped.
    pub fn max_delete_fraction(mut self, fraction: f64) -> Self {
        let fraction = if fraction.is_nan() { 0.0 } else { fraction };
        self.max_delete_fraction = Some(fraction.clamp(0.0, 1.0));
        self
    }

    pub(crate) fn check(
        &self,
        day: NaiveDate,
        empty: bool,
        would_delete: u64,
        live: u64,
    ) -> Result<()> {
        let refused = |reason| {
            Err(Error::ReplaceRefused {
                day,
                would_delete,
                live,
                reason,
            })
        };
        if would_delete == 0 {
            return Ok(());
        }
        if empty && !self.allow_empty {
            return refused(Refusal::EmptyListing);
        }
        if let Some(max) = self.max_delete_fraction {
            if would_delete as f64 > max * live as f64 {
                return refused(Refusal::TooLarge { max_fraction: max });
            }
        }
        Ok(())
    }
}

/// Why a [`ReplaceGuard`] refused a replace, in [`Error::ReplaceRefused`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// The listing was empty and the day has live rows.
    EmptyListing,
    /// The replace would delete more than this fraction of the day's live
    /// rows.
    TooLarge {
        /// The guard's limit.
        max_fraction: f64,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::EmptyListing => f.write_str("the listing is empty"),
            Refusal::TooLarge { max_fraction } => {
                write!(f, "more than {:.1}% of the day", max_fraction * 100.0)
            }
        }
    }
}

/// What applying a batch did, key by key.
///
/// Each record of the batch (after collapsing) lands in exactly one of
/// `inserted`, `updated`, `deleted`, `unchanged`, `stale`; a listing's
/// tombstones of rows it lacked are counted in `deleted` too, and also in
/// `unlisted`. `collapsed` counts the duplicates dropped before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Counts {
    /// Written, and the key is now live where it had no live row before
    /// (absent, or a tombstone).
    pub inserted: u64,
    /// Written, and the key was live before and is live after.
    pub updated: u64,
    /// Identical to the stored version: nothing written.
    pub unchanged: u64,
    /// Older than the stored version: skipped, nothing written.
    pub stale: u64,
    /// Written, and the key is now a tombstone: a tombstone record, a live
    /// record turned into its tombstone by the watermark rule, or a row a
    /// listing lacked.
    pub deleted: u64,
    /// Of `deleted`, the live rows of the day a listing lacked.
    pub unlisted: u64,
    /// Records not applied because the day's batch had the digest of its
    /// last successful apply ([`WriteOptions::skip_unchanged`](crate::WriteOptions::skip_unchanged)):
    /// nothing read, nothing written.
    pub skipped: u64,
    /// Duplicate keys inside the batch, dropped in favour of their winner.
    pub collapsed: u64,
}

impl Counts {
    /// Rows written: `inserted + updated + deleted`. Zero on a re-run.
    pub fn written(&self) -> u64 {
        self.inserted + self.updated + self.deleted
    }

    /// Records of the batch the store looked at: every count but the rows a
    /// listing lacked and the duplicates collapsed away.
    pub fn applied(&self) -> u64 {
        (self.inserted + self.updated + self.unchanged + self.stale + self.deleted + self.skipped)
            .saturating_sub(self.unlisted)
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, rhs: Self) {
        self.inserted += rhs.inserted;
        self.updated += rhs.updated;
        self.unchanged += rhs.unchanged;
        self.stale += rhs.stale;
        self.deleted += rhs.deleted;
        self.unlisted += rhs.unlisted;
        self.skipped += rhs.skipped;
        self.collapsed += rhs.collapsed;
    }
}
