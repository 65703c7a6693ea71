//! The table as other engines see it: which files a write replaces, how
//! many versions it commits, and the tables it refuses.

use std::collections::{BTreeMap, BTreeSet};

use backfill_core::{upsert, Record, Store, WriteOptions};
use backfill_delta::DeltaStore;
use chrono::{Duration, NaiveDate, TimeZone, Utc};

mod common;
use common::{day, put, records};

/// The table's active files, by partition directory.
async fn files(location: &str) -> BTreeMap<String, BTreeSet<String>> {
    let url = deltalake::ensure_table_uri(location).unwrap();
    let table = deltalake::open_table(url).await.unwrap();
    let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in table.get_file_uris().unwrap() {
        let (dir, _) = path.rsplit_once('/').unwrap();
        let (_, partition) = dir.rsplit_once('/').unwrap();
        files.entry(partition.to_owned()).or_default().insert(path);
    }
    files
}

#[tokio::test]
async fn a_rerun_rewrites_no_data_file_and_a_skipped_one_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let store = DeltaStore::open(location).await.unwrap();
    for d in 0..3 {
        put(&store, d, records(d, 500, 0)).await;
    }
    let before = files(location).await;
    // Each day: one file of records, one of its ledger row.
    assert!(before.values().all(|day| day.len() == 2), "{before:?}");
    let version = store.version().await.unwrap();

    // A re-run: one version, the day's ledger row only.
    let counts = put(&store, 1, records(1, 500, 0)).await;
    assert_eq!((counts.unchanged, counts.written()), (500, 0));
    assert_eq!(store.version().await.unwrap(), version + 1);
    let after = files(location).await;
    let common: Vec<_> = before["event_date=2026-03-02"]
        .intersection(&after["event_date=2026-03-02"])
        .collect();
    assert_eq!(common.len(), 1, "the day's file of records stays");
    assert_eq!(
        before["event_date=2026-03-01"],
        after["event_date=2026-03-01"]
    );

    // Skipped by its digest: no version at all.
    let skip = WriteOptions::default().skip_unchanged(true);
    let counts = upsert(&store, day(1), records(1, 500, 0), skip)
        .await
        .unwrap();
    assert_eq!(counts.skipped, 500);
    assert_eq!(store.version().await.unwrap(), version + 1);
}

#[tokio::test]
async fn a_lookback_day_with_changes_rewrites_only_that_days_files() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let store = DeltaStore::open(location).await.unwrap();
    for d in 0..5 {
        put(&store, d, records(d, 1000, 0)).await;
    }
    let before = files(location).await;
    // Day 2 again, a fifth of its rows changed upstream.
    let counts = put(&store, 2, records(2, 1000, 200)).await;
    assert_eq!((counts.updated, counts.unchanged), (200, 800));
    let after = files(location).await;
    for (partition, files) in &before {
        if partition == "event_date=2026-03-03" {
            assert!(
                files.is_disjoint(&after[partition]),
                "day 2's files are new"
            );
        } else {
            assert_eq!(files, &after[partition], "{partition} is untouched");
        }
    }
    assert_eq!(store.day_rows(day(2)).await.unwrap(), records(2, 1000, 200));
}

#[tokio::test]
async fn a_table_of_another_shape_is_refused_naming_the_column() {
    use deltalake::kernel::{DataType, StructField};
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("other");
    let location = location.to_str().unwrap();
    let url = deltalake::ensure_table_uri(location).unwrap();
    deltalake::operations::create::CreateBuilder::new()
        .with_location(url.as_str())
        .with_columns([
            StructField::new("key", DataType::STRING, false),
            StructField::new("event_date", DataType::DATE, false),
            StructField::new("value", DataType::LONG, false),
        ])
        .with_partition_columns(["event_date"])
        .await
        .unwrap();
    let error = DeltaStore::open(location).await.unwrap_err().to_string();
    assert!(error.contains("\"value\" is long"), "{error}");

    let error = DeltaStore::open_existing(
        dir.path().join("none").to_str().unwrap(),
        Default::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("no Delta table"), "{error}");
    assert!(
        !dir.path().join("none").exists(),
        "a reader creates nothing"
    );
}

/// A store that has just committed decides its next day on the snapshot
/// it made, without reading the log again; a commit another writer made
/// meanwhile still makes that write lose, and it is decided again on the
/// table as the other writer left it.
#[tokio::test]
async fn a_write_on_the_snapshot_just_committed_still_sees_another_writers_commit() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let ours = DeltaStore::open(location).await.unwrap();
    let theirs = DeltaStore::open(location).await.unwrap();
    let older = records(0, 50, 0);
    let newer = records(0, 50, 50);
    let first = put(&ours, 0, older.clone()).await;
    assert_eq!(first.inserted, 50);
    // The other writer's newer versions, committed straight after.
    let second = put(&theirs, 0, newer.clone()).await;
    assert_eq!(second.updated, 50);
    // On the snapshot `ours` committed, the older versions are the stored
    // ones and would be unchanged; on the table they are stale.
    let again = put(&ours, 0, older).await;
    assert_eq!((again.stale, again.unchanged), (50, 0), "{again:?}");
    let mut stored = ours.day_rows(day(0)).await.unwrap();
    stored.sort_by(|a, b| a.key().cmp(b.key()));
    assert_eq!(stored, newer);
    let ledger = ours.ledger(day(0)..=day(0)).await.unwrap();
    let counts = &ledger[0].synced.as_ref().unwrap().counts;
    assert_eq!((counts.stale, counts.unchanged), (50, 0));
}

/// `records` as a stream of chunks of 64.
fn chunks(
    records: Vec<Record>,
) -> impl futures_util::Stream<Item = Result<Vec<Record>, std::convert::Infallible>> {
    let chunks: Vec<_> = records.chunks(64).map(|c| Ok(c.to_vec())).collect();
    futures_util::stream::iter(chunks)
}

/// The same days applied to a `MemoryStore`, and both stores' rows and
/// ledgers compared.
async fn same_as_memory(store: &DeltaStore, reference: &backfill_core::MemoryStore) {
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
    let days = day(0)..=day(9);
    let ours: Vec<_> = store.ledger(days.clone()).await.unwrap();
    let theirs: Vec<_> = reference.ledger(days).await.unwrap();
    let counts = |entries: &[backfill_core::LedgerEntry]| {
        entries
            .iter()
            .map(|e| {
                (
                    e.day,
                    e.listing_watermark,
                    e.synced.as_ref().map(|s| s.counts),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(&ours), counts(&theirs));
}

/// A streamed day larger than a page is decided page by page, against
/// the stored rows of each page's key range: the same rows, counts and
/// ledger as the reference, with keys moving in from another day and a
/// listing across pages; an identical re-run rewrites no data file.
#[tokio::test]
async fn a_streamed_day_larger_than_a_page_is_decided_page_by_page() {
    use backfill_core::{upsert_stream, MemoryStore, Mode};
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let store = DeltaStore::builder(location)
        .page_rows(100)
        .open()
        .await
        .unwrap();
    let reference = MemoryStore::new();
    for s in [&store as &dyn Store, &reference] {
        for d in 0..2 {
            upsert(s, day(d), records(d, 1000, 0), WriteOptions::default())
                .await
                .unwrap();
        }
    }
    // Day 1 again: a fifth changed, a tenth gone from the listing, and
    // fifty of day 0's keys moving in, newer.
    let moved_at = Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap();
    let mut listing: Vec<Record> = records(1, 1000, 200)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 10 != 3)
        .map(|(_, r)| r)
        .collect();
    for moved in records(0, 1000, 0).into_iter().step_by(20) {
        listing.push(Record::new(moved.key(), day(1), "moved", moved_at).unwrap());
    }
    let options = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(moved_at)
        .replace_guard(backfill_core::ReplaceGuard::off());
    let ours = upsert_stream(&store, day(1), chunks(listing.clone()), options)
        .await
        .unwrap();
    let theirs = upsert_stream(&reference, day(1), chunks(listing.clone()), options)
        .await
        .unwrap();
    assert_eq!(ours, theirs);
    assert_eq!(ours.unlisted, 100, "{ours:?}");
    same_as_memory(&store, &reference).await;

    // The same listing again: unchanged, and day 1's records file stays.
    let before = files(location).await;
    let again = upsert_stream(&store, day(1), chunks(listing), options)
        .await
        .unwrap();
    assert_eq!((again.unchanged, again.written()), (950, 0), "{again:?}");
    let after = files(location).await;
    let common = before["event_date=2026-03-02"]
        .intersection(&after["event_date=2026-03-02"])
        .count();
    assert_eq!(common, 1, "the day's records file stays");
    assert_eq!(
        before["event_date=2026-03-01"],
        after["event_date=2026-03-01"]
    );
}

/// A streamed day whose stored file is not in key order (written by
/// another engine) is read whole, and ends as the reference does.
#[tokio::test]
async fn a_streamed_day_over_a_file_not_in_key_order_is_read_whole() {
    use backfill_core::{upsert_stream, MemoryStore};
    use deltalake::arrow::array::{
        BooleanArray, Date32Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    };
    use deltalake::writer::{DeltaWriter, RecordBatchWriter};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let store = DeltaStore::builder(location)
        .page_rows(50)
        .open()
        .await
        .unwrap();
    // Day 0's rows in reverse key order, appended by delta-rs itself.
    let mut stored = records(0, 300, 0);
    stored.reverse();
    let url = deltalake::ensure_table_uri(location).unwrap();
    let mut table = deltalake::open_table(url).await.unwrap();
    let mut writer = RecordBatchWriter::for_table(&table).unwrap();
    let schema = writer.arrow_schema();
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
    let columns: Vec<deltalake::arrow::array::ArrayRef> = schema
        .fields()
        .iter()
        .map(|field| -> deltalake::arrow::array::ArrayRef {
            match field.name().as_str() {
                "key" => Arc::new(StringArray::from_iter_values(
                    stored.iter().map(Record::key),
                )),
                "value" => Arc::new(StringArray::from_iter_values(
                    stored.iter().map(Record::value),
                )),
                "event_date" => Arc::new(Date32Array::from_iter_values(
                    stored
                        .iter()
                        .map(|r| (r.event_date() - epoch).num_days() as i32),
                )),
                "updated_at" => Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        stored.iter().map(|r| r.updated_at().timestamp_micros()),
                    )
                    .with_timezone("UTC"),
                ),
                "deleted" => Arc::new(BooleanArray::from(vec![false; stored.len()])),
                other => panic!("column {other}"),
            }
        })
        .collect();
    let batch = RecordBatch::try_new(schema, columns).unwrap();
    writer.write(batch).await.unwrap();
    writer.flush_and_commit(&mut table).await.unwrap();

    let reference = MemoryStore::from_parts(stored.clone(), []);
    let fetched = records(0, 300, 120);
    let ours = upsert_stream(
        &store,
        day(0),
        chunks(fetched.clone()),
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let theirs = upsert_stream(&reference, day(0), chunks(fetched), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(ours, theirs);
    assert_eq!((ours.updated, ours.unchanged), (120, 180));
    same_as_memory(&store, &reference).await;
}

/// Streamed days decided page by page by six writers racing on one table,
/// three on each of two days, their keys shared (moving between the
/// days): a writer whose commit lost to one of the same day reads its
/// pages again and decides again, and the table ends with the rows of the
/// reference given every day in any order (newer wins).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_days_racing_on_one_table_end_as_the_reference() {
    use backfill_core::{upsert_stream, MemoryStore};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap().to_owned();
    let writes: Vec<(i64, Vec<Record>)> = (0..6u32)
        .map(|w| {
            let d = i64::from(w % 2);
            let at = Utc.with_ymd_and_hms(2026, 3, 1, w, 0, 0).unwrap();
            let mut records: Vec<Record> = (0..300u32)
                .filter(|i| (i + w) % 3 != 0)
                .map(|i| Record::new(format!("k{i:03}"), day(d), format!("w{w}"), at).unwrap())
                .collect();
            records.sort_by(|a, b| a.key().cmp(b.key()));
            (d, records)
        })
        .collect();
    let first = DeltaStore::builder(location.as_str())
        .page_rows(40)
        .open()
        .await
        .unwrap();
    let mut racing = Vec::new();
    for (d, records) in writes.clone() {
        let store = Arc::new(
            DeltaStore::builder(location.as_str())
                .page_rows(40)
                .open()
                .await
                .unwrap(),
        );
        racing.push(tokio::spawn(async move {
            upsert_stream(&*store, day(d), chunks(records), WriteOptions::default()).await
        }));
    }
    for writer in racing {
        writer.await.unwrap().unwrap();
    }
    let reference = MemoryStore::new();
    for (d, records) in writes.into_iter().rev() {
        put(&reference, d, records).await;
    }
    assert_eq!(
        first.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
}

/// A streamed day whose last page ends on a key with losing versions of it
/// still queued behind (in another of the day's sorted runs) still decides
/// the day's stored rows after that key: kept in a merge, listed away in
/// a listing, as the reference does.
#[tokio::test]
async fn the_stored_rows_after_a_streamed_days_last_key_are_decided() {
    use backfill_core::{upsert_stream, MemoryStore, Mode, ReplaceGuard};
    for mode in [Mode::Merge, Mode::Replace] {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("orders");
        let store = DeltaStore::builder(location.to_str().unwrap())
            .page_rows(2)
            .open()
            .await
            .unwrap();
        let reference = MemoryStore::new();
        let stored = records(0, 30, 0);
        for s in [&store as &dyn Store, &reference] {
            upsert(s, day(0), stored.clone(), WriteOptions::default())
                .await
                .unwrap();
        }
        let at = |hour| Utc.with_ymd_and_hms(2026, 3, 1, hour, 0, 0).unwrap();
        let version = |i: usize, value: &str, hour| {
            Record::new(stored[i].key(), day(0), value, at(hour)).unwrap()
        };
        // Each chunk a run of its own: the page [0 newer, 1 newest] is
        // full while key 1's older version waits in the other run.
        let stream = || {
            let chunks: Vec<Result<Vec<Record>, std::convert::Infallible>> = vec![
                Ok(vec![version(0, "newer", 11), version(1, "newest", 12)]),
                Ok(vec![version(1, "newer", 11)]),
            ];
            futures_util::stream::iter(chunks)
        };
        let options = WriteOptions::default()
            .mode(mode)
            .as_of(at(13))
            .replace_guard(ReplaceGuard::off())
            .stream_memory(0);
        let ours = upsert_stream(&store, day(0), stream(), options)
            .await
            .unwrap();
        let theirs = upsert_stream(&reference, day(0), stream(), options)
            .await
            .unwrap();
        assert_eq!(ours, theirs, "{mode:?}");
        assert_eq!(ours.updated, 2, "{mode:?}");
        same_as_memory(&store, &reference).await;
        let live = store.day_rows(day(0)).await.unwrap().len();
        assert_eq!(live, if mode == Mode::Merge { 30 } else { 2 }, "{mode:?}");
    }
}

/// The Parquet files on disk in `partition`'s directory that no commit of
/// the table names (none, after a write that did not take its file; a
/// file a commit removed stays until `VACUUM`).
async fn stray_files(location: &str, partition: &str) -> BTreeSet<String> {
    // A file a write forgot would appear once its writer is done.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let location = std::path::Path::new(location);
    let log: String = std::fs::read_dir(location.join("_delta_log"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    let Ok(dir) = std::fs::read_dir(location.join(partition)) else {
        return BTreeSet::new();
    };
    dir.map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".parquet") && !log.contains(name.as_str()))
        .collect()
}

/// A day new to the table has its records' file written while it is
/// decided; when the decision's rows are not those records (a stale
/// version of a key another day holds newer, another writer's commit of
/// the same day, a write refused), that file is deleted, and the day ends
/// as decided.
#[tokio::test]
async fn a_new_days_file_written_ahead_is_deleted_when_the_day_does_not_take_it() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let store = DeltaStore::open(location).await.unwrap();
    let at = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();

    // A key of day 0, delivered again under a new day 1 at an older
    // version: stale, so day 1's rows are its other records only.
    let held = Record::new("moving", day(0), "newer", at + Duration::hours(1)).unwrap();
    put(&store, 0, vec![held.clone()]).await;
    let mut delivered = records(1, 100, 0);
    delivered.push(Record::new("moving", day(1), "older", at).unwrap());
    delivered.sort_by(|a, b| a.key().cmp(b.key()));
    let counts = put(&store, 1, delivered).await;
    assert_eq!((counts.inserted, counts.stale), (100, 1), "{counts:?}");
    assert_eq!(store.day_rows(day(1)).await.unwrap(), records(1, 100, 0));
    assert_eq!(store.day_rows(day(0)).await.unwrap(), vec![held]);
    assert_eq!(
        stray_files(location, "event_date=2026-03-02").await,
        BTreeSet::new()
    );

    // Another writer commits new day 2 with newer versions straight after
    // this store's last commit: this store's write of day 2 decides on its
    // own snapshot, loses, and is decided again.
    let theirs = DeltaStore::open(location).await.unwrap();
    put(&theirs, 2, records(2, 100, 100)).await;
    let counts = put(&store, 2, records(2, 100, 0)).await;
    assert_eq!(counts.stale, 100, "{counts:?}");
    assert_eq!(store.day_rows(day(2)).await.unwrap(), records(2, 100, 100));
    assert_eq!(
        stray_files(location, "event_date=2026-03-03").await,
        BTreeSet::new()
    );

    // The columns of a table change under a store: its write of a new day
    // is refused, and nothing of it stays.
    let typed = dir.path().join("typed");
    let typed = typed.to_str().unwrap();
    let json = |d: i64| -> Vec<Record> {
        let total = |i: u32| format!(r#"{{"total":{i}}}"#);
        let keys = (0..100).map(|i| (format!("order:{i:03}"), total(i)));
        keys.map(|(key, value)| Record::new(key, day(d), value, at).unwrap())
            .collect()
    };
    let store = DeltaStore::open(typed).await.unwrap();
    put(&store, 0, json(0)).await;
    use backfill_core::columns::{Column, ColumnType};
    let column = Column::new("total", ColumnType::Double).unwrap();
    DeltaStore::builder(typed)
        .columns([column])
        .allow_column_changes(true)
        .open()
        .await
        .unwrap();
    let refused = upsert(&store, day(3), json(3), WriteOptions::default()).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(
        stray_files(typed, "event_date=2026-03-04").await,
        BTreeSet::new()
    );
}

/// A re-fetched day whose records differ from the stored rows in one
/// thing the merge reads — only `updated_at`, by a microsecond; only the
/// tombstone flag, at the same instant; one byte deep in a 9 000-byte
/// value, either way — is never taken as unchanged: the record is judged
/// by the total order as ever, the day's other 24 rows count unchanged,
/// and the table ends as a `MemoryStore` given the same writes. A stale
/// difference writes nothing: the day's file of records stays.
#[tokio::test]
async fn a_record_that_differs_in_anything_the_merge_reads_is_never_taken_as_unchanged() {
    use backfill_core::conformance::fixtures::{awkward_day, day as fixture_day, tomb};
    use backfill_core::MemoryStore;

    type Change = fn(&Record) -> Record;
    type Expect = fn(&backfill_core::Counts) -> bool;
    /// `r` with byte 5 000 of its value set to `byte`.
    fn deep(r: &Record, byte: &str) -> Record {
        let mut value = r.value().to_owned();
        value.replace_range(5000..5001, byte);
        Record::new(r.key(), r.event_date(), value, r.updated_at()).unwrap()
    }
    let cases: [(&str, &str, Change, Expect); 4] = [
        (
            "f/03",
            "a microsecond newer",
            |r| {
                Record::new(
                    r.key(),
                    r.event_date(),
                    r.value(),
                    r.updated_at() + Duration::microseconds(1),
                )
                .unwrap()
            },
            |c| c.updated == 1,
        ),
        // A tombstone of the same instant orders after the live row.
        (
            "f/03",
            "a tombstone of the same instant",
            |r| tomb(r.key(), r.event_date(), r.updated_at()),
            |c| c.deleted == 1,
        ),
        // `y` orders after the stored `x`: the record wins.
        (
            "b/long",
            "a byte deep in the value, greater",
            |r| deep(r, "y"),
            |c| c.updated == 1,
        ),
        // `w` orders before it: the record is stale.
        (
            "b/long",
            "a byte deep in the value, smaller",
            |r| deep(r, "w"),
            |c| c.stale == 1,
        ),
    ];
    for (key, what, change, expect) in cases {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("orders");
        let location = location.to_str().unwrap();
        let store = DeltaStore::open(location).await.unwrap();
        let reference = MemoryStore::new();
        let d = fixture_day(0);
        let again: Vec<Record> = awkward_day()
            .iter()
            .map(|r| match r.key() == key {
                true => change(r),
                false => r.clone(),
            })
            .collect();
        let mut counts = Vec::new();
        for s in [&store as &dyn Store, &reference] {
            upsert(s, d, awkward_day(), WriteOptions::default())
                .await
                .unwrap();
        }
        let before = files(location).await;
        for s in [&store as &dyn Store, &reference] {
            counts.push(
                upsert(s, d, again.clone(), WriteOptions::default())
                    .await
                    .unwrap(),
            );
        }
        let ours = &counts[0];
        assert!(expect(ours) && ours.unchanged == 24, "{what}: {ours:?}");
        assert_eq!(ours, &counts[1], "{what}: the reference's counts");
        assert_eq!(
            store.rows_with_tombstones().await.unwrap(),
            reference.rows_with_tombstones().await.unwrap(),
            "{what}"
        );
        let after = files(location).await;
        let partition = format!("event_date={d}");
        let kept = before[&partition].intersection(&after[&partition]).count();
        match ours.written() {
            0 => assert_eq!(kept, 1, "{what}: the day's file of records stays"),
            _ => assert_eq!(kept, 0, "{what}: the day's files are new"),
        }
    }
}
