//! [`DayWrite`]: one day's write as a store receives it, whether it was
//! fetched as one batch or streamed.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, NaiveDate, Utc};

use super::ingest::Runs;
use super::merge::Merge;
use crate::counts::{Counts, Mode};
use crate::error::{Error, Result};
use crate::guard::ReplaceGuard;
use crate::ledger::{Digest, DigestBuilder, SyncStamp, SyncedDay, Timing};
use crate::record::Record;

/// One day's write, handed to [`Store::apply`](crate::Store::apply): what
/// the day is (its date, mode, listing instant, guard, the event dates its
/// records touch, the stamp of its ledger row) and its records, in pages
/// the store reads and owns.
///
/// The records are validated, each key's winning version only, sorted by
/// key bytes across the whole day: every page's keys follow the previous
/// page's. That is also the order rows must be written in, so that two
/// writers with overlapping keys cannot deadlock. Pages come from one of
/// two places:
///
/// - a day fetched **whole**, as one `Vec` ([`upsert`](crate::upsert)), is
///   one page, handed over as it is whatever the bounds asked for: it is in
///   memory already;
/// - a **streamed** day ([`upsert_stream`](crate::upsert_stream)) comes in
///   pages of the size the store asks for, merged from sorted runs the job
///   kept in memory and in temporary files while the stream arrived;
///   reading a page may block briefly on the local disk.
///
/// Either way the result, the counts and the ledger row are the same.
/// The write must read every page ([`DayWrite::next_page`] until `None`):
/// the job checks that every record was read and accounted for in the
/// returned [`Counts`], and fails the day if not. A `DayWrite` is `Send`
/// and `'static`, so a store may move it onto a blocking thread.
pub struct DayWrite {
    day: NaiveDate,
    mode: Mode,
    as_of: DateTime<Utc>,
    guard: ReplaceGuard,
    stamp: SyncStamp,
    /// Every record's `event_date`, in order, without duplicates.
    days: Vec<NaiveDate>,
    /// Records received, duplicates included.
    fetched: u64,
    pages: Pages,
    tally: Arc<Tally>,
    /// When the attempt began (its fetch), and when the day was ready to
    /// write (its fetch over).
    began: Instant,
    ready: Instant,
}

/// Where the pages come from.
// One per day being written, never in a collection: boxing the merge
// would save no memory worth an allocation.
#[allow(clippy::large_enum_variant)]
enum Pages {
    /// The whole day, one page; `None` once handed out.
    Whole {
        records: Option<Vec<Record>>,
        digest: Digest,
    },
    /// A streamed day's runs, merged as pages are read.
    Runs {
        runs: Runs,
        merge: Merge<'static>,
        /// Duplicates collapsed before the merge (within each run).
        collapsed: u64,
        last_key: Option<String>,
        digest: DigestBuilder,
        ahead: Option<Ahead>,
    },
}

/// What a day's pages hold, known before the first is read: a day fetched
/// whole, or a streamed day whose runs were read once ahead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ahead {
    /// [`Digest::of`] the day's records.
    pub(crate) digest: Digest,
    /// Its records (unique keys).
    pub(crate) records: u64,
    /// Duplicate keys collapsed away, all of them.
    pub(crate) collapsed: u64,
}

/// What the job reads back after the store returned: how far the store
/// read, and how many duplicates were collapsed along the way.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    read: AtomicU64,
    collapsed: AtomicU64,
    done: AtomicBool,
}

impl Tally {
    /// Records handed out in pages (unique keys).
    pub(crate) fn read(&self) -> u64 {
        self.read.load(Relaxed)
    }

    /// Duplicate keys collapsed away, all of them once done.
    pub(crate) fn collapsed(&self) -> u64 {
        self.collapsed.load(Relaxed)
    }

    /// Whether every page was read.
    pub(crate) fn done(&self) -> bool {
        self.done.load(Relaxed)
    }
}

/// What a day is, before its records.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub(crate) day: NaiveDate,
    pub(crate) mode: Mode,
    pub(crate) as_of: DateTime<Utc>,
    pub(crate) guard: ReplaceGuard,
    pub(crate) stamp: SyncStamp,
}

impl fmt::Debug for DayWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DayWrite")
            .field("day", &self.day)
            .field("mode", &self.mode)
            .field("as_of", &self.as_of())
            .field("fetched", &self.fetched)
            .field("whole", &matches!(self.pages, Pages::Whole { .. }))
            .field("read", &self.read())
            .field("done", &self.is_done())
            .finish()
    }
}

impl DayWrite {
    /// A day fetched whole: `records` sorted by key with unique keys (the
    /// `collapsed` duplicates already dropped).
    pub(crate) fn whole(header: Header, records: Vec<Record>, collapsed: u64) -> Self {
        debug_assert!(records.windows(2).all(|w| w[0].key() < w[1].key()));
        let mut days: Vec<NaiveDate> = records.iter().map(Record::event_date).collect();
        days.sort_unstable();
        days.dedup();
        let tally = Tally {
            collapsed: AtomicU64::new(collapsed),
            done: AtomicBool::new(records.is_empty()),
            ..Tally::default()
        };
        Self::new(
            header,
            days,
            records.len() as u64 + collapsed,
            Pages::Whole {
                digest: Digest::of(&records),
                records: Some(records),
            },
            tally,
        )
    }

    /// A streamed day from its merged runs (`ahead`, if they were read
    /// once before).
    pub(super) fn runs(
        header: Header,
        days: Vec<NaiveDate>,
        fetched: u64,
        collapsed: u64,
        (runs, merge): (Runs, Merge<'static>),
        ahead: Option<Ahead>,
    ) -> Self {
        let tally = Tally {
            collapsed: AtomicU64::new(collapsed),
            done: AtomicBool::new(merge.is_empty()),
            ..Tally::default()
        };
        let pages = Pages::Runs {
            runs,
            merge,
            collapsed,
            last_key: None,
            digest: DigestBuilder::default(),
            ahead,
        };
        Self::new(header, days, fetched, pages, tally)
    }

    fn new(header: Header, days: Vec<NaiveDate>, fetched: u64, pages: Pages, tally: Tally) -> Self {
        let Header {
            day,
            mode,
            as_of,
            guard,
            stamp,
        } = header;
        let now = Instant::now();
        Self {
            day,
            mode,
            as_of,
            guard,
            stamp,
            days,
            fetched,
            pages,
            tally: Arc::new(tally),
            began: now,
            ready: now,
        }
    }

    /// The same write, its attempt begun at `began` (when its fetch
    /// started): the fetch's share of its [`Timing`]. Without it, the
    /// write is timed from when it was made.
    pub(crate) fn began(mut self, began: Instant) -> Self {
        self.began = began.min(self.ready);
        self
    }

    /// How long the attempt has taken so far: its fetch, and its write up
    /// to now. A store that writes its own ledger row (not through
    /// [`DayWrite::synced`]) asks just before it.
    pub fn timing(&self) -> Timing {
        Timing {
            fetch: self.ready - self.began,
            write: self.ready.elapsed(),
        }
    }

    /// What the day's pages hold, if it is known before the first page is
    /// read: a day fetched whole, or a streamed day read once ahead.
    pub(crate) fn ahead(&self) -> Option<Ahead> {
        match &self.pages {
            Pages::Whole {
                digest, records, ..
            } => Some(Ahead {
                digest: *digest,
                records: records.as_ref().map_or(0, |r| r.len() as u64),
                collapsed: self.collapsed(),
            }),
            Pages::Runs { ahead, .. } => *ahead,
        }
    }

    /// What the job keeps to check the store's work once it returns.
    pub(crate) fn tally(&self) -> Arc<Tally> {
        Arc::clone(&self.tally)
    }

    /// The next page; `None` once every record was read. A streamed day's
    /// page holds at most `max_rows` records and about `max_bytes` of keys
    /// and values (a single larger record travels alone); a day fetched
    /// whole is one page, whatever the bounds.
    ///
    /// # Errors
    ///
    /// [`Error::Spill`]: a temporary file could not be read.
    pub fn next_page(&mut self, max_rows: usize, max_bytes: usize) -> Result<Option<Vec<Record>>> {
        let tally = &self.tally;
        match &mut self.pages {
            Pages::Whole { records, .. } => {
                let page = records.take().filter(|page| !page.is_empty());
                if let Some(page) = &page {
                    tally.read.store(page.len() as u64, Relaxed);
                }
                tally.done.store(true, Relaxed);
                Ok(page)
            }
            Pages::Runs {
                merge,
                last_key,
                digest,
                ahead,
                ..
            } => {
                let mut page: Vec<Record> = Vec::new();
                let mut bytes = 0usize;
                let mut collapsed = 0;
                while page.len() < max_rows.max(1) && (page.is_empty() || bytes < max_bytes) {
                    let previous = page.last().map(Record::key).or(last_key.as_deref());
                    let Some(record) = merge.next_winner(previous, &mut collapsed)? else {
                        break;
                    };
                    if ahead.is_none() {
                        digest.update(&record);
                    }
                    bytes += record.key().len() + record.value().len();
                    page.push(record);
                }
                if let Some(last) = page.last() {
                    *last_key = Some(last.key().to_owned());
                }
                tally.read.fetch_add(page.len() as u64, Relaxed);
                tally.collapsed.fetch_add(collapsed, Relaxed);
                if merge.is_empty() {
                    tally.done.store(true, Relaxed);
                }
                Ok((!page.is_empty()).then_some(page))
            }
        }
    }

    /// Makes the day's pages start again from the first: for a store that
    /// decides a streamed day page by page, as it reads them, and must
    /// decide it again (another writer's commit changed what it read).
    /// What was read is forgotten, as if no page had been.
    ///
    /// A day fetched whole is one page handed over by value: it is not
    /// read again, and this returns `false` once it was taken (the store
    /// holds it already); `true` otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::Spill`]: a temporary file could not be read again.
    pub fn rewind(&mut self) -> Result<bool> {
        match &mut self.pages {
            Pages::Whole { records, .. } => Ok(records.is_some()),
            Pages::Runs {
                runs,
                merge,
                collapsed,
                last_key,
                digest,
                ..
            } => {
                // The old merge's file handles share the offsets the new
                // one rewinds: it goes first.
                *merge = Merge::new(Vec::new())?;
                *merge = runs.merge()?;
                *last_key = None;
                *digest = DigestBuilder::default();
                self.tally.read.store(0, Relaxed);
                self.tally.collapsed.store(*collapsed, Relaxed);
                self.tally.done.store(merge.is_empty(), Relaxed);
                Ok(true)
            }
        }
    }

    /// Every remaining record, read page after page into one `Vec`: for a
    /// store that applies a day in memory.
    ///
    /// # Errors
    ///
    /// As [`DayWrite::next_page`].
    pub fn read_all(&mut self) -> Result<Vec<Record>> {
        let mut records = Vec::new();
        while let Some(page) = self.next_page(usize::MAX, usize::MAX)? {
            if records.is_empty() {
                records = page;
            } else {
                records.extend(page);
            }
        }
        Ok(records)
    }

    /// Whether every page was read.
    pub fn is_done(&self) -> bool {
        self.tally.done()
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

    /// When, and by which run, the day is applied, for its ledger row.
    pub fn stamp(&self) -> &SyncStamp {
        &self.stamp
    }

    /// The days a store locks while applying this day, in date order,
    /// without duplicates, known before the first page: the `event_date`
    /// of every record (shared: the watermarks of live records' days are
    /// read there, and a listing of one of these days must not interleave
    /// with this write to it). A listing also locks its own day,
    /// [`DayWrite::day`], exclusively.
    pub fn days(&self) -> &[NaiveDate] {
        &self.days
    }

    /// Whether the day holds no record at all (for a listing: an empty
    /// one).
    pub fn is_empty(&self) -> bool {
        self.fetched == 0
    }

    /// Records fetched, duplicates included.
    pub fn fetched(&self) -> u64 {
        self.fetched
    }

    /// Records handed out in pages so far (unique keys).
    pub fn read(&self) -> u64 {
        self.tally.read()
    }

    /// Duplicate keys collapsed away so far (all of them once
    /// [`DayWrite::is_done`]).
    pub fn collapsed(&self) -> u64 {
        self.tally.collapsed()
    }

    /// The digest of the day's records for its ledger row: known from the
    /// start for a day fetched whole, and of the records read so far for a
    /// streamed one (the day's, once [`DayWrite::is_done`]). Either way it
    /// equals [`Digest::of`] the same records.
    ///
    /// A day whose records include some of other days (lenient event
    /// dates) has its digest [marked](Digest::covering_other_days), so that
    /// a purge of any tombstone makes its next skip-unchanged run apply.
    pub fn digest(&self) -> Digest {
        let digest = match &self.pages {
            Pages::Whole { digest, .. } => *digest,
            Pages::Runs {
                ahead: Some(ahead), ..
            } => ahead.digest,
            Pages::Runs { digest, .. } => digest.finish(),
        };
        if self.days.iter().any(|d| *d != self.day) {
            digest.covering_other_days()
        } else {
            digest
        }
    }

    /// Whether a listing may turn `would_delete` of the day's `live` rows
    /// into tombstones, under the job's [`ReplaceGuard`]. A store asks
    /// inside its transaction, after merging every page, with the number
    /// of the day's live rows before the listing's tombstones; on an error
    /// it rolls back and returns the error, so a refused replace writes
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`Error::ReplaceRefused`] when the guard refuses.
    pub fn check_replace(&self, would_delete: u64, live: u64) -> Result<()> {
        match self.guard.check(self.is_empty(), would_delete, live) {
            None => Ok(()),
            Some(reason) => Err(Error::ReplaceRefused {
                day: self.day,
                would_delete,
                live,
                reason,
            }),
        }
    }

    /// The ledger row a successful apply writes for the day, in its own
    /// transaction, given what the apply did: synced now, by this run, no
    /// failure (`listing_watermark` is left to the store, which raises it),
    /// with its [`Timing`] so far. Ask after the last page, just before
    /// writing the row.
    pub fn synced(&self, counts: Counts) -> SyncedDay {
        debug_assert!(
            self.is_done(),
            "the ledger row of a day not read to its end"
        );
        SyncedDay::new(
            self.stamp.at,
            self.stamp.run_id.clone(),
            self.mode,
            self.as_of(),
            self.digest(),
            Counts {
                collapsed: self.collapsed(),
                ..counts
            },
        )
        .with_timing(Some(self.timing()))
    }
}
