//! [`MemoryStore`]: the reference store, and the oracle other stores are
//! compared to.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use crate::counts::Counts;
use crate::error::{Error, Result};
use crate::history::{
    first_listing_from, history_of, one_per_instant, HistoryParts, HistoryRow, Version,
};
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
    // Every version and listing, when the store keeps history.
    history: Option<History>,
}

/// What history is made of ([`crate::history`]): every version, one per
/// `(key, updated_at)`, and every listing instant of every day.
#[derive(Debug, Default)]
struct History {
    versions: BTreeMap<(String, DateTime<Utc>), Version>,
    listings: BTreeSet<(NaiveDate, DateTime<Utc>)>,
}

impl History {
    /// Keeps the versions of a day's `records` (sorted by key, unique) and,
    /// for a listing, what it lacked.
    fn record(&mut self, day: &DayWrite, records: &[Record]) {
        let listing = day.as_of();
        for record in records {
            let at = record.updated_at();
            let slot = (record.key().to_owned(), at);
            match self.versions.get_mut(&slot) {
                Some(stored) if !record.supersedes(&stored.record) => {}
                Some(stored) if stored.record.event_date() == record.event_date() => {
                    stored.record = record.clone();
                }
                _ => {
                    // Every listing of its day applied so far lacked it
                    // (one that held it would have delivered it); this
                    // write's own listing is applied below.
                    let event_date = record.event_date();
                    let absent_from =
                        first_listing_from(self.listings.range((event_date, at)..), event_date, at);
                    let version = Version {
                        record: record.clone(),
                        absent_from,
                    };
                    self.versions.insert(slot, version);
                }
            }
        }
        if let Some(as_of) = listing {
            for ((key, at), version) in self.versions.iter_mut() {
                let lacked = version.record.event_date() == day.day()
                    && *at <= as_of
                    && version.absent_from.is_none_or(|from| from > as_of)
                    && !matches!(
                        records.binary_search_by(|r| r.key().cmp(key)),
                        Ok(i) if records[i].updated_at() == *at
                    );
                if lacked {
                    version.absent_from = Some(as_of);
                }
            }
            self.listings.insert((day.day(), as_of));
        }
    }

    fn rows(&self) -> Vec<HistoryRow> {
        let versions: Vec<Version> = self.versions.values().cloned().collect();
        history_of(&versions)
    }

    fn from_parts(parts: HistoryParts) -> Self {
        Self {
            versions: one_per_instant(parts.versions)
                .into_iter()
                .map(|v| ((v.record.key().to_owned(), v.record.updated_at()), v))
                .collect(),
            listings: parts.listings.into_iter().collect(),
        }
    }

    fn into_parts(self) -> HistoryParts {
        HistoryParts {
            versions: self.versions.into_values().collect(),
            listings: self.listings.into_iter().collect(),
        }
    }
}

/// What [`MemoryStore::apply_into_all`] leaves: the day's counts, and the
/// store's rows (key order), ledger entries (day order) and, when it keeps
/// history, history's parts.
#[derive(Debug)]
pub struct Applied {
    /// The day's counts.
    pub counts: Counts,
    /// Every row, tombstones included, in key order.
    pub rows: Vec<Record>,
    /// Every ledger entry, in day order.
    pub ledger: Vec<LedgerEntry>,
    /// History's versions and listings, when the store keeps history.
    pub history: Option<HistoryParts>,
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

    /// An empty store that keeps [history](crate::history): every version
    /// it is given, read back with [`Store::history`] and
    /// [`Store::as_of`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
    /// use backfill_core::{upsert, MemoryStore, Record, Store, WriteOptions};
    /// use chrono::{NaiveDate, TimeZone, Utc};
    ///
    /// let store = MemoryStore::with_history();
    /// let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
    /// let at = |h| Utc.with_ymd_and_hms(2026, 3, 1, h, 0, 0).unwrap();
    /// let new = vec![Record::new("order:1", day, "paid", at(12))?];
    /// let old = vec![Record::new("order:1", day, "open", at(9))?];
    /// upsert(&store, day, new, WriteOptions::default()).await?;
    /// // A stale re-delivery: the live row keeps "paid", history slots it in.
    /// upsert(&store, day, old, WriteOptions::default()).await?;
    ///
    /// assert_eq!(store.get("order:1").await?.unwrap().value(), "paid");
    /// assert_eq!(store.as_of(at(10)).await?[0].value(), "open");
    /// assert_eq!(store.history().await?.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn with_history() -> Self {
        let state = State {
            history: Some(History::default()),
            ..State::default()
        };
        Self {
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-written: `apply`
        // decides everything before it mutates, and nothing after can fail.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The state, taken out of the store.
    fn into_state(self) -> State {
        self.state
            .into_inner()
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
            state: Mutex::new(State {
                rows,
                days,
                history: None,
            }),
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
        let state = self.into_state();
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
        let mut state = self.lock();
        let decided = decide_guarded(&state, day, records)?;
        let counts = decided.counts;
        decided.write(&mut state);
        if let Some(history) = state.history.as_mut() {
            history.record(day, records);
        }
        synced(&mut state, day, counts);
        Ok(counts)
    }

    /// [`MemoryStore::apply_read`], then [`MemoryStore::into_parts`]: the
    /// counts, and the rows and ledger entries the day leaves, for a store
    /// that decides a day here and writes back what it leaves. The same
    /// decisions; when this store holds no row (a day into an empty
    /// table), its rows are the day's writes as decided, without a map.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::apply_read`].
    pub fn apply_into_parts(
        self,
        day: &DayWrite,
        records: &[Record],
    ) -> Result<(Counts, Vec<Record>, Vec<LedgerEntry>)> {
        let applied = self.apply_into_all(day, records)?;
        Ok((applied.counts, applied.rows, applied.ledger))
    }

    /// This store keeping history, from `parts`: the versions and listings
    /// of the days a write reads, for a store that keeps each day's share
    /// of history beside the day ([`HistoryParts`] says why that is
    /// enough). Of versions of one instant of a key, the one that wins is
    /// kept.
    pub fn with_history_parts(self, parts: HistoryParts) -> Self {
        let mut state = self.into_state();
        state.history = Some(History::from_parts(parts));
        Self {
            state: Mutex::new(state),
        }
    }

    /// [`MemoryStore::apply_into_parts`], with history's parts too when
    /// this store keeps history.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::apply_read`].
    pub fn apply_into_all(self, day: &DayWrite, records: &[Record]) -> Result<Applied> {
        let mut state = self.into_state();
        let decided = decide_guarded(&state, day, records)?;
        let counts = decided.counts;
        synced(&mut state, day, counts);
        if let Some(history) = state.history.as_mut() {
            history.record(day, records);
        }
        let rows = if state.rows.is_empty() {
            // In key order already, as the records are; nothing stored,
            // so nothing unlisted.
            debug_assert!(decided.unlisted.is_empty());
            decided.writes
        } else {
            decided.write(&mut state);
            std::mem::take(&mut state.rows).into_values().collect()
        };
        Ok(Applied {
            counts,
            rows,
            ledger: state.days.into_values().collect(),
            history: state.history.map(History::into_parts),
        })
    }

    /// One page of a day decided here, for a store that decides a day too
    /// large for memory page by page ([`DayWrite::next_page`]): this store
    /// holds the day's stored rows in the page's key range (after the
    /// previous page's last key, up to and including its own last key; the
    /// last page's range runs to the end) and the stored rows of the
    /// page's keys in other days, with their days' ledger entries.
    ///
    /// It merges the page and, for a listing, turns the day's live rows
    /// of the range the page lacks into tombstones, as
    /// [`MemoryStore::apply_read`] would; it neither asks the guard nor
    /// writes the ledger entry: the pages' counts add up to the day's,
    /// with which the store asks [`DayWrite::check_replace`] and finishes
    /// with [`MemoryStore::finish_day`].
    ///
    /// # Errors
    ///
    /// A record that breaks the record rules; nothing is changed then.
    pub fn apply_page(&self, day: &DayWrite, page: &[Record]) -> Result<PageCounts> {
        let mut state = self.lock();
        let decided = decide(&state, day, page)?;
        let counts = PageCounts {
            counts: decided.counts,
            live: decided.live,
        };
        decided.write(&mut state);
        Ok(counts)
    }

    /// The day's ledger entry after its last page, as
    /// [`MemoryStore::apply_read`] leaves it: synced by this write with
    /// `counts` (every page's), its failure cleared and, for a listing, its
    /// watermark raised to the listing's instant. This store holds the
    /// day's entry as it was before the write, if it had one.
    pub fn finish_day(&self, day: &DayWrite, counts: Counts) {
        synced(&mut self.lock(), day, counts);
    }

    /// The listing watermark of `day`: the latest `as_of` of a listing
    /// applied for it.
    pub fn listing_watermark(&self, day: NaiveDate) -> Option<DateTime<Utc>> {
        self.lock().watermark(day)
    }
}

/// What one page of a day did ([`MemoryStore::apply_page`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// What happened to the page's keys; for a listing, `unlisted` (and
    /// `deleted`) count the day's live rows of the page's range it lacks.
    pub counts: Counts,
    /// For a listing, the day's live rows of the page's range after its
    /// merge, before its tombstones: what the guard weighs them against.
    pub live: u64,
}

/// What a day's records (or one page of them) change, decided before
/// anything is.
struct Decided {
    writes: Vec<Record>,
    unlisted: Vec<Record>,
    counts: Counts,
    live: u64,
}

impl Decided {
    /// Writes it; nothing here can fail.
    fn write(self, state: &mut State) {
        for row in self.writes.into_iter().chain(self.unlisted) {
            state.rows.insert(row.key().to_owned(), row);
        }
    }
}

/// [`decide`] a whole day, then ask the guard about a listing's deletes.
fn decide_guarded(state: &State, day: &DayWrite, records: &[Record]) -> Result<Decided> {
    let decided = decide(state, day, records)?;
    if day.as_of().is_some() {
        day.check_replace(decided.counts.unlisted, decided.live)?;
    }
    Ok(decided)
}

/// The decisions of `records`, of `day`, on `state`: refused whole before
/// anything is written.
fn decide(state: &State, day: &DayWrite, records: &[Record]) -> Result<Decided> {
    for record in records {
        record.validate()?;
    }
    let mut writes: Vec<Record> = Vec::new();
    let mut counts = Counts::default();

    // 1–2. Merge each record; a live record that would be written at or
    // before its day's watermark (as it was before this write) is written
    // as its own tombstone.
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

    // 3. A listing: the day's live rows it lacks, not newer than `as_of`,
    // become their own tombstones.
    let mut unlisted = Vec::new();
    let mut live = 0u64;
    if let Some(as_of) = day.as_of() {
        let written: BTreeMap<&str, &Record> = writes.iter().map(|r| (r.key(), r)).collect();
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
                !r.is_deleted() && r.event_date() == day.day() && !state.rows.contains_key(r.key())
            })
            .count() as u64;
        counts.deleted += unlisted.len() as u64;
        counts.unlisted = unlisted.len() as u64;
    }
    Ok(Decided {
        writes,
        unlisted,
        counts,
        live,
    })
}

/// The day's ledger entry once it is applied with `counts`.
fn synced(state: &mut State, day: &DayWrite, counts: Counts) {
    let entry = state
        .days
        .entry(day.day())
        .or_insert_with(|| LedgerEntry::new(day.day()));
    if let Some(as_of) = day.as_of() {
        entry.listing_watermark = entry.listing_watermark.max(Some(as_of));
    }
    entry.synced = Some(day.synced(counts));
    entry.failure = None;
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

    async fn history(&self) -> Result<Vec<HistoryRow>> {
        let state = self.lock();
        Ok(state.history.as_ref().ok_or(Error::HistoryOff)?.rows())
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

    async fn accept(&self, day: NaiveDate, at: Option<DateTime<Utc>>) -> Result<()> {
        let mut state = self.lock();
        let entry = state
            .days
            .entry(day)
            .or_insert_with(|| LedgerEntry::new(day));
        entry.accepted = at;
        if *entry == LedgerEntry::new(day) {
            state.days.remove(&day);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::Mode;
    use crate::ledger::SyncStamp;
    use crate::write::{streamed_day, WriteOptions};
    use chrono::TimeZone;
    use futures_util::stream;

    fn at(hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 2, hour, 0, 0).unwrap()
    }

    /// A day decided page by page, each page on a store holding the day's
    /// stored rows of the page's key range and the stored rows of its keys
    /// in other days, ends as the same day decided whole: rows, counts and
    /// ledger entry; and a rewound day reads the same pages again.
    #[tokio::test]
    async fn a_day_decided_page_by_page_is_the_day_decided_whole() {
        let day = NaiveDate::from_ymd_opt(2026, 1, 2).unwrap();
        let other = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let mut stored = Vec::new();
        for i in 0..30 {
            let row = Record::new(format!("k{i:02}"), day, format!("old {i}"), at(1)).unwrap();
            stored.push(if i % 7 == 0 { row.to_tombstone() } else { row });
        }
        for i in 0..5 {
            stored.push(Record::new(format!("k{i:02}m"), other, "there", at(1)).unwrap());
        }
        // After every record's key: decided in the last range only.
        stored.push(Record::new("z", day, "last", at(1)).unwrap());
        let mut records = Vec::new();
        for i in (0..30).step_by(3) {
            let hour = if i % 2 == 0 { 2 } else { 0 };
            records.push(Record::new(format!("k{i:02}"), day, "new", at(hour)).unwrap());
        }
        for i in 0..5 {
            records.push(Record::new(format!("k{i:02}m"), day, "moved", at(3)).unwrap());
            records.push(Record::new(format!("n{i}"), day, "fresh", at(3)).unwrap());
        }
        let mut ledger = LedgerEntry::new(day);
        ledger.listing_watermark = Some(at(0));
        for mode in [Mode::Merge, Mode::Replace] {
            let options = WriteOptions::default()
                .mode(mode)
                .as_of(at(5))
                .stream_memory(1);
            let write = || async {
                let chunks = records.chunks(4).map(|c| Ok(c.to_vec()));
                let stamp = || SyncStamp {
                    at: at(6),
                    run_id: None,
                };
                streamed_day(day, Box::pin(stream::iter(chunks)), options, stamp)
                    .await
                    .unwrap()
            };
            // Whole.
            let whole = MemoryStore::from_parts(stored.clone(), [ledger.clone()]);
            let mut all = write().await;
            let read = all.read_all().unwrap();
            let expected = whole.apply_read(&all, &read).unwrap();

            // Page by page.
            let mut paged = write().await;
            let mut state: BTreeMap<String, Record> = stored
                .iter()
                .map(|r| (r.key().to_owned(), r.clone()))
                .collect();
            let (mut counts, mut live, mut after) = (Counts::default(), 0, None::<String>);
            for pass in 0..2 {
                if pass == 1 {
                    assert!(paged.rewind().unwrap());
                    assert_eq!((paged.read(), paged.is_done()), (0, false));
                }
                // Each page's range ends at its last key; once no page is
                // left, a last range with no record runs to the end.
                let mut pages = Vec::new();
                while let Some(page) = paged.next_page(4, usize::MAX).unwrap() {
                    let last = page.last().map(|r| r.key().to_owned());
                    pages.push((page, last));
                }
                pages.push((Vec::new(), None));
                for (page, last) in pages {
                    if pass == 0 {
                        continue;
                    }
                    let in_range = |key: &str| {
                        after.as_deref().is_none_or(|a| key > a)
                            && last.as_deref().is_none_or(|l| key <= l)
                    };
                    let rows: Vec<Record> = state
                        .values()
                        .filter(|r| {
                            (r.event_date() == day && in_range(r.key()))
                                || page.iter().any(|p| p.key() == r.key())
                        })
                        .cloned()
                        .collect();
                    let range = MemoryStore::from_parts(rows, [ledger.clone()]);
                    let done = range.apply_page(&paged, &page).unwrap();
                    counts += done.counts;
                    live += done.live;
                    for row in range.into_parts().0 {
                        state.insert(row.key().to_owned(), row);
                    }
                    after = last;
                }
                after = None;
            }
            if mode == Mode::Replace {
                paged.check_replace(counts.unlisted, live).unwrap();
            }
            let finished = MemoryStore::from_parts([], [ledger.clone()]);
            finished.finish_day(&paged, counts);
            assert_eq!(counts, expected, "{mode:?}");
            assert!(counts.unlisted > 0 || mode == Mode::Merge);
            let (rows, entries) = whole.into_parts();
            assert_eq!(state.into_values().collect::<Vec<_>>(), rows, "{mode:?}");
            assert_eq!(finished.into_parts().1, entries, "{mode:?}");
        }
    }

    /// A day decided into parts leaves the rows, ledger and counts of the
    /// same day applied, into an empty store and into one holding rows.
    #[tokio::test]
    async fn a_day_decided_into_parts_is_the_day_applied() {
        let day = NaiveDate::from_ymd_opt(2026, 1, 2).unwrap();
        let mut ledger = LedgerEntry::new(day);
        ledger.listing_watermark = Some(at(1));
        let records: Vec<Record> = (0..10)
            .map(|i| {
                let record = Record::new(format!("k{i}"), day, "v", at(i)).unwrap();
                if i % 4 == 0 {
                    record.to_tombstone()
                } else {
                    record
                }
            })
            .collect();
        let stored = [
            Record::new("k3", day, "old", at(5)).unwrap(),
            Record::new("j", day, "x", at(0)).unwrap(),
        ];
        for held in [Vec::new(), stored.to_vec()] {
            for mode in [Mode::Merge, Mode::Replace] {
                let options = WriteOptions::default().mode(mode).as_of(at(3));
                let stamp = SyncStamp {
                    at: at(6),
                    run_id: None,
                };
                let mut write =
                    crate::write::whole_day(day, records.clone(), options, stamp).unwrap();
                let read = write.read_all().unwrap();
                let applied = MemoryStore::from_parts(held.clone(), [ledger.clone()]);
                let counts = applied.apply_read(&write, &read).unwrap();
                let parts = MemoryStore::from_parts(held.clone(), [ledger.clone()])
                    .apply_into_parts(&write, &read)
                    .unwrap();
                let (rows, entries) = applied.into_parts();
                assert_eq!(
                    parts,
                    (counts, rows, entries),
                    "{mode:?}, holding {}",
                    held.len()
                );
            }
        }
    }
}
