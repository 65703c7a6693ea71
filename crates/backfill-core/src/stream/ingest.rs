//! Receiving a streamed day: chunks validated as they arrive, kept as
//! sorted runs, in memory up to a budget and beyond it in temporary files.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Seek};

use chrono::NaiveDate;

use super::codec::encode;
use super::day::{Ahead, DayWrite, Header};
use super::merge::{sort_and_collapse, spill_error, Merge, Source};
use crate::error::{Error, Result};
use crate::ledger::DigestBuilder;
use crate::record::{EventDates, Record};

/// Runs kept in temporary files at most; beyond, they are merged into one
/// (so a long day with a small budget never runs out of file handles).
const MAX_RUNS: usize = 64;

/// What a record weighs against the memory budget.
fn weight(record: &Record) -> usize {
    record.key().len() + record.value().len() + std::mem::size_of::<Record>()
}

/// A streamed day's sorted runs once its stream has ended: in temporary
/// files, and the last one in memory.
pub(crate) struct Runs {
    files: Vec<File>,
    last: std::sync::Arc<Vec<Record>>,
}

impl Runs {
    /// Their merge, from the start of every run.
    pub(super) fn merge(&self) -> Result<Merge<'static>> {
        let mut sources = Vec::with_capacity(self.files.len() + 1);
        for run in &self.files {
            // A clone shares the file's offset: rewound for each merge.
            let mut file = run.try_clone().map_err(spill_error)?;
            file.rewind().map_err(spill_error)?;
            sources.push(Source::File(BufReader::with_capacity(1 << 20, file)));
        }
        sources.push(Source::Shared(std::sync::Arc::clone(&self.last), 0));
        Merge::new(sources)
    }
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
        while let Some(record) =
            merge.next_winner(last.as_ref().map(Record::key), &mut self.collapsed)?
        {
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

    /// The day's write, once the stream has ended; with `ahead`, its
    /// digest is known before its first page (one more pass over the runs,
    /// reading them without taking them).
    pub(crate) fn finish(mut self, header: Header, ahead: bool) -> Result<DayWrite> {
        let mut last = std::mem::take(&mut self.buffer);
        self.collapsed += sort_and_collapse(&mut last);
        let ahead = match ahead {
            true => Some(self.ahead(&last)?),
            false => None,
        };
        let runs = Runs {
            files: self.runs,
            last: std::sync::Arc::new(last),
        };
        let merge = runs.merge()?;
        Ok(DayWrite::runs(
            header,
            self.days.into_iter().collect(),
            self.fetched,
            self.collapsed,
            (runs, merge),
            ahead,
        ))
    }

    /// What the day's pages will hold, found by merging the runs (from
    /// their start, then rewound) and `last`, the run still in memory.
    fn ahead(&mut self, last: &[Record]) -> Result<Ahead> {
        let mut sources = Vec::with_capacity(self.runs.len() + 1);
        for run in &self.runs {
            // A clone shares the file's offset: rewound for this pass, and
            // again after it for the pages.
            let mut file = run.try_clone().map_err(spill_error)?;
            file.rewind().map_err(spill_error)?;
            sources.push(Source::File(BufReader::with_capacity(1 << 20, file)));
        }
        sources.push(Source::Borrowed(last.iter()));
        let mut merge = Merge::new(sources)?;
        let mut digest = DigestBuilder::default();
        let (mut records, mut collapsed) = (0, self.collapsed);
        let mut previous: Option<Record> = None;
        while let Some(record) =
            merge.next_winner(previous.as_ref().map(Record::key), &mut collapsed)?
        {
            digest.update(&record);
            records += 1;
            previous = Some(record);
        }
        drop(merge);
        for run in &mut self.runs {
            run.rewind().map_err(spill_error)?;
        }
        Ok(Ahead {
            digest: digest.finish(),
            records,
            collapsed,
        })
    }
}
