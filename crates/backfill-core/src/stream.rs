//! A streamed day: chunks validated as they arrive, kept as sorted runs (in
//! memory up to a budget, beyond it in temporary files), then read back as
//! [`DayPages`]: key-ordered, collapsed pages for
//! [`Store::apply_pages`](crate::Store::apply_pages).

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};

use chrono::{DateTime, NaiveDate, Utc};

use crate::error::{Error, Result};
use crate::ledger::{Digest, DigestBuilder, SyncStamp, SyncedDay};
use crate::record::Record;
use crate::store::{Batch, Counts, Mode, ReplaceGuard};
use crate::write::EventDates;

/// How much of a streamed day a job holds in memory by default before it
/// writes a sorted run to a temporary file: 64 MiB of records (keys and
/// values plus a fixed overhead per record).
pub const DEFAULT_STREAM_MEMORY: usize = 64 << 20;

/// Runs kept in temporary files at most; beyond, they are merged into one
/// (so a long day with a small budget never runs out of file handles).
const MAX_RUNS: usize = 64;

/// What a record weighs against the memory budget.
fn weight(record: &Record) -> usize {
    record.key().len() + record.value().len() + std::mem::size_of::<Record>()
}

/// Key order, and within a key the winning version first.
fn winner_first(a: &Record, b: &Record) -> Ordering {
    a.key()
        .as_bytes()
        .cmp(b.key().as_bytes())
        .then_with(|| b.cmp_version(a))
}

/// Sorts by key (the order stores write in, so that writers cannot
/// deadlock), keeps each key's winner, returns how many were dropped: the
/// collapse of a batch and of each run of a streamed day.
pub(crate) fn sort_and_collapse(records: &mut Vec<Record>) -> u64 {
    let before = records.len();
    records.sort_unstable_by(winner_first);
    records.dedup_by(|later, first| later.key() == first.key());
    (before - records.len()) as u64
}

fn spill_error(error: std::io::Error) -> Error {
    Error::backend(
        "stream",
        false,
        format!("cannot keep a streamed day in a temporary file: {error}"),
    )
}

/// Receives a streamed day's chunks.
#[derive(Debug)]
pub(crate) struct Ingest {
    day: NaiveDate,
    event_dates: EventDates,
    budget: usize,
    buffer: Vec<Record>,
    buffer_bytes: usize,
    runs: Vec<File>,
    fetched: u64,
    collapsed: u64,
    days: BTreeSet<NaiveDate>,
}

impl Ingest {
    pub(crate) fn new(day: NaiveDate, event_dates: EventDates, budget: usize) -> Self {
        Self {
            day,
            event_dates,
            budget,
            buffer: Vec::new(),
            buffer_bytes: 0,
            runs: Vec::new(),
            fetched: 0,
            collapsed: 0,
            days: BTreeSet::new(),
        }
    }

    /// Validates a chunk and keeps it; spills when over the budget.
    pub(crate) fn push(&mut self, chunk: Vec<Record>) -> Result<()> {
        let mut last_day = None;
        for record in &chunk {
            record.validate()?;
            let day = record.event_date();
            if self.event_dates == EventDates::Strict && day != self.day {
                return Err(Error::WrongDay {
                    key: record.key().to_owned(),
                    expected: self.day,
                    found: day,
                });
            }
            if last_day != Some(day) {
                self.days.insert(day);
                last_day = Some(day);
            }
        }
        self.fetched += chunk.len() as u64;
        for record in chunk {
            self.buffer_bytes += weight(&record);
            self.buffer.push(record);
        }
        if self.buffer_bytes > self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the buffer, sorted and collapsed, to a temporary file.
    fn spill(&mut self) -> Result<()> {
        let mut records = std::mem::take(&mut self.buffer);
        self.buffer_bytes = 0;
        self.collapsed += sort_and_collapse(&mut records);
        let file = tempfile::tempfile().map_err(spill_error)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        for record in &records {
            encode(record, &mut out).map_err(spill_error)?;
        }
        let mut file = out.into_inner().map_err(|e| spill_error(e.into_error()))?;
        file.rewind().map_err(spill_error)?;
        self.runs.push(file);
        if self.runs.len() >= MAX_RUNS {
            self.compact()?;
        }
        Ok(())
    }

    /// Merges every run into one, collapsing duplicate keys across them.
    fn compact(&mut self) -> Result<()> {
        let sources = std::mem::take(&mut self.runs)
            .into_iter()
            .map(|file| Source::File(BufReader::with_capacity(64 << 10, file)))
            .collect();
        let mut merge = Merge::new(sources)?;
        let file = tempfile::tempfile().map_err(spill_error)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut last: Option<Record> = None;
        while let Some(record) = merge.next()? {
            if last.as_ref().is_some_and(|l| l.key() == record.key()) {
                self.collapsed += 1;
                continue;
            }
            if let Some(done) = last.replace(record) {
                encode(&done, &mut out).map_err(spill_error)?;
            }
        }
        if let Some(done) = last {
            encode(&done, &mut out).map_err(spill_error)?;
        }
        let mut file = out.into_inner().map_err(|e| spill_error(e.into_error()))?;
        file.rewind().map_err(spill_error)?;
        self.runs.push(file);
        Ok(())
    }

    /// The day's pages, once the stream has ended.
    pub(crate) fn finish(
        mut self,
        mode: Mode,
        as_of: DateTime<Utc>,
        guard: ReplaceGuard,
        stamp: SyncStamp,
    ) -> Result<DayPages> {
        let mut last = std::mem::take(&mut self.buffer);
        self.collapsed += sort_and_collapse(&mut last);
        let mut sources: Vec<Source> = self
            .runs
            .into_iter()
            .map(|file| Source::File(BufReader::with_capacity(1 << 20, file)))
            .collect();
        sources.push(Source::Memory(last.into_iter()));
        let merge = Merge::new(sources)?;
        Ok(DayPages {
            day: self.day,
            mode,
            as_of,
            guard,
            stamp,
            days: self.days.into_iter().collect(),
            fetched: self.fetched,
            collapsed: self.collapsed,
            distinct: 0,
            merge,
            last_key: None,
            digest: DigestBuilder::default(),
            done: false,
        })
    }
}

/// One run's records, in order.
enum Source {
    Memory(std::vec::IntoIter<Record>),
    File(BufReader<File>),
}

impl Source {
    fn next(&mut self) -> Result<Option<Record>> {
        match self {
            Source::Memory(records) => Ok(records.next()),
            Source::File(file) => decode(file).map_err(spill_error),
        }
    }
}

/// The next record of one run, ordered for a min-heap: smallest key first,
/// and within a key the winning version first.
struct Head {
    record: Record,
    source: usize,
}

impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        winner_first(&other.record, &self.record).then_with(|| other.source.cmp(&self.source))
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head {}

/// The runs merged into one sequence: key order, each key's versions
/// winner first.
struct Merge {
    sources: Vec<Source>,
    heap: BinaryHeap<Head>,
}

impl Merge {
    fn new(mut sources: Vec<Source>) -> Result<Self> {
        let mut heap = BinaryHeap::with_capacity(sources.len());
        for (index, source) in sources.iter_mut().enumerate() {
            if let Some(record) = source.next()? {
                heap.push(Head {
                    record,
                    source: index,
                });
            }
        }
        Ok(Self { sources, heap })
    }

    fn next(&mut self) -> Result<Option<Record>> {
        let Some(Head { record, source }) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(next) = self.sources[source].next()? {
            self.heap.push(Head {
                record: next,
                source,
            });
        }
        Ok(Some(record))
    }

    fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    fn runs(&self) -> usize {
        self.sources.len()
    }
}

/// A streamed day's records as pages: unique keys, sorted by key bytes
/// across the whole day (every page's keys follow the previous page's),
/// each key's winning version, validated; and what its ledger row needs.
///
/// A store applies them in one transaction with
/// [`Store::apply_pages`](crate::Store::apply_pages): the result, the
/// counts and the ledger row are exactly those of the same records applied
/// as one [`Batch`]. The records come from memory and from temporary files
/// the job wrote while the stream arrived; reading a page may block briefly
/// on the local disk.
pub struct DayPages {
    day: NaiveDate,
    mode: Mode,
    as_of: DateTime<Utc>,
    guard: ReplaceGuard,
    stamp: SyncStamp,
    days: Vec<NaiveDate>,
    fetched: u64,
    collapsed: u64,
    distinct: u64,
    merge: Merge,
    last_key: Option<String>,
    digest: DigestBuilder,
    done: bool,
}

impl fmt::Debug for DayPages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DayPages")
            .field("day", &self.day)
            .field("mode", &self.mode)
            .field("as_of", &self.as_of())
            .field("fetched", &self.fetched)
            .field("runs", &self.merge.runs())
            .field("read", &self.distinct)
            .field("done", &self.done)
            .finish()
    }
}

impl DayPages {
    /// The next page of at most `max_rows` records and about `max_bytes`
    /// of keys and values (a single larger record travels alone); `None`
    /// once every record was read.
    ///
    /// # Errors
    ///
    /// A temporary file could not be read.
    pub fn next_page(&mut self, max_rows: usize, max_bytes: usize) -> Result<Option<Vec<Record>>> {
        let mut page: Vec<Record> = Vec::new();
        let mut bytes = 0usize;
        while page.len() < max_rows.max(1) && (page.is_empty() || bytes < max_bytes) {
            let Some(record) = self.merge.next()? else {
                self.done = true;
                break;
            };
            let previous = page.last().map(Record::key).or(self.last_key.as_deref());
            if previous == Some(record.key()) {
                // A losing version of the key just taken.
                self.collapsed += 1;
                continue;
            }
            self.digest.update(&record);
            self.distinct += 1;
            bytes += record.key().len() + record.value().len();
            page.push(record);
        }
        if let Some(last) = page.last() {
            self.last_key = Some(last.key().to_owned());
        }
        if self.merge.is_empty() {
            self.done = true;
        }
        Ok((!page.is_empty()).then_some(page))
    }

    /// Whether every page was read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The day being synced.
    pub fn day(&self) -> NaiveDate {
        self.day
    }

    /// Merge or replace.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// For a listing ([`Mode::Replace`]), the instant it is true as of, as
    /// [`Batch::as_of`]; `None` in merge mode.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        (self.mode == Mode::Replace).then_some(self.as_of)
    }

    /// When, and by which run, the day is applied.
    pub fn stamp(&self) -> &SyncStamp {
        &self.stamp
    }

    /// The days a store locks, as [`Batch::days`]: every record's
    /// `event_date`, in order, known before the first page.
    pub fn days(&self) -> &[NaiveDate] {
        &self.days
    }

    /// Whether the stream held no record at all (an empty listing).
    pub fn is_empty(&self) -> bool {
        self.fetched == 0
    }

    /// Records received, duplicates included.
    pub fn fetched(&self) -> u64 {
        self.fetched
    }

    /// Records handed out in pages so far (unique keys).
    pub fn read(&self) -> u64 {
        self.distinct
    }

    /// Duplicate keys collapsed away so far (all of them once
    /// [`DayPages::is_done`]).
    pub fn collapsed(&self) -> u64 {
        self.collapsed
    }

    /// As [`Batch::check_replace`], for the whole listing: ask after every
    /// page was merged, before committing.
    ///
    /// # Errors
    ///
    /// [`Error::ReplaceRefused`] when the guard refuses.
    pub fn check_replace(&self, would_delete: u64, live: u64) -> Result<()> {
        self.guard
            .check(self.day, self.is_empty(), would_delete, live)
    }

    /// The digest of every record read so far: the day's, once
    /// [`DayPages::is_done`], equal to [`Batch::digest`] of the same
    /// records.
    pub fn digest(&self) -> Digest {
        self.digest.finish()
    }

    /// The ledger row of a successful apply, as [`Batch::synced`]; call it
    /// after the last page.
    pub fn synced(&self, counts: Counts) -> SyncedDay {
        debug_assert!(self.done, "the ledger row of a day not read to its end");
        SyncedDay::new(
            self.stamp.at,
            self.stamp.run_id.clone(),
            self.mode,
            self.as_of(),
            self.digest(),
            Counts {
                collapsed: self.collapsed,
                ..counts
            },
        )
    }

    /// The day as one batch of `records` (every page, read to the end).
    pub(crate) fn batch_of(&self, records: Vec<Record>) -> Batch {
        Batch::new(
            self.day,
            self.mode,
            self.as_of,
            self.guard,
            records,
            self.collapsed,
            self.stamp.clone(),
        )
    }
}

// A run's file: per record, the key and value with their lengths, the
// event date as days since 1 January of year 1, `updated_at` in
// microseconds, and the deleted flag. Written and read by this process
// only, within one attempt.

fn encode(record: &Record, out: &mut impl Write) -> std::io::Result<()> {
    out.write_all(&(record.key().len() as u32).to_le_bytes())?;
    out.write_all(record.key().as_bytes())?;
    out.write_all(&(record.value().len() as u64).to_le_bytes())?;
    out.write_all(record.value().as_bytes())?;
    use chrono::Datelike;
    out.write_all(&record.event_date().num_days_from_ce().to_le_bytes())?;
    out.write_all(&record.updated_at().timestamp_micros().to_le_bytes())?;
    out.write_all(&[u8::from(record.is_deleted())])
}

fn decode(input: &mut impl Read) -> std::io::Result<Option<Record>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let corrupt =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let key = read_text(input, u32::from_le_bytes(len) as usize)?;
    let mut len = [0u8; 8];
    input.read_exact(&mut len)?;
    let value = read_text(input, u64::from_le_bytes(len) as usize)?;
    let mut date = [0u8; 4];
    input.read_exact(&mut date)?;
    let event_date = NaiveDate::from_num_days_from_ce_opt(i32::from_le_bytes(date))
        .ok_or_else(|| corrupt("a bad date in a spilled run"))?;
    let mut micros = [0u8; 8];
    input.read_exact(&mut micros)?;
    let updated_at = DateTime::from_timestamp_micros(i64::from_le_bytes(micros))
        .ok_or_else(|| corrupt("a bad instant in a spilled run"))?;
    let mut deleted = [0u8; 1];
    input.read_exact(&mut deleted)?;
    let mut record = Record::new_unchecked(key, event_date, value, updated_at);
    if deleted[0] == 1 {
        record = record.to_tombstone();
    }
    Ok(Some(record))
}

fn read_text(input: &mut impl Read, len: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "spilled text is not UTF-8")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn day() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 5, 1).unwrap()
    }

    fn record(key: &str, value: &str, minute: u32) -> Record {
        let at = Utc.with_ymd_and_hms(2026, 5, 1, 0, minute, 0).unwrap();
        Record::new(key, day(), value, at).unwrap()
    }

    fn stamp() -> SyncStamp {
        SyncStamp {
            at: Utc::now(),
            run_id: None,
        }
    }

    /// Whatever the chunking and the memory budget, the pages are the
    /// batch: same records in the same order, same collapsed count, same
    /// digest.
    #[test]
    fn pages_equal_the_batch_for_any_chunking_and_budget() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut all = Vec::new();
        for i in 0..500 {
            let key = format!("k{:03}", rng.u32(0..200));
            let value = if rng.u8(0..10) == 0 {
                String::new()
            } else {
                format!("v{i}")
            };
            let mut r = record(&key, &value, rng.u32(0..5));
            if value.is_empty() {
                r = r.to_tombstone();
            }
            all.push(r);
        }
        let mut expected = all.clone();
        let collapsed = sort_and_collapse(&mut expected);
        let digest = Digest::of(&expected);
        // Budget 0 with chunks of 1 makes more runs than MAX_RUNS: they
        // are compacted on the way.
        for budget in [0, 1, 500, 5_000, usize::MAX] {
            for chunk in [1, 2, 7, 100, 1000] {
                for page_rows in [1, 3, 50, usize::MAX] {
                    let mut ingest = Ingest::new(day(), EventDates::Strict, budget);
                    for c in all.chunks(chunk) {
                        ingest.push(c.to_vec()).unwrap();
                    }
                    let mut pages = ingest
                        .finish(Mode::Merge, Utc::now(), ReplaceGuard::default(), stamp())
                        .unwrap();
                    let mut got = Vec::new();
                    while let Some(page) = pages.next_page(page_rows, usize::MAX).unwrap() {
                        assert!(page.len() <= page_rows);
                        got.extend(page);
                    }
                    assert!(pages.is_done());
                    assert_eq!(
                        got, expected,
                        "budget {budget} chunk {chunk} page {page_rows}"
                    );
                    assert_eq!(pages.collapsed(), collapsed);
                    assert_eq!(pages.digest(), digest);
                    assert_eq!(pages.fetched(), 500);
                }
            }
        }
    }

    #[test]
    fn a_bad_record_or_a_wrong_day_is_refused_with_its_key() {
        let mut ingest = Ingest::new(day(), EventDates::Strict, 0);
        ingest.push(vec![record("a", "1", 0)]).unwrap();
        let other = Record::new("b", day().succ_opt().unwrap(), "x", Utc::now()).unwrap();
        match ingest.push(vec![other]) {
            Err(Error::WrongDay { key, .. }) => assert_eq!(key, "b"),
            other => panic!("{other:?}"),
        }
        let bad = Record::new_unchecked("c".into(), day(), "a\0b".into(), Utc::now());
        match Ingest::new(day(), EventDates::Strict, 0).push(vec![bad]) {
            Err(Error::InvalidRecord { key, .. }) => assert_eq!(key, "c"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pages_are_bounded_by_bytes() {
        let mut ingest = Ingest::new(day(), EventDates::Strict, 0);
        let big = "x".repeat(10_000);
        ingest
            .push(vec![
                record("a", "1", 0),
                record("b", &big, 0),
                record("c", "3", 0),
            ])
            .unwrap();
        let mut pages = ingest
            .finish(Mode::Merge, Utc::now(), ReplaceGuard::default(), stamp())
            .unwrap();
        let mut sizes = Vec::new();
        while let Some(page) = pages.next_page(100, 100).unwrap() {
            sizes.push(page.len());
        }
        assert_eq!(sizes, [2, 1]);
    }
}
