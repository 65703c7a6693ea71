//! The COPY of a chunk whose key range holds no stored row (no
//! speculative insertion), and the conflict-handling merge of every other
//! chunk. These tests race the COPY: another writer inserts keys of a
//! chunk found empty, and every count must still be exact and every row
//! the reference store's.

use backfill_core::conformance::fixtures::{at, day, rec, tomb};
use backfill_core::{upsert, Counts, MemoryStore, Record, Store, WriteOptions};
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;

use super::{admin, blocked_behind, insert_behind_the_store, physical_rows};

fn live(i: usize, value: &str, secs: i64) -> Record {
    rec(&format!("fp/{i:04}"), day(0), value, at(secs))
}

fn tombstone(i: usize, secs: i64) -> Record {
    tomb(&format!("fp/{i:04}"), day(0), at(secs))
}

/// `(inserted, updated, deleted, unchanged, stale)`.
fn split(c: &Counts) -> (u64, u64, u64, u64, u64) {
    (c.inserted, c.updated, c.deleted, c.unchanged, c.stale)
}

/// Another writer inserts four keys of our batch's last chunk, and holds
/// them uncommitted while we apply: our check finds that chunk's key range
/// empty, the COPY waits for that writer and, once it commits, fails with
/// `unique_violation`. Everything since the savepoint taken before the
/// first COPY is undone (the copied second chunk; the merged first one
/// came before it and stays) and every chunk from there is merged; the four keys are judged against the committed rows by
/// version. Every count is exact: nothing counted twice, nothing lost.
#[tokio::test]
async fn keys_inserted_after_the_check_are_judged_by_version_and_counted_once() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_rows(100)
        .connect(&url)
        .await
        .unwrap();
    let reference = MemoryStore::new();
    // Stored before: 0..50 older than ours, 50..60 identical, 60..70 newer.
    let before: Vec<Record> = (0..70)
        .map(|i| match i {
            0..50 => live(i, "old", 5),
            50..60 => live(i, "ours", 10),
            _ => live(i, "newer", 20),
        })
        .collect();
    // Theirs, in the last of our three chunks: older than ours, newer,
    // identical, and an older tombstone.
    let theirs = vec![
        live(250, "theirs", 5),
        live(260, "theirs", 20),
        live(270, "ours", 10),
        tombstone(280, 5),
    ];
    let ours: Vec<Record> = (0..300).map(|i| live(i, "ours", 10)).collect();
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
        split(&expected),
        (226 + 1, 50 + 1, 0, 10 + 1, 10 + 1),
        "the reference's counts: 280 comes back to life (inserted), 250 is updated"
    );

    let other = admin(&url).await;
    other.batch_execute("BEGIN").await.unwrap();
    insert_behind_the_store(&other, &store, &theirs).await;
    let task = {
        let store = store.clone();
        tokio::spawn(async move { upsert(&store, day(0), ours, WriteOptions::default()).await })
    };
    // Let our apply reach the last chunk and block on the other writer's keys.
    blocked_behind(&url, &other, 1).await;
    assert!(!task.is_finished(), "the COPY waits for the other writer");
    other.batch_execute("COMMIT").await.unwrap();
    let counts = task.await.unwrap().unwrap();
    assert_eq!(split(&counts), split(&expected));
    assert_eq!(counts, expected);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
    let ledger = store.ledger(day(0)..=day(0)).await.unwrap();
    assert_eq!(ledger[0].synced.as_ref().unwrap().counts, expected);
    // The undone COPY left dead tuples, never a second live one.
    assert_eq!(physical_rows(&store).await, 300);
}

/// The other writer gives up (rolls back) instead: the COPY that waited
/// for it goes ahead, and nothing is redone or miscounted.
#[tokio::test]
async fn a_concurrent_insert_rolled_back_leaves_the_copy_alone() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_rows(100)
        .connect(&url)
        .await
        .unwrap();
    let ours: Vec<Record> = (0..250).map(|i| live(i, "ours", 10)).collect();
    let other = admin(&url).await;
    other.batch_execute("BEGIN").await.unwrap();
    insert_behind_the_store(&other, &store, &[live(120, "theirs", 20)]).await;
    let task = {
        let store = store.clone();
        let ours = ours.clone();
        tokio::spawn(async move { upsert(&store, day(0), ours, WriteOptions::default()).await })
    };
    blocked_behind(&url, &other, 1).await;
    assert!(!task.is_finished(), "the COPY waits for the other writer");
    other.batch_execute("ROLLBACK").await.unwrap();
    let counts = task.await.unwrap().unwrap();
    assert_eq!(split(&counts), (250, 0, 0, 0, 0));
    assert_eq!(store.rows().await.unwrap(), ours);
}

/// Two writers with different chunk sizes apply overlapping batches (a
/// mix of stored and absent keys, each writer newer on some) at the same
/// time, many times over: every apply succeeds (no deadlock: COPY and
/// merge alike take their locks in key order, chunk after chunk, however
/// the chunks are cut) and the table ends as the reference.
#[tokio::test]
async fn writers_with_different_chunks_never_deadlock() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let open = |rows: usize| {
        PostgresStore::builder()
            .schema(schema.clone())
            .page_rows(rows)
            .connect(&url)
    };
    let (small, large) = (open(7).await.unwrap(), open(1_000).await.unwrap());
    let reference = MemoryStore::new();
    for round in 0..12 {
        let key = |i: usize| format!("dl/{round:02}/{i:04}");
        let version = |i: usize, value: &str, secs: i64| rec(&key(i), day(0), value, at(secs));
        // Every third key stored first.
        let stored: Vec<Record> = (0..300).step_by(3).map(|i| version(i, "s", 1)).collect();
        for target in [&small as &dyn Store, &reference] {
            upsert(target, day(0), stored.clone(), WriteOptions::default())
                .await
                .unwrap();
        }
        // A is newer on even keys, B on odd ones; both cover every key.
        let a: Vec<Record> = (0..300)
            .map(|i| version(i, "a", if i % 2 == 0 { 3 } else { 2 }))
            .collect();
        let b: Vec<Record> = (0..300)
            .map(|i| version(i, "b", if i % 2 == 0 { 2 } else { 3 }))
            .collect();
        let (ra, rb) = tokio::join!(
            upsert(&small, day(0), a.clone(), WriteOptions::default()),
            upsert(&large, day(0), b.clone(), WriteOptions::default()),
        );
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(
            ra.written() + ra.stale + rb.written() + rb.stale,
            600,
            "round {round}: every record counted once"
        );
        for batch in [a, b] {
            upsert(&reference, day(0), batch, WriteOptions::default())
                .await
                .unwrap();
        }
    }
    assert_eq!(
        small.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
}

/// A day never synced before is copied without the per-key check, so a
/// key it meets stored after all — here each record of the day's second
/// half was first stored under another date — fails that COPY: its page
/// rolls back to its savepoint and is merged, the later pages check before
/// they copy, and the counts and rows are the reference store's, batch and
/// stream alike.
#[tokio::test]
async fn a_new_day_whose_keys_are_stored_under_another_date_is_merged_exactly() {
    let Some(url) = testkit::url().await else {
        return;
    };
    // Keys 100..200 stored with event date day(1): half older than ours,
    // half newer.
    let elsewhere: Vec<Record> = (100..200)
        .map(|i| {
            let secs = if i % 2 == 0 { 5 } else { 20 };
            rec(&format!("fp/{i:04}"), day(1), "elsewhere", at(secs))
        })
        .collect();
    let ours: Vec<Record> = (0..200).map(|i| live(i, "ours", 10)).collect();
    for streamed in [false, true] {
        let store = PostgresStore::builder()
            .schema(testkit::unique_schema())
            .page_rows(50)
            .connect(&url)
            .await
            .unwrap();
        let reference = MemoryStore::new();
        let lenient = || WriteOptions::default().event_dates(backfill_core::EventDates::Lenient);
        for target in [&store as &dyn Store, &reference] {
            upsert(target, day(1), elsewhere.clone(), lenient())
                .await
                .unwrap();
        }
        let expected = upsert(&reference, day(0), ours.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(split(&expected), (100, 50, 0, 0, 50));
        let counts = if streamed {
            let chunks: Vec<Result<Vec<Record>, std::convert::Infallible>> =
                ours.chunks(30).map(|c| Ok(c.to_vec())).collect();
            backfill_core::upsert_stream(
                &store,
                day(0),
                futures_util::stream::iter(chunks),
                WriteOptions::default(),
            )
            .await
            .unwrap()
        } else {
            upsert(&store, day(0), ours.clone(), WriteOptions::default())
                .await
                .unwrap()
        };
        assert_eq!(counts, expected, "streamed: {streamed}");
        assert_eq!(
            store.rows_with_tombstones().await.unwrap(),
            reference.rows_with_tombstones().await.unwrap(),
            "streamed: {streamed}"
        );
        assert_eq!(physical_rows(&store).await, 200);
    }
}

/// A day synced before is merged again: in one statement against its
/// stored rows read by one scan of the day (it fits in one or two slices),
/// or, written in more slices, key by key. Either way, keys stored under
/// another date (older and newer than ours), tombstones, changed and
/// identical rows and new keys get the reference store's counts and rows.
#[tokio::test]
async fn a_synced_day_merged_again_finds_keys_stored_under_other_dates() {
    let Some(url) = testkit::url().await else {
        return;
    };
    // Synced first: keys 0..100 of day(0), every tenth a tombstone.
    let first: Vec<Record> = (0..100)
        .map(|i| match i % 10 {
            0 => tombstone(i, 10),
            _ => live(i, "v1", 10),
        })
        .collect();
    // Keys 100..160 stored under day(1): half older than ours, half newer.
    let elsewhere: Vec<Record> = (100..160)
        .map(|i| {
            let secs = if i % 2 == 0 { 5 } else { 20 };
            rec(&format!("fp/{i:04}"), day(1), "elsewhere", at(secs))
        })
        .collect();
    // Again: every fifth of 0..100 changed (tombstones revived among them),
    // keys 100..160 moved to day(0), keys 160..200 new.
    let again: Vec<Record> = (0..200)
        .map(|i| match i {
            0..100 if i % 5 == 0 => live(i, "v2", 11),
            0..100 => first[i].clone(),
            _ => live(i, "again", 10),
        })
        .collect();
    let lenient = || WriteOptions::default().event_dates(backfill_core::EventDates::Lenient);
    // 1000 rows per slice: one statement with the day scan; 60: four
    // slices, key by key.
    for page_rows in [1000, 60] {
        let store = PostgresStore::builder()
            .schema(testkit::unique_schema())
            .page_rows(page_rows)
            .connect(&url)
            .await
            .unwrap();
        let reference = MemoryStore::new();
        for target in [&store as &dyn Store, &reference] {
            upsert(target, day(0), first.clone(), WriteOptions::default())
                .await
                .unwrap();
            upsert(target, day(1), elsewhere.clone(), lenient())
                .await
                .unwrap();
        }
        let expected = upsert(&reference, day(0), again.clone(), WriteOptions::default())
            .await
            .unwrap();
        // 0..100: 10 live rows changed, 10 tombstones revived (inserted),
        // 80 identical; 100..160: 30 moved (updated), 30 stale; 160..200
        // inserted.
        assert_eq!(split(&expected), (50, 40, 0, 80, 30));
        let counts = upsert(&store, day(0), again.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(counts, expected, "page_rows {page_rows}");
        assert_eq!(
            store.rows_with_tombstones().await.unwrap(),
            reference.rows_with_tombstones().await.unwrap(),
            "page_rows {page_rows}"
        );
        // Merged again, nothing is written.
        let rerun = upsert(&store, day(0), again.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(split(&rerun), (0, 0, 0, 170, 30), "page_rows {page_rows}");
    }
}
