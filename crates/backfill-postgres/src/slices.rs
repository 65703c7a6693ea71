//! How a day's pages are cut into statements: [`Slices`] of records (and a
//! listing's lacked keys) for the writes, [`KeyRanges`] of a listing's keys
//! for the reads of what it lacks. Each bounded in rows and bytes, so that
//! no statement nears Postgres' 1 GiB message limit.

use backfill_core::Record;

/// What a record costs in a statement beyond its key and value: array
/// element lengths, the date and the instant (28 bytes), rounded up.
const ROW_OVERHEAD: usize = 64;

/// What a listing's key costs in a statement beyond its bytes.
const KEY_OVERHEAD: usize = 16;

/// One statement's share of a page: consecutive records, and a listing's
/// lacked keys of the same key range (after the previous slice's last key
/// or key, up to and including its own last).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Slice<'a> {
    pub(crate) records: &'a [Record],
    pub(crate) lacked: &'a [String],
}

/// Consecutive slices of a page's records and a listing's lacked keys
/// (both sorted, no key in both), merged in key order, each at most `rows`
/// records and keys and `bytes` bytes (key, value and [`ROW_OVERHEAD`] per
/// record, key and [`KEY_OVERHEAD`] per lacked key), and never empty: a
/// record larger than `bytes` travels alone.
#[derive(Debug)]
pub(crate) struct Slices<'a> {
    records: &'a [Record],
    lacked: &'a [String],
    rows: usize,
    bytes: usize,
}

impl<'a> Slices<'a> {
    pub(crate) fn new(
        records: &'a [Record],
        lacked: &'a [String],
        rows: usize,
        bytes: usize,
    ) -> Self {
        Self {
            records,
            lacked,
            rows: rows.max(1),
            bytes,
        }
    }
}

impl<'a> Iterator for Slices<'a> {
    type Item = Slice<'a>;

    fn next(&mut self) -> Option<Slice<'a>> {
        if self.records.is_empty() && self.lacked.is_empty() {
            return None;
        }
        let (mut r, mut k, mut size) = (0, 0, 0);
        while r + k < self.rows {
            let record = self.records.get(r);
            let key = self.lacked.get(k);
            let (is_record, cost) = match (record, key) {
                (None, None) => break,
                (Some(rec), Some(key)) if rec.key() < key.as_str() => {
                    (true, rec.key().len() + rec.value().len() + ROW_OVERHEAD)
                }
                (Some(rec), None) => (true, rec.key().len() + rec.value().len() + ROW_OVERHEAD),
                (_, Some(key)) => (false, key.len() + KEY_OVERHEAD),
            };
            size += cost;
            if r + k > 0 && size > self.bytes {
                break;
            }
            match is_record {
                true => r += 1,
                false => k += 1,
            }
        }
        let (records, rest) = self.records.split_at(r);
        self.records = rest;
        let (lacked, rest) = self.lacked.split_at(k);
        self.lacked = rest;
        Some(Slice { records, lacked })
    }
}

/// One page of a listing cut into consecutive key ranges, each read in one
/// statement of at most `bytes` bytes of keys: `(after, upto]` of the key
/// space (`None`: unbounded) and the listing's keys inside it. The first
/// range starts after the previous page's last key (`after`), each ends at
/// its own last key, and the last page's last range runs to the end of
/// the key space: the ranges of a day's pages cover the whole key space
/// (a listing of no page reads it whole, `Unlisted::rest` in `write.rs`),
/// in key order, so that every live row of the day is judged once, and a
/// day of millions of keys never builds one message near Postgres' 1 GiB
/// limit.
#[derive(Debug)]
pub(crate) struct KeyRanges<'a> {
    rest: &'a [Record],
    bytes: usize,
    after: Option<&'a str>,
    last_page: bool,
}

/// One range of [`KeyRanges`].
#[derive(Debug, PartialEq)]
pub(crate) struct KeyRange<'a> {
    pub(crate) after: Option<&'a str>,
    pub(crate) upto: Option<&'a str>,
    pub(crate) keys: Vec<&'a str>,
}

impl<'a> KeyRanges<'a> {
    pub(crate) fn new(
        page: &'a [Record],
        bytes: usize,
        after: Option<&'a str>,
        last_page: bool,
    ) -> Self {
        Self {
            rest: page,
            bytes,
            after,
            last_page,
        }
    }
}

impl<'a> Iterator for KeyRanges<'a> {
    type Item = KeyRange<'a>;

    fn next(&mut self) -> Option<KeyRange<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        let mut size = 0;
        let mut len = 0;
        for record in self.rest {
            size += record.key().len() + KEY_OVERHEAD;
            if len > 0 && size > self.bytes {
                break;
            }
            len += 1;
        }
        let (range, rest) = self.rest.split_at(len);
        self.rest = rest;
        let last = range.last().map(Record::key);
        let upto = match rest.is_empty() && self.last_page {
            true => None,
            false => last,
        };
        Some(KeyRange {
            after: std::mem::replace(&mut self.after, last),
            upto,
            keys: range.iter().map(Record::key).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone, Utc};

    fn records(sizes: &[usize]) -> Vec<Record> {
        let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        sizes
            .iter()
            .enumerate()
            .map(|(i, n)| Record::new(format!("{i:04}"), day, "v".repeat(*n), at).unwrap())
            .collect()
    }

    fn lengths(records: &[Record], rows: usize, bytes: usize) -> Vec<usize> {
        Slices::new(records, &[], rows, bytes)
            .map(|s| s.records.len())
            .collect()
    }

    /// One record's cost with a 4-byte key and an `n`-byte value.
    fn cost(n: usize) -> usize {
        4 + n + ROW_OVERHEAD
    }

    #[test]
    fn slices_are_bounded_by_rows() {
        let r = records(&[1; 7]);
        assert_eq!(lengths(&r, 3, usize::MAX), [3, 3, 1]);
        assert_eq!(lengths(&r, 7, usize::MAX), [7]);
        assert_eq!(lengths(&r, 0, usize::MAX), [1; 7]);
        assert!(lengths(&[], 3, 100).is_empty());
    }

    #[test]
    fn slices_are_bounded_by_bytes() {
        let r = records(&[100, 100, 100, 100, 100]);
        assert_eq!(lengths(&r, 100, 2 * cost(100)), [2, 2, 1]);
        assert_eq!(lengths(&r, 100, 2 * cost(100) - 1), [1, 1, 1, 1, 1]);
        assert_eq!(lengths(&r, 2, 10 * cost(100)), [2, 2, 1]);
    }

    /// A listing's lacked keys go into the slices of their key range, in
    /// key order with the records, counted against both bounds.
    #[test]
    fn lacked_keys_share_the_slices_of_their_range() {
        // Records "0000".."0004", lacked keys between and after them.
        let r = records(&[1; 5]);
        let lacked: Vec<String> = ["0000a", "0000b", "0002a", "0004a"]
            .map(String::from)
            .to_vec();
        let shape = |rows, bytes| -> Vec<(Vec<&str>, Vec<&str>)> {
            Slices::new(&r, &lacked, rows, bytes)
                .map(|s| {
                    (
                        s.records.iter().map(Record::key).collect(),
                        s.lacked.iter().map(String::as_str).collect(),
                    )
                })
                .collect()
        };
        assert_eq!(
            shape(3, usize::MAX),
            [
                (vec!["0000"], vec!["0000a", "0000b"]),
                (vec!["0001", "0002"], vec!["0002a"]),
                (vec!["0003", "0004"], vec!["0004a"]),
            ]
        );
        // Every record and key once, in order, whatever the bounds.
        for (rows, bytes) in [(1, usize::MAX), (2, 30), (100, 1), (4, 50)] {
            let slices: Vec<Slice<'_>> = Slices::new(&r, &lacked, rows, bytes).collect();
            assert!(slices.iter().all(|s| s.records.len() + s.lacked.len() >= 1));
            let mut all: Vec<&str> = Vec::new();
            for s in &slices {
                assert!(s.records.len() + s.lacked.len() <= rows.max(1));
                let mut keys: Vec<&str> = s.records.iter().map(Record::key).collect();
                keys.extend(s.lacked.iter().map(String::as_str));
                keys.sort_unstable();
                all.extend(keys);
            }
            let mut expected: Vec<&str> = r.iter().map(Record::key).collect();
            expected.extend(lacked.iter().map(String::as_str));
            expected.sort_unstable();
            assert_eq!(all, expected, "rows {rows}, bytes {bytes}");
        }
        // Tombstones alone: the rest of the key space after the last page.
        assert_eq!(Slices::new(&[], &lacked, 3, usize::MAX).count(), 2);
    }

    fn ranges<'a>(
        records: &'a [Record],
        bytes: usize,
        after: Option<&'a str>,
        last: bool,
    ) -> Vec<(Option<&'a str>, Option<&'a str>, usize)> {
        KeyRanges::new(records, bytes, after, last)
            .map(|r| (r.after, r.upto, r.keys.len()))
            .collect()
    }

    #[test]
    fn key_ranges_cover_the_key_space_in_order() {
        // Keys "0000".."0006": 4 bytes each, 20 with the overhead.
        let r = records(&[1; 7]);
        let per_key = 4 + KEY_OVERHEAD;
        assert_eq!(ranges(&r, 7 * per_key, None, true), [(None, None, 7)]);
        assert_eq!(
            ranges(&r, 3 * per_key, None, true),
            [
                (None, Some("0002"), 3),
                (Some("0002"), Some("0005"), 3),
                (Some("0005"), None, 1),
            ]
        );
        // A page that is not the last ends at its last key; the next one
        // starts after it.
        assert_eq!(
            ranges(&r[..3], 2 * per_key, None, false),
            [(None, Some("0001"), 2), (Some("0001"), Some("0002"), 1)]
        );
        assert_eq!(
            ranges(&r[3..], 100 * per_key, Some("0002"), true),
            [(Some("0002"), None, 4)]
        );
        // A key larger than a range travels alone.
        assert_eq!(
            ranges(&r[..2], 1, None, true),
            [(None, Some("0000"), 1), (Some("0000"), None, 1)]
        );
        // No keys, no range: the caller reads what is left.
        assert!(ranges(&[], 100, Some("0002"), true).is_empty());
        let keys: Vec<&str> = KeyRanges::new(&r, per_key, None, true)
            .flat_map(|r| r.keys)
            .collect();
        assert_eq!(keys, r.iter().map(Record::key).collect::<Vec<_>>());
    }

    #[test]
    fn a_record_larger_than_a_slice_travels_alone() {
        let r = records(&[10, 1_000, 10, 10]);
        assert_eq!(lengths(&r, 100, 2 * cost(10)), [1, 1, 2]);
        let slices: Vec<&[Record]> = Slices::new(&r, &[], 100, 1).map(|s| s.records).collect();
        assert_eq!(slices.concat(), r, "every record, in order, once");
    }
}
