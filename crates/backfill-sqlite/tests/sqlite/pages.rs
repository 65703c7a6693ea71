//! A streamed day written natively, a few records at a time
//! ([`SqliteStoreBuilder::page_rows`](backfill_sqlite::SqliteStoreBuilder::page_rows)):
//! over many pages, merges and listings leave exactly what the same records
//! leave as one batch (rows, tombstones, ledger row, counts), and an error
//! or a dropped call in a later page leaves nothing of the day.

use backfill_core::conformance::fixtures::{at, jan, listing, rec, tomb};
use backfill_core::{
    upsert, upsert_stream, Counts, EventDates, LedgerEntry, MemoryStore, Mode, Problem, Record,
    ReplaceGuard, Store, WriteOptions,
};
use backfill_core::{Error, Field};
use backfill_sqlite::SqliteStore;
use futures_util::{stream, FutureExt};

/// The day every test syncs.
const D: u32 = 10;

async fn paged(rows: usize) -> SqliteStore {
    SqliteStore::builder_in_memory()
        .page_rows(rows)
        .open()
        .await
        .unwrap()
}

/// `records` as a fetch's stream of chunks of `size`.
async fn streamed(
    store: &dyn Store,
    records: &[Record],
    size: usize,
    options: WriteOptions,
) -> backfill_core::Result<Counts> {
    let chunks: Vec<Result<Vec<Record>, std::io::Error>> =
        records.chunks(size).map(|c| Ok(c.to_vec())).collect();
    upsert_stream(store, jan(D), stream::iter(chunks), options).await
}

/// The ledger row of the day, with its `synced_at` (the wall clock of
/// each apply) left out.
async fn ledger(store: &dyn Store) -> Option<LedgerEntry> {
    let mut entry = store.ledger(jan(D)..=jan(D)).await.unwrap().pop()?;
    if let Some(synced) = entry.synced.as_mut() {
        synced.at = at(0);
    }
    Some(entry)
}

/// What the tests compare: every version, tombstones included, and the
/// day's ledger row.
async fn state(store: &dyn Store) -> (Vec<Record>, Option<LedgerEntry>) {
    (
        store.rows_with_tombstones().await.unwrap(),
        ledger(store).await,
    )
}

/// The state before the day: live rows of the day to update, keep, leave
/// unlisted (before, between and after the listing's keys), newer than
/// any listing, a tombstone, rows of the next day among them (also keys
/// the day's records move there), and each day's listing watermark at 50.
fn seed() -> Vec<(u32, Vec<Record>, WriteOptions)> {
    let mut d = Vec::new();
    let mut next = Vec::new();
    for i in 0..60 {
        // Even keys are in the day's fetch below; odd ones only here.
        d.push(rec(&format!("k{i:03}"), jan(D), "old", at(100)));
        next.push(rec(&format!("k{i:03}x"), jan(D + 1), "other day", at(100)));
    }
    for key in ["a-first", "a-second", "zz-last", "zz-later"] {
        d.push(rec(key, jan(D), "unlisted", at(100)));
    }
    d.push(rec("k031", jan(D), "newer than the listing", at(900)));
    d.push(tomb("k033", jan(D), at(100)));
    d.push(rec("k035", jan(D), "old", at(10)));
    // Earlier listings: a watermark at 50 on both days.
    let listing_at_50 = listing(at(50));
    vec![
        (D, vec![rec("k035", jan(D), "old", at(10))], listing_at_50),
        (
            D + 1,
            vec![rec("k035y", jan(D + 1), "v", at(10))],
            listing_at_50,
        ),
        (D, d, WriteOptions::default()),
        (D + 1, next, WriteOptions::default()),
    ]
}

/// The day's fetch, in the order a paginated upstream might return it
/// (not key order), with duplicates far apart: newer versions, identical
/// ones, stale ones, tombstones, new keys, versions at or before the
/// watermark (which arrive as tombstones), and records of the next day.
fn fetch() -> Vec<Record> {
    let mut records = Vec::new();
    let mut rng = fastrand_like(7);
    for i in (0..60).step_by(2) {
        let key = format!("k{i:03}");
        let r = match i % 10 {
            0 => rec(&key, jan(D), "new", at(200)),
            2 => rec(&key, jan(D), "old", at(100)),
            4 => rec(&key, jan(D), "stale", at(90)),
            6 => tomb(&key, jan(D), at(300)),
            _ => rec(&key, jan(D), "new", at(250)),
        };
        records.push(r);
    }
    for i in 0..25 {
        records.push(rec(&format!("n{i:03}"), jan(D), "fresh", at(150)));
    }
    // At or before the watermark of 50: written as tombstones.
    records.push(rec("n900-late", jan(D), "arrived late", at(40)));
    records.push(rec("k001x", jan(D + 1), "stale, of the next day", at(50)));
    // The next day's records in lenient mode, one over its own row, and
    // keys moving between the days.
    records.push(rec("k003x", jan(D + 1), "other day, newer", at(200)));
    records.push(rec("k005x", jan(D), "moved to the day", at(300)));
    records.push(rec("k007", jan(D + 1), "moved away from the day", at(300)));
    // Duplicates: losing and winning versions of keys above.
    records.push(rec("k000", jan(D), "new but older", at(199)));
    records.push(rec("k002", jan(D), "newest", at(260)));
    records.push(rec("n003", jan(D), "fresh", at(150)));
    records.push(tomb("n004", jan(D), at(150)));
    // Shuffled, deterministically.
    for i in (1..records.len()).rev() {
        records.swap(i, rng(i + 1));
    }
    records
}

/// A small deterministic shuffle (no dependency for it).
fn fastrand_like(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |bound| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % bound as u64) as usize
    }
}

/// Three stores given the same history: one writing a page of `rows`
/// records at a time, one SQLite store and the in-memory reference, both
/// given the day as one batch.
async fn seeded(rows: usize) -> (SqliteStore, SqliteStore, MemoryStore) {
    let (p, b, m) = (
        paged(rows).await,
        SqliteStore::open_in_memory().await.unwrap(),
        MemoryStore::new(),
    );
    for (d, records, options) in seed() {
        for store in [&p as &dyn Store, &b, &m] {
            upsert(store, jan(d), records.clone(), options)
                .await
                .unwrap();
        }
    }
    (p, b, m)
}

/// Every combination of page size, chunk size and spilling, in merge and
/// replace mode: the same counts, rows, tombstones and ledger row as the
/// day in one batch, in SQLite and in the reference store; and the day
/// re-streamed writes nothing.
async fn many_pages_equal_one_batch() {
    let listing = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(500))
        .event_dates(EventDates::Lenient);
    let merge = WriteOptions::default().event_dates(EventDates::Lenient);
    for (mode, options) in [("merge", merge), ("replace", listing)] {
        for rows in [1, 2, 3, 10, 1000] {
            for (chunk, memory) in [(1, 0), (7, 0), (7, usize::MAX), (1000, 0)] {
                let what = format!("{mode}: pages of {rows}, chunks of {chunk}, memory {memory}");
                let (p, b, m) = seeded(rows).await;
                let options = options.stream_memory(memory);
                let got = streamed(&p, &fetch(), chunk, options)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let expected = upsert(&b, jan(D), fetch(), options).await.unwrap();
                let reference = upsert(&m, jan(D), fetch(), options).await.unwrap();
                assert_eq!(expected, reference, "{what}: SQLite's batch path");
                assert_eq!(got, expected, "{what}: counts");
                assert_eq!(got.collapsed, 4, "{what}: collapsed");
                if mode == "replace" {
                    // The 30 odd keys k001…k059 but k031 (newer than
                    // the listing), k033 (a tombstone) and k007 (moved
                    // away), and the four before and after them.
                    assert_eq!(got.unlisted, 31, "{what}: unlisted");
                }
                let state_p = state(&p).await;
                assert_eq!(state_p, state(&b).await, "{what}: against SQLite");
                assert_eq!(state_p, state(&m).await, "{what}: against memory");

                let again = streamed(&p, &fetch(), chunk, options).await.unwrap();
                assert_eq!(again.written(), 0, "{what}: a re-run wrote");
            }
        }
    }
}

#[tokio::test]
async fn many_pages_equal_one_batch_on_a_current_thread_runtime() {
    many_pages_equal_one_batch().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pages_equal_one_batch_on_a_multi_thread_runtime() {
    many_pages_equal_one_batch().await;
}

/// A listing of 995 keys in pages of 7 over a day of 2 000 live rows,
/// every other one unlisted (so each page's gap and the range before the
/// first page hold some) and the last ten too (after the last page), on a
/// file: the unlisted ones, and only they, become tombstones.
#[tokio::test]
async fn a_listing_tombstones_what_the_whole_listing_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::builder(dir.path().join("db.sqlite"))
        .page_rows(7)
        .open()
        .await
        .unwrap();
    let reference = MemoryStore::new();
    let all: Vec<Record> = (0..2000)
        .map(|i| rec(&format!("key:{i:05}"), jan(D), "v", at(100)))
        .collect();
    let listed: Vec<Record> = all[..1990].iter().skip(1).step_by(2).cloned().collect();
    let options = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(500))
        .replace_guard(ReplaceGuard::default().max_delete_fraction(0.6));
    for s in [&store as &dyn Store, &reference] {
        upsert(s, jan(D), all.clone(), WriteOptions::default())
            .await
            .unwrap();
    }
    let got = streamed(&store, &listed, 100, options).await.unwrap();
    let expected = upsert(&reference, jan(D), listed.clone(), options)
        .await
        .unwrap();
    assert_eq!(got, expected);
    assert_eq!(
        (got.unchanged, got.unlisted, got.deleted),
        (995, 1005, 1005)
    );
    assert_eq!(store.day_rows(jan(D)).await.unwrap(), listed);
    assert_eq!(state(&store).await, state(&reference).await);
}

/// The guard is asked once, with the whole listing's totals (not a page's),
/// and a refusal leaves nothing: the same error as the one batch's.
#[tokio::test]
async fn the_guard_sees_the_whole_listing() {
    for fraction in [0.6, 0.3] {
        let (p, b, _) = seeded(3).await;
        let before = state(&p).await;
        let options = WriteOptions::default()
            .mode(Mode::Replace)
            .as_of(at(500))
            .event_dates(EventDates::Lenient)
            .replace_guard(ReplaceGuard::default().max_delete_fraction(fraction));
        let got = streamed(&p, &fetch(), 5, options).await;
        let expected = upsert(&b, jan(D), fetch(), options).await;
        // 31 of the day's live rows go, between 30% and 60% of them.
        assert_eq!(expected.is_ok(), fraction == 0.6, "{expected:?}");
        match (&got, &expected) {
            (Ok(got), Ok(expected)) => assert_eq!(got, expected, "{fraction}"),
            (
                Err(Error::ReplaceRefused {
                    would_delete, live, ..
                }),
                Err(Error::ReplaceRefused {
                    would_delete: w,
                    live: l,
                    ..
                }),
            ) => {
                assert_eq!((would_delete, live), (w, l), "{fraction}");
                assert_eq!(state(&p).await, before, "a refused listing wrote");
            }
            _ => panic!("{fraction}: streamed {got:?}, one batch {expected:?}"),
        }
        assert_eq!(state(&p).await, state(&b).await, "{fraction}");
    }
}

/// A value over the store's length limit in the day's last page (after
/// many pages were written) fails the day with the one batch's error and
/// leaves nothing of it: rows, tombstones and ledger row; the store then
/// applies the next day as usual.
#[tokio::test]
async fn an_error_in_a_later_page_leaves_nothing_of_the_day() {
    const LIMIT: u32 = 10_000;
    for mode in [Mode::Merge, Mode::Replace] {
        let store = SqliteStore::builder_in_memory()
            .length_limit(LIMIT)
            .page_rows(4)
            .open()
            .await
            .unwrap();
        let batch_store = SqliteStore::builder_in_memory()
            .length_limit(LIMIT)
            .open()
            .await
            .unwrap();
        let seed: Vec<Record> = (0..50)
            .map(|i| rec(&format!("k{i:03}"), jan(D), "old", at(100)))
            .collect();
        for s in [&store, &batch_store] {
            upsert(s, jan(D), seed.clone(), WriteOptions::default())
                .await
                .unwrap();
        }
        let before = state(&store).await;
        let mut records: Vec<Record> = (0..40)
            .map(|i| rec(&format!("k{i:03}"), jan(D), "new", at(200)))
            .collect();
        records.push(rec("zz", jan(D), &"v".repeat(LIMIT as usize), at(200)));
        let options = WriteOptions::default()
            .mode(mode)
            .as_of(at(500))
            .replace_guard(ReplaceGuard::off());
        let error = streamed(&store, &records, 3, options).await.unwrap_err();
        let batch_error = upsert(&batch_store, jan(D), records.clone(), options)
            .await
            .unwrap_err();
        match &error {
            Error::InvalidRecord {
                key,
                field: Field::Value,
                problem: Problem::TooLong { .. },
            } => assert_eq!(key, "zz"),
            other => panic!("{mode:?}: {other}"),
        }
        assert_eq!(error.to_string(), batch_error.to_string(), "{mode:?}");
        assert!(!error.is_retryable());
        assert_eq!(state(&store).await, before, "{mode:?}: the day was written");

        records.pop();
        let counts = streamed(&store, &records, 3, options).await.unwrap();
        assert_eq!(
            (counts.updated, counts.unlisted),
            (40, if mode == Mode::Replace { 10 } else { 0 })
        );
    }
}

/// A call dropped mid-day (a job's timeout, say) rolls back and frees the
/// connection: nothing of the day is written (the write cannot commit
/// without the ledger row, which only the caller's pages can give), and
/// the store applies the day again as usual.
#[tokio::test]
async fn a_dropped_call_leaves_nothing_and_frees_the_store() {
    let store = paged(1).await;
    let reference = MemoryStore::new();
    let records: Vec<Record> = (0..2000)
        .map(|i| rec(&format!("k{i:05}"), jan(D), "v", at(100)))
        .collect();
    let options = listing(at(500));
    let empty = state(&store).await;
    // One poll: the writer starts, takes the first pages, and the reader
    // waits for room in the channel; then the call is dropped.
    let first = streamed(&store, &records, 100, options).now_or_never();
    assert!(first.is_none(), "2 000 pages of one record in one poll");
    assert_eq!(state(&store).await, empty, "a dropped call wrote");
    let counts = streamed(&store, &records, 100, options).await.unwrap();
    let expected = upsert(&reference, jan(D), records, options).await.unwrap();
    assert_eq!(counts, expected);
    assert_eq!(counts.inserted, 2000);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
}
