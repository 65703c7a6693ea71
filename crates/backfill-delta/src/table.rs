//! The table as one snapshot sees it: its data files by day, and their rows.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use backfill_core::{LedgerEntry, Record};
use chrono::NaiveDate;
use deltalake::kernel::Remove;
use deltalake::logstore::parquet_reader::ParquetObjectReader;
use deltalake::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use deltalake::{DeltaTable, ObjectStore, Path};
use futures_util::{stream, StreamExt, TryStreamExt};
use std::sync::Arc;

use crate::error::{backend, corrupt, Result};
use crate::rows::{batch_rows, DayHistory, Row, EVENT_DATE, KEY, LEDGER_PREFIX};

/// How many files are read at once.
const READ_AHEAD: usize = 8;

/// One active data file of a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct DataFile {
    /// Its path in the table's object store.
    pub(crate) path: Path,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its partition.
    pub(crate) day: NaiveDate,
    /// The smallest and largest key of its statistics, if it has them
    /// (and its largest is not truncated).
    pub(crate) keys: Option<(String, String)>,
    /// The smallest key of its statistics (or a prefix of it), if it has
    /// them.
    pub(crate) min_key: Option<String>,
    /// How many rows it holds, by its statistics.
    pub(crate) rows: Option<u64>,
    /// The action that removes it.
    pub(crate) remove: Remove,
}

impl DataFile {
    /// Whether the file may hold a ledger row (the smallest key of a file
    /// that holds one is the ledger row's: history rows sort after it; a
    /// file without statistics may).
    pub(crate) fn may_hold_ledger(&self) -> bool {
        self.min_key.as_ref().is_none_or(|min| {
            min.starts_with(LEDGER_PREFIX) || LEDGER_PREFIX.starts_with(min.as_str())
        })
    }

    /// Whether the file may hold a record whose key is in `first..=last`.
    pub(crate) fn may_hold_keys(&self, first: &str, last: &str) -> bool {
        self.keys
            .as_ref()
            .is_none_or(|(min, max)| min.as_str() <= last && first <= max.as_str())
    }
}

/// The active files of one snapshot, by day.
#[derive(Debug, Default)]
pub(crate) struct Files {
    pub(crate) by_day: BTreeMap<NaiveDate, Vec<DataFile>>,
}

impl Files {
    /// The files of `table`'s loaded snapshot.
    pub(crate) fn of(table: &DeltaTable) -> Result<Self> {
        let snapshot = table.snapshot().map_err(backend)?;
        let mut files = Files::default();
        for view in snapshot.log_data().iter() {
            if view.deletion_vector_descriptor().is_some() {
                return Err(corrupt(format!(
                    "{} has a deletion vector, which this store does not apply: purge them \
                     (`REORG TABLE … APPLY (PURGE)`) or turn them off for this table",
                    view.path()
                )));
            }
            let partition = view.partition_values_map();
            let day = partition
                .get(EVENT_DATE)
                .and_then(|value| value.as_deref())
                .ok_or_else(|| corrupt(format!("{} has no event_date", view.path())))?;
            let day: NaiveDate = day
                .parse()
                .map_err(|e| corrupt(format!("{}: event_date {day:?}: {e}", view.path())))?;
            let (min_key, keys) = view
                .stats()
                .map(|stats| key_range(&stats))
                .unwrap_or_default();
            files.by_day.entry(day).or_default().push(DataFile {
                path: view.object_store_path(),
                size: view.size().max(0) as u64,
                day,
                keys,
                min_key,
                rows: view.num_records().map(|n| n as u64),
                remove: view.remove_action(true),
            });
        }
        Ok(files)
    }

    /// The files of `day`.
    pub(crate) fn of_day(&self, day: NaiveDate) -> &[DataFile] {
        self.by_day.get(&day).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every file.
    pub(crate) fn all(&self) -> impl Iterator<Item = &DataFile> {
        self.by_day.values().flatten()
    }
}

/// The smallest key in a file's statistics, and its smallest and largest
/// when both bound its keys.
fn key_range(stats: &str) -> (Option<String>, Option<(String, String)>) {
    let Ok(stats) = serde_json::from_str::<serde_json::Value>(stats) else {
        return (None, None);
    };
    let key = |of: &str| Some(stats.get(of)?.get(KEY)?.as_str()?.to_owned());
    let (min, max) = (key("minValues"), key("maxValues"));
    // Statistics may truncate a long key: a truncated minimum is a prefix
    // of the smallest key, still a lower bound; the maximum is then no
    // bound.
    // A maximum starting with a NUL, truncated or not, bounds a file of the
    // store's own rows, whose keys all do (no record's key holds a NUL).
    let range = min
        .clone()
        .zip(max)
        .filter(|(_, max)| max.chars().count() < 32 || max.starts_with('\0'));
    (min, range)
}

/// What a day's files hold.
#[derive(Debug, Default)]
pub(crate) struct DayRows {
    /// Its records, tombstones included, by key.
    pub(crate) records: BTreeMap<String, Record>,
    /// Its ledger entry.
    pub(crate) ledger: Option<LedgerEntry>,
    /// Its share of history (empty for a table that keeps none).
    pub(crate) history: DayHistory,
    /// Its files, and what each holds.
    pub(crate) files: Vec<(DataFile, Kinds)>,
}

/// The kinds of row a file holds. The store writes each kind to files of
/// its own; another engine's compaction may put them together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Kinds {
    pub(crate) records: bool,
    pub(crate) ledger: bool,
    pub(crate) history: bool,
}

impl Kinds {
    /// Whether it holds more than one kind.
    pub(crate) fn mixed(self) -> bool {
        u8::from(self.records) + u8::from(self.ledger) + u8::from(self.history) > 1
    }

    /// Whether it holds none.
    pub(crate) fn none(self) -> bool {
        !(self.records || self.ledger || self.history)
    }
}

/// The keys a day's write brings, to look for in other days' files: a
/// key moving between days.
#[derive(Debug)]
pub(crate) struct Probe<'a> {
    /// Their hashes, sorted.
    hashes: Vec<u64>,
    /// The keys, in the order of their hashes; `None` for a probe of
    /// hashes only, which takes a hash's match for the key's.
    keys: Option<Vec<&'a str>>,
}

impl<'a> Probe<'a> {
    pub(crate) fn new(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut hashed: Vec<(u64, &str)> =
            keys.into_iter().map(|key| (key_hash(key), key)).collect();
        hashed.sort_unstable();
        hashed.dedup();
        let (hashes, keys) = hashed.into_iter().unzip();
        Probe {
            hashes,
            keys: Some(keys),
        }
    }

    /// A probe of keys by their hashes ([`key_hash`]) only: 8 bytes a key
    /// whatever its length, for the keys of a day too large to hold. A
    /// key whose hash it holds is taken as one of its keys (at worst a
    /// write is decided again for nothing).
    pub(crate) fn of_hashes(mut hashes: Vec<u64>) -> Probe<'static> {
        hashes.sort_unstable();
        hashes.dedup();
        Probe { hashes, keys: None }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Its keys' hashes, sorted, each once.
    pub(crate) fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Whether `key` is one of its keys.
    fn contains(&self, key: &str) -> bool {
        let hash = key_hash(key);
        let from = self.hashes.partition_point(|h| *h < hash);
        let Some(keys) = &self.keys else {
            return self.hashes.get(from) == Some(&hash);
        };
        self.hashes[from..]
            .iter()
            .zip(&keys[from..])
            .take_while(|(h, _)| **h == hash)
            .any(|(_, k)| *k == key)
    }
}

/// A key's hash (XXH3, unseeded, so a probe's and a file's agree): what
/// probes compare before they compare keys.
pub(crate) fn key_hash(key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes())
}

/// Whether two sorted lists share a value.
fn meet(a: &[u64], b: &[u64]) -> bool {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if small.len().saturating_mul(16) < large.len() {
        return small.iter().any(|h| large.binary_search(h).is_ok());
    }
    let (mut i, mut j) = (0, 0);
    while i < small.len() && j < large.len() {
        match small[i].cmp(&large[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => return true,
        }
    }
    false
}

/// Every row of one data file, with the sorted hashes of its records'
/// keys: a probe for keys compares hashes first, and keys only on a match.
#[derive(Debug)]
pub(crate) struct FileRows {
    pub(crate) rows: Vec<Row>,
    hashes: Vec<u64>,
    /// About how many bytes it takes in memory.
    size: usize,
}

impl FileRows {
    pub(crate) fn new(rows: Vec<Row>) -> Self {
        let mut hashes: Vec<u64> = rows
            .iter()
            .filter_map(|row| match row {
                Row::Record(record) => Some(key_hash(record.key())),
                _ => None,
            })
            .collect();
        hashes.sort_unstable();
        Self::with_hashes(rows, hashes)
    }

    /// `rows` with their records' keys' hashes, sorted, known already.
    pub(crate) fn with_hashes(rows: Vec<Row>, hashes: Vec<u64>) -> Self {
        let size = rows.iter().map(Row::size).sum::<usize>() + hashes.len() * 8 + 64;
        FileRows { rows, hashes, size }
    }

    /// Whether it holds a record of any of `probe`'s keys.
    pub(crate) fn holds(&self, probe: &Probe<'_>) -> bool {
        meet(&self.hashes, &probe.hashes)
            && self.rows.iter().any(|row| match row {
                Row::Record(record) => probe.contains(record.key()),
                _ => false,
            })
    }
}

/// The rows of files read or written lately, by path: a data file never
/// changes once written, so a file read again (the next write of its day,
/// a key probed by another day's write, a commit checked for conflicts)
/// comes from memory.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    rows: HashMap<Path, Arc<FileRows>>,
    bytes: usize,
}

/// How much the cache holds before it lets files go.
const CACHE_BYTES: usize = 256 << 20;

impl Cache {
    fn get(&self, path: &Path) -> Option<Arc<FileRows>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.rows.get(path).cloned()
    }

    /// Whether rows of about `bytes` would be kept.
    pub(crate) fn admits(&self, bytes: usize) -> bool {
        bytes <= CACHE_BYTES / 4
    }

    /// Keeps `rows` as the rows of the file at `path`, unless they are too
    /// many to keep.
    pub(crate) fn put(&self, path: &Path, rows: &Arc<FileRows>) {
        let size = rows.size;
        if !self.admits(size) {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.bytes + size > CACHE_BYTES {
            // Let the older half go: which is older is not tracked, so
            // any half.
            let mut keep = CACHE_BYTES / 2;
            state.rows.retain(|_, rows| {
                let size = rows.size;
                let kept = size <= keep;
                keep = keep.saturating_sub(size);
                kept
            });
            state.bytes = state.rows.values().map(|rows| rows.size).sum();
        }
        if state.rows.insert(path.clone(), Arc::clone(rows)).is_none() {
            state.bytes += size;
        }
    }
}

/// Where files are read from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a> {
    pub(crate) store: &'a Arc<dyn ObjectStore>,
    pub(crate) cache: &'a Cache,
}

impl Reader<'_> {
    /// Every row of one file.
    pub(crate) async fn rows(
        &self,
        path: &Path,
        size: u64,
        day: NaiveDate,
    ) -> Result<Arc<FileRows>> {
        if let Some(rows) = self.cache.get(path) {
            return Ok(rows);
        }
        let reader =
            ParquetObjectReader::new(Arc::clone(self.store), path.clone()).with_file_size(size);
        let mut batches = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(parquet)?
            .build()
            .map_err(parquet)?;
        let mut rows = Vec::new();
        while let Some(batch) = batches.try_next().await.map_err(parquet)? {
            batch_rows(&batch, day, &mut rows)?;
        }
        let rows = Arc::new(FileRows::new(rows));
        self.cache.put(path, &rows);
        Ok(rows)
    }

    /// Every row of `files`, by day.
    pub(crate) async fn days(&self, files: Vec<DataFile>) -> Result<BTreeMap<NaiveDate, DayRows>> {
        let read: Vec<(DataFile, Arc<FileRows>)> = stream::iter(files)
            .map(|file| async move {
                let rows = self.rows(&file.path, file.size, file.day).await?;
                Ok::<_, backfill_core::Error>((file, rows))
            })
            .buffer_unordered(READ_AHEAD)
            .try_collect()
            .await?;
        let mut days: BTreeMap<NaiveDate, DayRows> = BTreeMap::new();
        for (file, rows) in read {
            let day = days.entry(file.day).or_default();
            let mut kinds = Kinds::default();
            for row in &rows.rows {
                match row {
                    Row::Record(record) => {
                        kinds.records = true;
                        let key = record.key().to_owned();
                        if day.records.insert(key, record.clone()).is_some() {
                            return Err(corrupt(format!("a key twice in day {}", file.day)));
                        }
                    }
                    Row::Ledger(entry) => {
                        kinds.ledger = true;
                        if day.ledger.replace(entry.clone()).is_some() {
                            return Err(corrupt(format!("two ledger rows for {}", file.day)));
                        }
                    }
                    Row::Version(version) => {
                        kinds.history = true;
                        day.history.versions.push(version.clone());
                    }
                    Row::Listing(at) => {
                        kinds.history = true;
                        day.history.listings.push(*at);
                    }
                }
            }
            day.files.push((file, kinds));
        }
        for day in days.values_mut() {
            day.history.normalize();
        }
        Ok(days)
    }

    /// The days among `files` that hold any of `keys`.
    pub(crate) async fn days_holding(
        &self,
        files: Vec<DataFile>,
        keys: &Probe<'_>,
    ) -> Result<BTreeSet<NaiveDate>> {
        let found: Vec<Option<NaiveDate>> = stream::iter(files)
            .map(|file| async move {
                let hit = self.holds(&file.path, file.size, file.day, keys).await?;
                Ok::<_, backfill_core::Error>(hit.then_some(file.day))
            })
            .buffer_unordered(READ_AHEAD)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Whether a file holds a record of any of `keys`.
    pub(crate) async fn holds(
        &self,
        path: &Path,
        size: u64,
        day: NaiveDate,
        keys: &Probe<'_>,
    ) -> Result<bool> {
        Ok(self.rows(path, size, day).await?.holds(keys))
    }
}

/// A Parquet error as the store reports it.
pub(crate) fn parquet(e: deltalake::parquet::errors::ParquetError) -> backfill_core::Error {
    backend(deltalake::DeltaTableError::Parquet { source: e })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of keys longer than statistics keep (a UUID's 36 characters)
    /// has no key range, but its smallest key still tells that it holds no
    /// ledger row: a day's ledger is read from its ledger file alone.
    #[test]
    fn long_keys_leave_a_lower_bound_that_tells_ledger_files_apart() {
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let stats = |min: &str, max: &str| {
            serde_json::json!({
                "numRecords": 2,
                "minValues": {"key": min},
                "maxValues": {"key": max},
            })
            .to_string()
        };
        let (min, range) = key_range(&stats(&uuid[..32], uuid));
        assert_eq!((min.as_deref(), range), (Some(&uuid[..32]), None));
        let (min, range) = key_range(&stats("a", "b"));
        assert_eq!(min.as_deref(), Some("a"));
        assert_eq!(range, Some(("a".to_owned(), "b".to_owned())));
        assert_eq!(key_range("not json"), (None, None));

        let file = |min_key: Option<&str>| DataFile {
            path: Path::from("f.parquet"),
            size: 1,
            day: NaiveDate::from_ymd_opt(2026, 1, 1).unwrap(),
            keys: None,
            min_key: min_key.map(str::to_owned),
            rows: None,
            remove: Remove {
                path: "f.parquet".into(),
                deletion_timestamp: None,
                data_change: true,
                extended_file_metadata: None,
                partition_values: None,
                size: None,
                tags: None,
                deletion_vector: None,
                base_row_id: None,
                default_row_commit_version: None,
            },
        };
        assert!(!file(Some(&uuid[..32])).may_hold_ledger());
        assert!(file(Some("\0backfill.ledger:2026-01-01")).may_hold_ledger());
        assert!(file(None).may_hold_ledger(), "no statistics: it may");
        assert!(file(None).may_hold_keys("a", "b"));
    }
}
