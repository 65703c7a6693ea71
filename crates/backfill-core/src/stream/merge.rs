//! The k-way merge of a streamed day's sorted runs, and the collapse that
//! keeps each key's winning version.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::BufReader;

use super::codec::decode;
use crate::error::{Error, Result};
use crate::record::Record;

/// Key order, and within a key the winning version first.
pub(super) fn winner_first(a: &Record, b: &Record) -> Ordering {
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

/// A temporary file of a streamed day could not be written or read.
pub(super) fn spill_error(error: std::io::Error) -> Error {
    Error::Spill(error)
}

/// One run's records, in order.
pub(super) enum Source<'a> {
    /// A run in memory shared with the day that may read it again (each
    /// record cloned as the merge reaches it), from this index on.
    Shared(std::sync::Arc<Vec<Record>>, usize),
    /// A run in memory read without taking it (each record cloned as the
    /// merge reaches it): for a pass before the one that takes.
    Borrowed(std::slice::Iter<'a, Record>),
    File(BufReader<File>),
}

impl Source<'_> {
    pub(super) fn next(&mut self) -> Result<Option<Record>> {
        match self {
            Source::Shared(records, next) => {
                let record = records.get(*next).cloned();
                *next += 1;
                Ok(record)
            }
            Source::Borrowed(records) => Ok(records.next().cloned()),
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
pub(crate) struct Merge<'a> {
    sources: Vec<Source<'a>>,
    heap: BinaryHeap<Head>,
}

impl<'a> Merge<'a> {
    pub(super) fn new(mut sources: Vec<Source<'a>>) -> Result<Self> {
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

    pub(super) fn next(&mut self) -> Result<Option<Record>> {
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

    /// The next key's winner, passing over (and counting in `collapsed`)
    /// the losing versions of `previous`, the key taken last.
    pub(super) fn next_winner(
        &mut self,
        previous: Option<&str>,
        collapsed: &mut u64,
    ) -> Result<Option<Record>> {
        while let Some(record) = self.next()? {
            if previous == Some(record.key()) {
                *collapsed += 1;
                continue;
            }
            return Ok(Some(record));
        }
        Ok(None)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
