//! The [`Store`] trait every adapter implements, and the [`Batch`] it applies.

use std::fmt;
use std::ops::AddAssign;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDate;

use crate::error::Result;
use crate::record::Record;

/// Where records are kept: an in-memory map, a SQLite file, a Postgres table,
/// or your own adapter.
///
/// Stores do not decide *what* to write: [`upsert`](crate::upsert) validates
/// and collapses a day's records into a [`Batch`], and a store applies that
/// batch with its engine's own conditional upsert. A store must:
///
/// - apply the whole batch in one transaction (all of it or none of it);
/// - insert absent keys, overwrite a stored row only when the incoming
///   version [supersedes](Record::supersedes) it, and not write at all when
///   the stored row is identical or newer;
/// - make that decision in the engine (`INSERT … ON CONFLICT … DO UPDATE …
///   WHERE`, `MERGE`), never by reading into Rust and writing back;
/// - in [`Mode::Replace`], then delete the rows of the batch's day whose key
///   is not in the batch;
/// - refuse a record that breaks the record rules, failing the whole batch
///   (a last line of defence: `upsert` never sends one);
/// - report exact [`Counts`].
///
/// Prove all of it by running the conformance suite (the `conformance`
/// feature) against your store.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Reads the stored version of `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<Record>>;

    /// Reads every row, ordered by key bytes.
    async fn rows(&self) -> Result<Vec<Record>>;

    /// Reads the rows whose `event_date` is `day`, ordered by key bytes.
    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>>;

    /// Applies one day's batch atomically and reports what happened to each
    /// record. `collapsed` is left at zero: `upsert` fills it in.
    async fn apply(&self, batch: &Batch) -> Result<Counts>;
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
            async fn apply(&self, batch: &Batch) -> Result<Counts> {
                (**self).apply(batch).await
            }
        }
    )*};
}

forward_store!(&S, Box<S>, Arc<S>);

/// How a batch treats the rows of its day that it does not mention.
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
    /// Delete them after the merge, so the day's partition ends up exactly
    /// what the fetch returned (for upstream deletes). A fetch that returns
    /// nothing for a day empties that day.
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
    // `Arc<Vec<_>>` rather than `Arc<[_]>`: wrapping takes the vector as
    // it is, where a slice would copy a million-record batch once more.
    records: Arc<Vec<Record>>,
}

impl Batch {
    /// `records` must already be sorted by key with unique keys.
    pub(crate) fn new(day: NaiveDate, mode: Mode, records: Vec<Record>) -> Self {
        debug_assert!(records.windows(2).all(|w| w[0].key() < w[1].key()));
        Self {
            day,
            mode,
            records: Arc::new(records),
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
}

/// What applying a batch did, record by record.
///
/// `inserted + updated + unchanged + stale` is the number of records in the
/// batch after collapsing; `collapsed` counts the duplicates dropped before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Counts {
    /// Keys that were absent and are now stored.
    pub inserted: u64,
    /// Stored rows that the incoming version superseded.
    pub updated: u64,
    /// Records identical to the stored row: nothing written.
    pub unchanged: u64,
    /// Records older than the stored row: skipped, nothing written.
    pub stale: u64,
    /// Rows of the day removed by [`Mode::Replace`].
    pub deleted: u64,
    /// Duplicate keys inside the batch, dropped in favour of their winner.
    pub collapsed: u64,
}

impl Counts {
    /// Rows written: `inserted + updated + deleted`. Zero on a re-run.
    pub fn written(&self) -> u64 {
        self.inserted + self.updated + self.deleted
    }

    /// Records the store looked at: `inserted + updated + unchanged + stale`.
    pub fn applied(&self) -> u64 {
        self.inserted + self.updated + self.unchanged + self.stale
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, rhs: Self) {
        self.inserted += rhs.inserted;
        self.updated += rhs.updated;
        self.unchanged += rhs.unchanged;
        self.stale += rhs.stale;
        self.deleted += rhs.deleted;
        self.collapsed += rhs.collapsed;
    }
}
