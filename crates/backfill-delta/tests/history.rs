//! History on a Delta table: what it writes (only the versions a day's
//! records do not hold, in a file of the day's own), that other engines'
//! live-rows filter leaves it out, and turning it on for a table with rows.

use std::collections::BTreeMap;
use std::path::PathBuf;

use backfill_core::{upsert, Record, Store, WriteOptions};
use backfill_delta::DeltaStore;
use chrono::{Duration, NaiveDate, TimeZone, Utc};
use deltalake::arrow::array::{Array, AsArray, BooleanArray};
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

mod common;
use common::{day, put, records};

/// Each active file's rows as (key, deleted), by file.
async fn file_rows(location: &str) -> BTreeMap<String, Vec<(String, bool)>> {
    let url = deltalake::ensure_table_uri(location).unwrap();
    let table = deltalake::open_table(url).await.unwrap();
    let mut files = BTreeMap::new();
    for uri in table.get_file_uris().unwrap() {
        let path = match url::Url::parse(&uri) {
            Ok(url) => url.to_file_path().unwrap(),
            Err(_) => PathBuf::from(&uri),
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut rows = Vec::new();
        for batch in reader {
            let batch = batch.unwrap();
            let keys = batch.column_by_name("key").unwrap().as_string::<i32>();
            let deleted = batch.column_by_name("deleted").unwrap();
            let deleted = deleted.as_any().downcast_ref::<BooleanArray>().unwrap();
            for i in 0..batch.num_rows() {
                rows.push((keys.value(i).to_owned(), deleted.value(i)));
            }
        }
        files.insert(uri, rows);
    }
    files
}

/// How many history rows of versions the table's files hold.
fn versions_kept(files: &BTreeMap<String, Vec<(String, bool)>>) -> usize {
    files
        .values()
        .flatten()
        .filter(|(key, _)| key.starts_with("\0backfill.version:"))
        .count()
}

#[tokio::test]
async fn history_keeps_only_the_versions_the_records_do_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let store = DeltaStore::builder(location)
        .history(true)
        .open()
        .await
        .unwrap();
    assert_eq!(store.history_started_with(), Some(0));
    for d in 0..3 {
        put(&store, d, records(d, 500, 0)).await;
    }
    // A backfill's rows are its versions: no history row is written.
    let written = file_rows(location).await;
    assert_eq!(
        written.len(),
        6,
        "a file of records and a ledger file a day"
    );
    assert_eq!(versions_kept(&written), 0);
    assert_eq!(store.history().await.unwrap().len(), 1500);

    // An identical re-run changes no file of records or history.
    let counts = put(&store, 1, records(1, 500, 0)).await;
    assert_eq!(counts.written(), 0);
    let rerun = file_rows(location).await;
    assert_eq!(rerun.len(), 6);
    assert_eq!(versions_kept(&rerun), 0);

    // A lookback day with a fifth changed: exactly the versions replaced
    // go to history, in a file of the day's own.
    let counts = put(&store, 2, records(2, 500, 100)).await;
    assert_eq!(counts.updated, 100);
    let lookback = file_rows(location).await;
    assert_eq!(lookback.len(), 7);
    assert_eq!(versions_kept(&lookback), 100);
    let history = store.history().await.unwrap();
    assert_eq!(history.len(), 1600);
    let before = Utc.with_ymd_and_hms(2026, 3, 1, 9, 30, 0).unwrap();
    let as_of: Vec<Record> = store
        .as_of(before)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.event_date() == day(2))
        .collect();
    assert_eq!(as_of, records(2, 500, 0));
    assert_eq!(store.day_rows(day(2)).await.unwrap(), records(2, 500, 100));

    // The same again writes nothing more.
    put(&store, 2, records(2, 500, 100)).await;
    assert_eq!(versions_kept(&file_rows(location).await), 100);

    // Every row of the store's own is a tombstone to other engines: their
    // live-rows filter (`WHERE NOT deleted`) reads the records alone.
    let own: Vec<_> = lookback
        .values()
        .flatten()
        .filter(|(key, _)| key.starts_with('\0'))
        .collect();
    assert_eq!(own.len(), 100 + 3);
    assert!(own.iter().all(|(_, deleted)| *deleted));
}

#[tokio::test]
async fn turning_history_on_starts_from_the_rows_and_keeps_it_on() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("orders");
    let location = location.to_str().unwrap();
    let plain = DeltaStore::open(location).await.unwrap();
    put(&plain, 0, records(0, 50, 0)).await;
    // Two more days, one of them a tombstone: history starts from every
    // row, counted from the files' statistics.
    put(&plain, 1, records(1, 30, 0)).await;
    let mut gone = records(1, 30, 0);
    gone[0] = Record::tombstone(
        gone[0].key(),
        day(1),
        gone[0].updated_at() + Duration::hours(2),
    )
    .unwrap();
    put(&plain, 1, gone).await;
    assert!(!plain.keeps_history().await.unwrap());
    assert!(matches!(
        plain.history().await,
        Err(backfill_core::Error::HistoryOff)
    ));

    let store = DeltaStore::builder(location)
        .history(true)
        .open()
        .await
        .unwrap();
    assert_eq!(store.history_started_with(), Some(80));
    let history = store.history().await.unwrap();
    assert_eq!(history.len(), 80);
    assert!(history.iter().all(|row| row.valid_to.is_none()));
    let again = DeltaStore::builder(location)
        .history(true)
        .open()
        .await
        .unwrap();
    assert_eq!(again.history_started_with(), None, "it was on already");

    // Opened without `history`, the table keeps it all the same: the
    // store opened before it was turned on too.
    let later = DeltaStore::open(location).await.unwrap();
    assert!(later.keeps_history().await.unwrap());
    put(&later, 0, records(0, 50, 10)).await;
    put(&plain, 0, records(0, 50, 20)).await;
    let history = store.history().await.unwrap();
    assert_eq!(history.len(), 80 + 20);
    let open = history.iter().filter(|row| row.valid_to.is_none()).count();
    assert_eq!(open, 80);
}

/// A new table at `location` that keeps history.
async fn keeping_history(location: &str) -> DeltaStore {
    DeltaStore::builder(location)
        .history(true)
        .open()
        .await
        .unwrap()
}

/// The same writes into the Delta table and into the reference store, and
/// the two histories compared.
async fn same_history_as_the_reference(writes: &[(NaiveDate, Vec<Record>, WriteOptions)]) {
    use backfill_core::MemoryStore;
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("t");
    let store = keeping_history(location.to_str().unwrap()).await;
    let reference = MemoryStore::with_history();
    for (d, records, options) in writes {
        let ours = upsert(&store, *d, records.clone(), *options).await.unwrap();
        let theirs = upsert(&reference, *d, records.clone(), *options)
            .await
            .unwrap();
        assert_eq!(ours, theirs, "{d}");
        assert_eq!(
            store.history().await.unwrap(),
            reference.history().await.unwrap(),
            "after {d}"
        );
    }
}

fn listing(as_of: chrono::DateTime<Utc>) -> WriteOptions {
    WriteOptions::default()
        .mode(backfill_core::Mode::Replace)
        .as_of(as_of)
        .replace_guard(backfill_core::ReplaceGuard::off())
}

fn hour(h: u32) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, h, 0, 0).unwrap()
}

/// A key's version of one instant delivered again under a later day wins
/// that instant in history (its `event_date` breaks the tie), while the
/// table keeps the tombstone a listing of the first day made of it: the
/// tombstone is never read back as a version of its own.
#[tokio::test]
async fn a_listings_tombstone_is_not_read_back_when_another_day_wins_its_instant() {
    let (a, b) = (day(0), day(1));
    let rec = |d, value: &str| Record::new("k", d, value, hour(10)).unwrap();
    let other = Record::new("other", a, "o", hour(9)).unwrap();
    same_history_as_the_reference(&[
        (a, vec![rec(a, "v"), other.clone()], WriteOptions::default()),
        (a, vec![other.clone()], listing(hour(12))),
        (b, vec![rec(b, "v")], WriteOptions::default()),
        (a, vec![other], listing(hour(14))),
    ])
    .await;
}

/// Purging two tombstones of one day, one delivered, one a listing made:
/// history keeps the listed version and the delivered tombstone, each
/// once (the tombstone a listing made is no version of its own).
#[tokio::test]
async fn purging_keeps_each_version_once() {
    let d = day(0);
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("t");
    let store = keeping_history(location.to_str().unwrap()).await;
    let reference = backfill_core::MemoryStore::with_history();
    let keep = Record::new("b", d, "kept", hour(2)).unwrap();
    let writes = [
        (
            vec![
                Record::tombstone("a", d, hour(1)).unwrap(),
                keep.clone(),
                Record::new("c", d, "listed out", hour(5)).unwrap(),
            ],
            WriteOptions::default(),
        ),
        (vec![keep], listing(hour(6))),
    ];
    for (records, options) in writes {
        upsert(&store, d, records.clone(), options).await.unwrap();
        upsert(&reference, d, records, options).await.unwrap();
    }
    let expected = reference.history().await.unwrap();
    assert_eq!(store.history().await.unwrap(), expected);
    assert_eq!(store.purge_tombstones(hour(7)).await.unwrap(), 2);
    reference.purge_tombstones(hour(7)).await.unwrap();
    assert_eq!(reference.history().await.unwrap(), expected);
    assert_eq!(store.history().await.unwrap(), expected);
    assert_eq!(store.rows_with_tombstones().await.unwrap().len(), 1);
    // The listed version and the delivered tombstone, each once.
    let files = file_rows(location.to_str().unwrap()).await;
    assert_eq!(versions_kept(&files), 2);
}
