//! [`MemoryStore`]: the reference store, and the oracle other stores are
//! compared to.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use crate::counts::Counts;
use crate::error::Result;
use crate::ledger::{DayFailure, Digest, LedgerEntry};
use crate::record::Record;
use crate::store::Store;
use crate::stream::DayWrite;

/// A store in a `BTreeMap`, written as plainly as the contract reads.
///
/// Good for tests, examples and as the oracle in differential tests: every
/// adapter must end with the same rows, tombstones included, as a
/// `MemoryStore` given the same batches.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    // Keyed by `String`, whose `Ord` is byte order, like the stores'
    // `COLLATE "C"`. Tombstones included.
    rows: BTreeMap<String, Record>,
    // The ledger: one entry per day synced or failed, with its listing
    // watermark.
    days: BTreeMap<NaiveDate, LedgerEntry>,
}

impl State {
    fn watermark(&self, day: NaiveDate) -> Option<DateTime<Utc>> {
        self.days
            .get(&day)
            .and_then(|entry| entry.listing_watermark)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-written: `apply`
        // decides everything before it mutates, and nothing after can fail.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A store holding `rows` (tombstones included, one per key: a later
    /// row of the same key replaces an earlier one) and the ledger
    /// `entries` (one per day, likewise).
    ///
    /// For a store that decides a day in memory: it loads the rows and
    /// ledger entries the day can touch, applies the day here with
    /// [`MemoryStore::apply_read`] and writes back what changed, so that its
    /// decisions are the reference's own.
    pub fn from_parts(
        rows: impl IntoIterator<Item = Record>,
        entries: impl IntoIterator<Item = LedgerEntry>,
    ) -> Self {
        let rows = rows
            .into_iter()
            .map(|row| (row.key().to_owned(), row))
            .collect();
        let days = entries
            .into_iter()
            .map(|entry| (entry.day, entry))
            .collect();
        Self {
            state: Mutex::new(State { rows, days }),
        }
    }

    /// Its rows in key order (tombstones included) and its ledger entries
    /// in day order, by value: what a store that decided a day here
    /// writes back, without a copy of each row.
    ///
    /// ```
    /// use backfill_core::{MemoryStore, Record};
    /// use chrono::{NaiveDate, TimeZone, Utc};
    ///
    /// # fn main() -> backfill_core::Result<()> {
    /// let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    /// let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    /// let store = MemoryStore::from_parts(
    ///     [Record::new("b", day, "2", at)?, Record::new("a", day, "1", at)?],
    ///     [],
    /// );
    /// let (rows, ledger) = store.into_parts();
    /// assert_eq!(rows.iter().map(Record::key).collect::<Vec<_>>(), ["a", "b"]);
    /// assert!(ledger.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn into_parts(self) -> (Vec<Record>, Vec<LedgerEntry>) {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (
            state.rows.into_values().collect(),
            state.days.into_values().collect(),
        )
    }

    /// [`Store::apply`] of a day whose records were already read from it
    /// ([`DayWrite::read_all`]): the same decisions, counts and ledger
    /// entry, and the day may be applied again (to another `MemoryStore`,
    /// as a store whose commit lost a race to another writer does).
    ///
    /// # Errors
    ///
    /// As [`Store::apply`]: a record that breaks the record rules, or the
    /// guard's refusal of a listing; nothing is changed then.
    pub fn apply_read(&self, day: &DayWrite, records: &[Record]) -> Result<Counts> {
        // Refuse the whole day before touching anything: atomic by
        // construction, since every decision is made before the first
        // mutation.
        for record in records {
            record.validate()?;
        }
        let mut state = self.lock();
        let mut writes: Vec<Record> = Vec::new();
        let mut counts = Counts::default();

        // 1–2. Merge each record; a live record that would be written at
        // or before its day's watermark (as it was before this write) is
        // written as its own tombstone.
        for record in records {
            let stored = state.rows.get(record.key());
            match stored {
                Some(stored) if stored == record => counts.unchanged += 1,
                Some(stored) if !record.supersedes(stored) => counts.stale += 1,
                _ => {
                    let watermark = state.watermark(record.event_date());
                    let written = match watermark {
                        Some(mark) if !record.is_deleted() && record.updated_at() <= mark => {
                            record.to_tombstone()
                        }
                        _ => record.clone(),
                    };
                    let was_live = stored.is_some_and(|s| !s.is_deleted());
                    match (written.is_deleted(), was_live) {
                        (true, _) => counts.deleted += 1,
                        (false, true) => counts.updated += 1,
                        (false, false) => counts.inserted += 1,
                    }
                    writes.push(written);
                }
            }
        }

        // 3. A listing: the day's live rows it lacks, not newer than
        // `as_of`, become their own tombstones.
        let mut unlisted = Vec::new();
        if let Some(as_of) = day.as_of() {
            let written: BTreeMap<&str, &Record> = writes.iter().map(|r| (r.key(), r)).collect();
            let mut live = 0u64;
            for (key, stored) in &state.rows {
                // The day's rows as they are after the merge above.
                let row = written.get(key.as_str()).copied().unwrap_or(stored);
                if row.is_deleted() || row.event_date() != day.day() {
                    continue;
                }
                live += 1;
                let listed = records
                    .binary_search_by(|r| r.key().cmp(key.as_str()))
                    .is_ok();
                if !listed && row.updated_at() <= as_of {
                    unlisted.push(row.to_tombstone());
                }
            }
            // Keys the merge made live that were not stored before.
            live += writes
                .iter()
                .filter(|r| {
                    !r.is_deleted()
                        && r.event_date() == day.day()
                        && !state.rows.contains_key(r.key())
                })
                .count() as u64;
            day.check_replace(unlisted.len() as u64, live)?;
            counts.deleted += unlisted.len() as u64;
            counts.unlisted = unlisted.len() as u64;
        }

        // Nothing below can fail.
        for row in writes.into_iter().chain(unlisted) {
            state.rows.insert(row.key().to_owned(), row);
        }
        let entry = state
            .days
            .entry(day.day())
            .or_insert_with(|| LedgerEntry::new(day.day()));
        if let Some(as_of) = day.as_of() {
            entry.listing_watermark = entry.listing_watermark.max(Some(as_of));
        }
        entry.synced = Some(day.synced(counts));
        entry.failure = None;
        Ok(counts)
    }

    /// The listing watermark of `day`: the latest `as_of` of a listing
    /// applied for it.
    pub fn listing_watermark(&self, day: NaiveDate) -> Option<DateTime<Utc>> {
        self.lock().watermark(day)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        Ok(self
            .lock()
            .rows
            .get(key)
            .filter(|r| !r.is_deleted())
            .cloned())
    }

    async fn rows(&self) -> Result<Vec<Record>> {
        let state = self.lock();
        Ok(state
            .rows
            .values()
            .filter(|r| !r.is_deleted())
            .cloned()
            .collect())
    }

    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        let state = self.lock();
        Ok(state
            .rows
            .values()
            .filter(|r| !r.is_deleted() && r.event_date() == day)
            .cloned()
            .collect())
    }

    async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
        Ok(self.lock().rows.values().cloned().collect())
    }

    async fn apply(&self, mut day: DayWrite) -> Result<Counts> {
        // The whole day in memory: this store holds everything there.
        let records = day.read_all()?;
        self.apply_read(&day, &records)
    }

    async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
        let mut state = self.lock();
        let mut touched = BTreeSet::new();
        let count = state.rows.len();
        state.rows.retain(|_, row| {
            let purged = row.is_deleted() && row.updated_at() < before;
            if purged {
                touched.insert(row.event_date());
            }
            !purged
        });
        let purged = (count - state.rows.len()) as u64;
        // The days whose tombstones went, and every day whose batch held
        // records of other days (one of them may be what it covered): their
        // digest no longer describes what is stored.
        if purged > 0 {
            for (day, entry) in state.days.iter_mut() {
                if let Some(synced) = entry.synced.as_mut() {
                    if touched.contains(day) || synced.digest.covers_other_days() {
                        synced.digest = Digest::PURGED;
                    }
                }
            }
        }
        Ok(purged)
    }

    async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
        Ok(self
            .lock()
            .days
            .range(days)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
        let mut state = self.lock();
        let entry = state
            .days
            .entry(day)
            .or_insert_with(|| LedgerEntry::new(day));
        entry.failure = Some(failure.clone());
        Ok(())
    }
}
