//! Streamed days ([`upsert_stream`]) through `Store::apply`: one
//! transaction across every page, one page in memory at a time, and the
//! very rows, counts and ledger row of the same records as one batch.

use std::convert::Infallible;

use backfill_core::conformance::fixtures::{at, day, listing, rec, tomb};
use backfill_core::{
    upsert, upsert_stream, Counts, Error, MemoryStore, Mode, Record, ReplaceGuard, Store,
    WriteOptions,
};
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::{DateTime, Utc};
use futures_util::stream;

use super::{admin, blocked_behind, insert_behind_the_store, physical_rows};

fn live(key: &str, value: &str, secs: i64) -> Record {
    rec(key, day(0), value, at(secs))
}

fn k(i: usize) -> String {
    format!("p/k{i:03}")
}

async fn open(url: &str, rows: usize) -> PostgresStore {
    PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_rows(rows)
        .connect(url)
        .await
        .unwrap()
}

/// `records` as a fetch's stream, `size` records a chunk.
async fn stream_in(
    store: &dyn Store,
    records: &[Record],
    size: usize,
    options: WriteOptions,
) -> backfill_core::Result<Counts> {
    let chunks: Vec<Result<Vec<Record>, Infallible>> =
        records.chunks(size).map(|c| Ok(c.to_vec())).collect();
    upsert_stream(store, day(0), stream::iter(chunks), options).await
}

/// What a day's ledger row says, but for when it was written.
async fn ledger(store: &dyn Store) -> Option<(Counts, String, Mode, Option<DateTime<Utc>>)> {
    let entry = store.ledger(day(0)..=day(0)).await.unwrap().pop()?;
    let synced = entry.synced?;
    Some((
        synced.counts,
        format!("{} {:?}", synced.digest, entry.listing_watermark),
        synced.mode,
        synced.as_of,
    ))
}

/// Stored before: every other key of the stream (old), a tombstone, a
/// row newer than the listing, and rows the listing lacks before its
/// first key, between its pages' keys and after its last.
fn seed() -> Vec<Record> {
    let mut seed: Vec<Record> = (0..60)
        .step_by(2)
        .map(|i| live(&k(i), "old", 100))
        .collect();
    seed.push(tomb(&(k(50) + "t"), day(0), at(100)));
    seed.push(live(&(k(13) + "y"), "newer than the listing", 900));
    for unlisted in [
        "p/a".to_owned(),
        k(7) + "x",
        k(20) + "x",
        k(41) + "x",
        "p/z".into(),
    ] {
        seed.push(live(&unlisted, "unlisted", 100));
    }
    seed
}

/// The day's fetch: newer, identical, older and new keys, tombstones, and
/// duplicates of the same keys far apart (in different chunks and pages).
fn fetch() -> Vec<Record> {
    let mut records: Vec<Record> = (0..60)
        .map(|i| match i % 3 {
            0 => live(&k(i), "new", 200),
            1 => live(&k(i), "old", 100),
            _ => live(&k(i), "older", 50),
        })
        .collect();
    records[10] = tomb(&k(10), day(0), at(300));
    records[11] = tomb(&k(11), day(0), at(300));
    records.reverse();
    records.insert(3, live(&k(0), "losing", 150));
    records.push(live(&k(30), "losing", 150));
    records.insert(20, live(&k(45), "winning", 250));
    records
}

/// A day streamed in pages of 3 records (chunks of 7) leaves the rows,
/// tombstones, counts and ledger row of the same records as one batch, in
/// merge and replace mode: the listing's tombstones before its first key,
/// between its pages and after its last, and the guard asked with the
/// batch's numbers (its limit set so that one live row fewer refuses).
#[tokio::test]
async fn many_pages_equal_one_batch() {
    let Some(url) = testkit::url().await else {
        return;
    };
    // The day's live rows before a listing tombstones anything.
    let merged = MemoryStore::new();
    upsert(&merged, day(0), seed(), WriteOptions::default())
        .await
        .unwrap();
    upsert(&merged, day(0), fetch(), WriteOptions::default())
        .await
        .unwrap();
    let live_before = merged.day_rows(day(0)).await.unwrap().len() as f64;
    let guard = ReplaceGuard::default().max_delete_fraction(5.0 / (live_before - 0.5));
    let listing = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(500))
        .replace_guard(guard);

    for options in [WriteOptions::default(), listing] {
        let (paged, whole) = (open(&url, 3).await, open(&url, 10_000).await);
        let reference = MemoryStore::new();
        for store in [&paged as &dyn Store, &whole, &reference] {
            upsert(store, day(0), seed(), WriteOptions::default())
                .await
                .unwrap();
        }
        let expected = upsert(&reference, day(0), fetch(), options).await.unwrap();
        let batch = upsert(&whole, day(0), fetch(), options).await.unwrap();
        let streamed = stream_in(&paged, &fetch(), 7, options).await.unwrap();
        assert_eq!(batch, expected, "{:?}: the batch", options.mode);
        assert_eq!(streamed, expected, "{:?}: the stream", options.mode);
        assert_eq!(streamed.collapsed, 3);
        if options.mode == Mode::Replace {
            assert_eq!(streamed.unlisted, 5, "before, between and after the pages");
        }
        let rows = reference.rows_with_tombstones().await.unwrap();
        assert_eq!(paged.rows_with_tombstones().await.unwrap(), rows);
        assert_eq!(whole.rows_with_tombstones().await.unwrap(), rows);
        let entry = ledger(&reference).await;
        assert!(entry.is_some());
        assert_eq!(ledger(&paged).await, entry);
        assert_eq!(ledger(&whole).await, entry);

        let again = stream_in(&paged, &fetch(), 7, options).await.unwrap();
        assert_eq!(again.written(), 0, "{:?}: a re-run wrote", options.mode);
    }
}

/// A store error in the last page (a trigger refuses one key) after many
/// pages were written, copied and merged: the day fails, and the table
/// and the ledger are as they were.
#[tokio::test]
async fn an_error_in_a_late_page_leaves_nothing_of_the_day() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = open(&url, 2).await;
    upsert(&store, day(0), seed(), WriteOptions::default())
        .await
        .unwrap();
    let admin = admin(&url).await;
    let table = format!("\"{}\".\"{}\"", store.schema(), store.table());
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION \"{schema}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.key = 'p/zz-refused' THEN RAISE EXCEPTION 'refused by a trigger'; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {table}
                 FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse();",
            schema = store.schema()
        ))
        .await
        .unwrap();
    let before = (
        store.rows_with_tombstones().await.unwrap(),
        ledger(&store).await,
    );
    // Stored keys (merged), fresh ones (copied), then the refused key last.
    let mut records = fetch();
    records.extend((0..40).map(|i| live(&format!("p/m{i:03}"), "fresh", 10)));
    records.push(live("p/zz-refused", "v", 10));
    let listing = listing(at(500));
    for options in [WriteOptions::default(), listing] {
        let error = stream_in(&store, &records, 5, options)
            .await
            .expect_err("the trigger refuses the last page");
        assert!(matches!(error, Error::Backend { .. }), "{error}");
        assert!(
            error.to_string().contains("refused by a trigger"),
            "{error}"
        );
        let after = (
            store.rows_with_tombstones().await.unwrap(),
            ledger(&store).await,
        );
        assert_eq!(after, before, "{:?}: the day changed", options.mode);
    }
}

/// Another writer inserts keys of two later pages and holds them
/// uncommitted while a stream of 100 pages is applied: one in a page that
/// is copied (its COPY waits, then loses the race: that page alone is
/// rolled back to its savepoint and merged, the pages before it stay as
/// copied, never to be read again), one past the savepoints an apply may
/// take (committed by the time its page is checked: merged). Every count
/// is exact, the rows the
/// reference's, and no key is stored twice.
#[tokio::test]
async fn a_concurrent_writer_in_a_later_page_is_counted_once() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = open(&url, 2).await;
    let reference = MemoryStore::new();
    let c = |i: usize| format!("p/c{i:03}");
    let before: Vec<Record> = (0..4).map(|i| live(&c(i), "old", 5)).collect();
    // Older than ours, and newer.
    let theirs = vec![live(&c(31), "theirs", 5), live(&c(181), "theirs", 20)];
    let ours: Vec<Record> = (0..200).map(|i| live(&c(i), "ours", 10)).collect();
    for target in [&store as &dyn Store, &reference] {
        upsert(target, day(0), before.clone(), WriteOptions::default())
            .await
            .unwrap();
    }
    upsert(&reference, day(0), theirs.clone(), WriteOptions::default())
        .await
        .unwrap();
    let expected = upsert(&reference, day(0), ours.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (expected.inserted, expected.updated, expected.stale),
        (194, 5, 1)
    );

    let other = admin(&url).await;
    other.batch_execute("BEGIN").await.unwrap();
    insert_behind_the_store(&other, &store, &theirs).await;
    let task = {
        let store = store.clone();
        tokio::spawn(async move { stream_in(&store, &ours, 16, WriteOptions::default()).await })
    };
    blocked_behind(&url, &other, 1).await;
    assert!(!task.is_finished(), "the COPY waits for the other writer");
    other.batch_execute("COMMIT").await.unwrap();
    let counts = task.await.unwrap().unwrap();
    assert_eq!(counts, expected);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
    assert_eq!(ledger(&store).await.unwrap().0, expected);
    assert_eq!(physical_rows(&store).await, 200);
}

/// Past the savepoints an apply may take, a COPY that loses a race to
/// another writer fails the day with a retryable error and leaves nothing
/// of it; the retry counts exactly.
#[tokio::test]
async fn a_race_lost_past_the_savepoints_rolls_the_day_back_for_a_retry() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = open(&url, 2).await;
    let reference = MemoryStore::new();
    let c = |i: usize| format!("p/c{i:03}");
    // Page 90 of 100: past the first 64 pages' savepoints.
    let theirs = vec![live(&c(181), "theirs", 20)];
    let ours: Vec<Record> = (0..200).map(|i| live(&c(i), "ours", 10)).collect();
    upsert(&reference, day(0), theirs.clone(), WriteOptions::default())
        .await
        .unwrap();
    let expected = upsert(&reference, day(0), ours.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((expected.inserted, expected.stale), (199, 1));

    let other = admin(&url).await;
    other.batch_execute("BEGIN").await.unwrap();
    insert_behind_the_store(&other, &store, &theirs).await;
    let task = {
        let store = store.clone();
        let ours = ours.clone();
        tokio::spawn(async move { stream_in(&store, &ours, 16, WriteOptions::default()).await })
    };
    blocked_behind(&url, &other, 1).await;
    other.batch_execute("COMMIT").await.unwrap();
    let error = task
        .await
        .unwrap()
        .expect_err("the lost race fails the apply");
    assert!(error.is_retryable(), "{error}");
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        theirs,
        "nothing of the day is left"
    );
    assert!(ledger(&store).await.is_none());

    let counts = stream_in(&store, &ours, 16, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(counts, expected);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
}
