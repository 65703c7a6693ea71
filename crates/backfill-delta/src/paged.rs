//! A streamed day larger than a page, decided page by page in bounded
//! memory.
//!
//! The day's pages ([`DayWrite::next_page`]) come in key order, and the
//! store's own files of a day are sorted by key: each page is decided
//! against the day's stored rows of its key range only (after the last
//! key decided, up to the page's last key; once no page is left, a range
//! with no record runs to the end), read from the day's files a batch at
//! a time, at most
//! [`Paging::range_rows`] of them at once (a range holding more is decided
//! in parts). Each range is decided by the reference store
//! ([`MemoryStore::apply_page`]) and its rows streamed to the day's new
//! files; the guard is asked and the ledger entry made once the last page
//! is decided, and the files commit with it as a whole day's do. So memory
//! holds a page, a range of stored rows, a writer's row group and 8 bytes
//! a key (the keys' hashes, to check other writers' commits against),
//! whatever the day's size; plus, whole, any other day whose rows the
//! write changes (a record of another day, a key moving between days).
//!
//! A day whose rows are all unchanged writes no records file: its ranges
//! are decided without writing until one changes, and then the ranges
//! decided before it are copied from the stored files to the new ones.
//! A day whose files are not sorted by key (compacted by another engine)
//! is read whole instead.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use backfill_core::columns::Columns;
use backfill_core::{Counts, DayWrite, LedgerEntry, MemoryStore, Record};
use chrono::NaiveDate;
use deltalake::kernel::Action;
use deltalake::logstore::parquet_reader::ParquetObjectReader;
use deltalake::parquet::arrow::async_reader::{
    ParquetRecordBatchStream, ParquetRecordBatchStreamBuilder,
};
use deltalake::writer::{DeltaWriter, RecordBatchWriter, WriteMode};
use deltalake::{DeltaTable, ObjectStore};
use futures_util::TryStreamExt;

use crate::commit::{partition, writer_properties, NewDay};
use crate::error::{backend, corrupt, Result};
use crate::rows::{batch_rows, check_typed, records_batch, Row};
use crate::table::{key_hash, parquet, DataFile, DayRows, Files, Probe, Reader};

/// How large the pieces of a streamed day are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paging {
    /// Records in a page at most.
    pub(crate) page_rows: usize,
    /// About how many bytes of keys and values in a page at most.
    pub(crate) page_bytes: usize,
    /// Stored rows of the day decided at once at most.
    pub(crate) range_rows: usize,
}

impl Default for Paging {
    fn default() -> Self {
        Paging {
            page_rows: 50_000,
            page_bytes: 32 << 20,
            range_rows: 50_000,
        }
    }
}

/// What a streamed day makes of the table.
pub(crate) struct Paged {
    /// The days read whole, as they were (the streamed day with its ledger
    /// row's files only).
    pub(crate) old: BTreeMap<NaiveDate, DayRows>,
    /// What they become (the streamed day: its ledger entry only).
    pub(crate) new: BTreeMap<NaiveDate, NewDay>,
    /// The streamed day's new records files, and the removal of its old
    /// ones, when its rows change.
    pub(crate) written: Vec<Action>,
    /// The day's keys, by hash.
    pub(crate) keys: Probe<'static>,
    pub(crate) counts: Counts,
}

/// The rows of a day's records files, in key order, a batch at a time.
struct DayCursor {
    files: Vec<FileCursor>,
    /// The last key handed out.
    last: Option<String>,
    /// Whether the files were found not to be in key order, or to hold a
    /// ledger row or a key twice: the day must be read whole.
    unordered: bool,
}

struct FileCursor {
    day: NaiveDate,
    batches: ParquetRecordBatchStream<ParquetObjectReader>,
    rows: VecDeque<Record>,
    done: bool,
}

impl FileCursor {
    /// Reads the next batch if every row read was taken; `false` when a
    /// file holds a ledger or history row among its records.
    async fn fill(&mut self) -> Result<bool> {
        while self.rows.is_empty() && !self.done {
            let Some(batch) = self.batches.try_next().await.map_err(parquet)? else {
                self.done = true;
                break;
            };
            let mut rows = Vec::with_capacity(batch.num_rows());
            batch_rows(&batch, self.day, &mut rows)?;
            for row in rows {
                match row {
                    Row::Record(record) => self.rows.push_back(record),
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
    }
}

impl DayCursor {
    async fn open(store: &Arc<dyn ObjectStore>, files: &[DataFile]) -> Result<Self> {
        let mut cursors = Vec::with_capacity(files.len());
        for file in files {
            let reader = ParquetObjectReader::new(Arc::clone(store), file.path.clone())
                .with_file_size(file.size);
            let batches = ParquetRecordBatchStreamBuilder::new(reader)
                .await
                .map_err(parquet)?
                .with_batch_size(8192)
                .build()
                .map_err(parquet)?;
            cursors.push(FileCursor {
                day: file.day,
                batches,
                rows: VecDeque::new(),
                done: false,
            });
        }
        Ok(DayCursor {
            files: cursors,
            last: None,
            unordered: false,
        })
    }

    /// The next rows, in key order, up to and including the key `through`
    /// (`None`: to the end), `max` at most.
    async fn take(&mut self, through: Option<&str>, max: usize) -> Result<Vec<Record>> {
        let mut taken = Vec::new();
        while taken.len() < max && !self.unordered {
            for file in &mut self.files {
                if !file.fill().await? {
                    self.unordered = true;
                    return Ok(taken);
                }
            }
            let next = self
                .files
                .iter()
                .enumerate()
                .filter_map(|(i, file)| file.rows.front().map(|row| (row.key(), i)))
                .filter(|(key, _)| through.is_none_or(|through| *key <= through))
                .min();
            let Some((_, i)) = next else {
                break;
            };
            let Some(row) = self.files[i].rows.pop_front() else {
                break;
            };
            if self.last.as_deref().is_some_and(|last| row.key() <= last) {
                self.unordered = true;
                break;
            }
            self.last = Some(row.key().to_owned());
            taken.push(row);
        }
        Ok(taken)
    }
}

/// What `day`'s pages make of `table` (`first`, its first page, read
/// already): `None` when the day's files cannot be read in key order and it
/// must be decided whole.
pub(crate) async fn decide(
    table: &DeltaTable,
    files: &Files,
    reader: Reader<'_>,
    typed: &Columns,
    paging: Paging,
    day: &mut DayWrite,
    first: Vec<Record>,
) -> Result<Option<Paged>> {
    let this = day.day();
    let store = table.object_store();
    // The other days of its records (lenient event dates), read whole.
    let mut old = {
        let of: Vec<DataFile> = day
            .days()
            .iter()
            .filter(|d| **d != this)
            .flat_map(|d| files.of_day(*d))
            .cloned()
            .collect();
        reader.days(of).await?
    };
    for d in day.days().iter().filter(|d| **d != this) {
        old.entry(*d).or_default();
    }
    // The day's own ledger row, and which of its files hold records.
    let own_files = files.of_day(this);
    let may_hold_ledger: Vec<DataFile> = own_files
        .iter()
        .filter(|f| f.may_hold_ledger())
        .cloned()
        .collect();
    let mut own = reader
        .days(may_hold_ledger)
        .await?
        .remove(&this)
        .unwrap_or_default();
    if own.files.iter().any(|(_, kinds)| kinds.mixed()) {
        return Ok(None);
    }
    let no_records: HashSet<&str> = own
        .files
        .iter()
        .filter(|(_, kinds)| !kinds.records)
        .map(|(file, _)| file.path.as_ref())
        .collect();
    let records_files: Vec<DataFile> = own_files
        .iter()
        .filter(|f| !no_records.contains(f.path.as_ref()))
        .cloned()
        .collect();
    own.records.clear();
    own.files.retain(|(_, kinds)| !kinds.records);

    let mut pages = Pages {
        this,
        files,
        reader,
        typed,
        old,
        others: BTreeMap::new(),
        entries: Vec::new(),
        cursor: DayCursor::open(&store, &records_files).await?,
        writer: RecordBatchWriter::for_table(table)
            .map(|writer| writer.with_writer_properties(writer_properties()))
            .map_err(backend)?,
        changed: false,
        decided: None,
        records_files: &records_files,
        store: &store,
        counts: Counts::default(),
        live: 0,
    };
    pages.others = pages
        .old
        .iter()
        .map(|(d, rows)| (*d, rows.records.clone()))
        .collect();
    pages.entries = pages
        .old
        .values()
        .filter_map(|rows| rows.ledger.clone())
        .chain(own.ledger.clone())
        .collect();

    let mut hashes = Vec::new();
    let decided = pages
        .all(day, first, paging, &mut hashes)
        .await
        .inspect_err(|_| pages.writer.reset());
    if !decided? {
        pages.writer.reset();
        return Ok(None);
    }
    let Pages {
        old: mut all_old,
        others,
        mut writer,
        changed,
        counts,
        live,
        ..
    } = pages;
    if day.as_of().is_some() {
        if let Err(refused) = day.check_replace(counts.unlisted, live) {
            writer.reset();
            return Err(refused);
        }
    }
    let mut written: Vec<Action> = Vec::new();
    if changed {
        let adds = writer.flush().await.map_err(backend)?;
        written.extend(
            records_files
                .iter()
                .map(|file| Action::Remove(file.remove.clone())),
        );
        written.extend(adds.into_iter().map(Action::Add));
    } else {
        writer.reset();
    }
    let finished = MemoryStore::from_parts([], own.ledger.clone());
    finished.finish_day(day, counts);
    let ledger = finished.into_parts().1.pop();
    let mut new: BTreeMap<NaiveDate, NewDay> = others
        .into_iter()
        .map(|(d, records)| {
            let day = NewDay {
                records: records.into_values().collect(),
                ledger: all_old.get(&d).and_then(|rows| rows.ledger.clone()),
                history: None,
            };
            (d, day)
        })
        .collect();
    new.insert(
        this,
        NewDay {
            records: Vec::new(),
            ledger,
            history: None,
        },
    );
    all_old.insert(this, own);
    Ok(Some(Paged {
        old: all_old,
        new,
        written,
        keys: Probe::of_hashes(hashes),
        counts,
    }))
}

/// A streamed day being decided.
struct Pages<'a> {
    this: NaiveDate,
    files: &'a Files,
    reader: Reader<'a>,
    typed: &'a Columns,
    /// The other days read whole, as they were.
    old: BTreeMap<NaiveDate, DayRows>,
    /// Their records as the pages decided so far leave them.
    others: BTreeMap<NaiveDate, BTreeMap<String, Record>>,
    /// The ledger entries of the days read, as they were.
    entries: Vec<LedgerEntry>,
    /// The day's stored rows.
    cursor: DayCursor,
    /// The day's new records files.
    writer: RecordBatchWriter,
    /// Whether a range decided so far changed the day's rows (and the
    /// writer holds every range decided since the first).
    changed: bool,
    /// The last key of the ranges decided so far.
    decided: Option<String>,
    records_files: &'a [DataFile],
    store: &'a Arc<dyn ObjectStore>,
    counts: Counts,
    live: u64,
}

impl Pages<'_> {
    /// Decides every page, `first` the first, keeping their keys' hashes:
    /// `false` when the day's files are not in key order.
    async fn all(
        &mut self,
        day: &mut DayWrite,
        first: Vec<Record>,
        paging: Paging,
        hashes: &mut Vec<u64>,
    ) -> Result<bool> {
        let mut page = first;
        loop {
            check_typed(&page, self.typed)?;
            hashes.extend(page.iter().map(|record| key_hash(record.key())));
            let end = page.last().map(|r| r.key().to_owned());
            if !self.page(day, &page, end.as_deref(), paging).await? {
                return Ok(false);
            }
            match day.next_page(paging.page_rows, paging.page_bytes)? {
                Some(next) => page = next,
                // The stored rows after the last page's last key, with no
                // record: whether a page is the last is known only once the
                // next is asked for (losing versions of its last key may
                // follow it).
                None => return self.page(day, &[], None, paging).await,
            }
        }
    }

    /// Decides one page, whose range ends at `end` (`None`: at the end of
    /// the key space, for the stored rows after the last page): `false`
    /// when the day's files are not in key order.
    async fn page(
        &mut self,
        day: &DayWrite,
        page: &[Record],
        end: Option<&str>,
        paging: Paging,
    ) -> Result<bool> {
        let mut records = page;
        loop {
            let stored = self.cursor.take(end, paging.range_rows).await?;
            if self.cursor.unordered {
                return Ok(false);
            }
            // A range holding more stored rows than are decided at once is
            // decided in parts: up to the last stored row taken, then on.
            let full = stored.len() == paging.range_rows;
            let through = match (full, stored.last()) {
                (true, Some(last)) => Some(last.key().to_owned()),
                _ => end.map(str::to_owned),
            };
            let split = through
                .as_deref()
                .map_or(records.len(), |t| records.partition_point(|r| r.key() <= t));
            let (these, rest) = records.split_at(split);
            self.range(day, these, stored).await?;
            self.decided = through;
            records = rest;
            if !full {
                return Ok(true);
            }
        }
    }

    /// Decides `records` against the day's `stored` rows of their range.
    async fn range(
        &mut self,
        day: &DayWrite,
        records: &[Record],
        stored: Vec<Record>,
    ) -> Result<()> {
        // Other days holding one of these keys (moving between days) are
        // read whole, once.
        if let Some((first, last)) = records.first().zip(records.last()) {
            let probe = Probe::new(records.iter().map(Record::key));
            let candidates: Vec<DataFile> = self
                .files
                .all()
                .filter(|f| {
                    f.day != self.this
                        && !self.old.contains_key(&f.day)
                        && f.may_hold_keys(first.key(), last.key())
                })
                .cloned()
                .collect();
            let holding = self.reader.days_holding(candidates, &probe).await?;
            if !holding.is_empty() {
                let of: Vec<DataFile> = holding
                    .iter()
                    .flat_map(|d| self.files.of_day(*d))
                    .cloned()
                    .collect();
                for (d, rows) in self.reader.days(of).await? {
                    self.others.insert(d, rows.records.clone());
                    self.entries.extend(rows.ledger.clone());
                    self.old.insert(d, rows);
                }
            }
        }
        let mut rows = stored.clone();
        if !self.others.is_empty() {
            for record in records {
                for held in self.others.values_mut() {
                    if let Some(row) = held.remove(record.key()) {
                        rows.push(row);
                        break;
                    }
                }
            }
        }
        let range = MemoryStore::from_parts(rows, self.entries.iter().cloned());
        let done = range.apply_page(day, records)?;
        self.counts += done.counts;
        self.live += done.live;
        let mut mine = Vec::with_capacity(stored.len() + records.len());
        for row in range.into_parts().0 {
            if row.event_date() == self.this {
                mine.push(row);
                continue;
            }
            let Some(held) = self.others.get_mut(&row.event_date()) else {
                return Err(corrupt(format!("a row of an unread day: {row:?}")));
            };
            held.insert(row.key().to_owned(), row);
        }
        if !self.changed && mine != stored {
            self.changed = true;
            self.copy_decided().await?;
        }
        if self.changed {
            self.write(&mine).await?;
        }
        Ok(())
    }

    /// Writes the stored rows of the ranges decided before the first that
    /// changed (they are unchanged) to the new files.
    async fn copy_decided(&mut self) -> Result<()> {
        let Some(through) = self.decided.clone() else {
            return Ok(());
        };
        let mut copy = DayCursor::open(self.store, self.records_files).await?;
        loop {
            let rows = copy.take(Some(&through), 50_000).await?;
            if copy.unordered {
                return Err(corrupt("a day's files changed while they were read"));
            }
            if rows.is_empty() {
                return Ok(());
            }
            self.write(&rows).await?;
        }
    }

    async fn write(&mut self, rows: &[Record]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let batch = records_batch(rows.iter(), None, self.typed)?;
        self.writer
            .write_partition(batch, &partition(self.this), WriteMode::Default)
            .await
            .map_err(backend)?;
        Ok(())
    }
}
