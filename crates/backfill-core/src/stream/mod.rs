//! A day's records as pages, for [`Store::apply`](crate::Store::apply):
//! [`DayWrite`], and how a streamed day becomes one.
//!
//! - `ingest.rs`: a stream's chunks validated as they arrive, kept as
//!   sorted runs (in memory up to a budget, beyond it in temporary files);
//! - `merge.rs`: the collapse to each key's winner, and the k-way merge of
//!   the runs;
//! - `codec.rs`: a run's file format;
//! - `day.rs`: [`DayWrite`], the day as a store reads it, a batch or a
//!   stream alike.

mod codec;
mod day;
mod ingest;
mod merge;

pub use self::day::DayWrite;
pub(crate) use self::day::{Header, Tally};
pub(crate) use self::ingest::Ingest;
pub(crate) use self::merge::sort_and_collapse;

/// How much of a streamed day a job holds in memory by default before it
/// writes a sorted run to a temporary file: 64 MiB of records (keys and
/// values plus a fixed overhead per record).
pub const DEFAULT_STREAM_MEMORY: usize = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::Mode;
    use crate::error::Error;
    use crate::guard::ReplaceGuard;
    use crate::ledger::{Digest, SyncStamp};
    use crate::record::{EventDates, Record};
    use chrono::{NaiveDate, TimeZone, Utc};

    fn day() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 5, 1).unwrap()
    }

    fn record(key: &str, value: &str, minute: u32) -> Record {
        let at = Utc.with_ymd_and_hms(2026, 5, 1, 0, minute, 0).unwrap();
        Record::new(key, day(), value, at).unwrap()
    }

    fn header() -> Header {
        Header {
            day: day(),
            mode: Mode::Merge,
            as_of: Utc::now(),
            guard: ReplaceGuard::default(),
            stamp: SyncStamp {
                at: Utc::now(),
                run_id: None,
            },
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
                    let mut pages = ingest.finish(header(), false).unwrap();
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
        let mut pages = ingest.finish(header(), false).unwrap();
        let mut sizes = Vec::new();
        while let Some(page) = pages.next_page(100, 100).unwrap() {
            sizes.push(page.len());
        }
        assert_eq!(sizes, [2, 1]);
    }
}
