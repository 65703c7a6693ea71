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
    sort_winner_first(records);
    records.dedup_by(|later, first| later.key() == first.key());
    (before - records.len()) as u64
}

/// Records from which [`sort_winner_first`] sorts by key prefixes.
const PREFIX_SORT: usize = 64;

/// Sorts `records` by [`winner_first`]. A larger batch is sorted as pairs
/// of its keys' first eight bytes and its positions, the records then
/// moved once into that order: most comparisons are of two integers, not
/// of two strings through their pointers, and a record is not moved at
/// every step of the sort. Keys whose first eight bytes are equal are
/// compared whole.
fn sort_winner_first(records: &mut Vec<Record>) {
    if records.len() < PREFIX_SORT || u32::try_from(records.len()).is_err() {
        records.sort_unstable_by(winner_first);
        return;
    }
    let mut order: Vec<(u64, u32)> = records
        .iter()
        .zip(0u32..)
        .map(|(r, i)| (key_prefix(r.key()), i))
        .collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| winner_first(&records[a.1 as usize], &records[b.1 as usize]))
    });
    let mut taken: Vec<Option<Record>> = records.drain(..).map(Some).collect();
    records.extend(order.iter().filter_map(|&(_, i)| taken[i as usize].take()));
}

/// A key's first eight bytes as a big-endian integer, zero after a
/// shorter key's end: two keys whose prefixes differ are in the order of
/// their prefixes (a key that ends first is the smaller, as its padding is
/// the smallest byte), and only keys with equal prefixes need comparing
/// whole.
fn key_prefix(key: &str) -> u64 {
    let mut prefix = [0u8; 8];
    let bytes = key.as_bytes();
    let n = bytes.len().min(8);
    prefix[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(prefix)
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone, Utc};

    /// The prefix sort orders as the comparison does, record for record:
    /// keys shorter than, as long as and longer than a prefix, sharing
    /// their first eight bytes or not, multi-byte characters, a byte
    /// beyond the prefix deciding, and one key in several versions.
    #[test]
    fn the_prefix_sort_orders_as_the_comparison() {
        let day = NaiveDate::from_ymd_opt(2026, 5, 1).unwrap();
        let mut rng = fastrand::Rng::with_seed(11);
        let stems = [
            "",
            "a",
            "ab",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "é",
            "zz\u{7f}",
            "ÿÿÿÿ",
        ];
        for n in [PREFIX_SORT - 1, PREFIX_SORT, 500, 3_000] {
            let records: Vec<Record> = (0..n)
                .map(|_| {
                    let stem = stems[rng.usize(..stems.len())];
                    let key = match rng.u8(..3) {
                        0 => format!("{stem}{}", rng.u8(..4)),
                        1 => format!("{stem}{}", char::from(b'a' + rng.u8(..3))),
                        _ => format!("{stem}{}x{}", rng.u8(..2), rng.u16(..300)),
                    };
                    let at = Utc.timestamp_opt(1_780_000_000 + i64::from(rng.u8(..4)), 0);
                    let r = Record::new(key, day, format!("v{}", rng.u8(..3)), at.unwrap());
                    let r = r.unwrap();
                    match rng.u8(..8) {
                        0 => r.to_tombstone(),
                        _ => r,
                    }
                })
                .collect();
            let mut expected = records.clone();
            expected.sort_by(winner_first);
            let mut sorted = records.clone();
            sort_winner_first(&mut sorted);
            // Records equal by the comparison (same key and version) may
            // come in either order; everything else in the one order.
            assert_eq!(sorted.len(), expected.len());
            for (i, (a, b)) in sorted.iter().zip(&expected).enumerate() {
                assert_eq!(winner_first(a, b), Ordering::Equal, "{n} records, at {i}");
            }
            assert!(sorted
                .windows(2)
                .all(|w| winner_first(&w[0], &w[1]).is_le()));
            let mut as_set = sorted.clone();
            as_set.sort_by(|a, b| winner_first(a, b).then_with(|| a.value().cmp(b.value())));
            let mut expected_set = records;
            expected_set.sort_by(|a, b| winner_first(a, b).then_with(|| a.value().cmp(b.value())));
            assert_eq!(as_set, expected_set, "the same records, none lost");
        }
    }
}
