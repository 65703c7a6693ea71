//! Opening a store: bad names and bad files are typed errors that change
//! nothing.

use backfill_core::{upsert, Error, Record, Store, WriteOptions};
use backfill_sqlite::SqliteStore;
use chrono::{NaiveDate, TimeZone, Utc};

fn record(key: &str) -> Record {
    let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    Record::new(
        key,
        day,
        "v",
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn invalid_table_names_are_rejected_before_touching_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    for name in [
        "",
        "1st",
        "a-b",
        "records; DROP TABLE x",
        "\"quoted\"",
        "tä",
        "a b",
    ] {
        match SqliteStore::builder(&path).table(name).open().await {
            Err(Error::InvalidName {
                what: "table",
                name: got,
            }) => assert_eq!(got, name),
            other => panic!("{name:?}: expected InvalidName, got {other:?}"),
        }
    }
    assert!(!path.exists(), "no file may be created for a rejected name");
}

#[tokio::test]
async fn missing_directory_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("db.sqlite");
    match SqliteStore::open(&path).await {
        Err(Error::Open {
            backend: "sqlite", ..
        }) => {}
        other => panic!("expected Open error, got {other:?}"),
    }
    assert!(!dir.path().join("no-such-dir").exists());
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_an_open_error_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are not the pages you are looking for\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    match SqliteStore::open(&path).await {
        Err(Error::Open {
            backend: "sqlite", ..
        }) => {}
        other => panic!("expected Open error, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[tokio::test]
async fn reopening_keeps_rows_and_tables_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    {
        let store = SqliteStore::open(&path).await.unwrap();
        upsert(&store, day, vec![record("a")], WriteOptions::default())
            .await
            .unwrap();
    }
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(again.rows().await.unwrap(), vec![record("a")]);
    let other = SqliteStore::builder(&path)
        .table("other")
        .open()
        .await
        .unwrap();
    assert!(other.rows().await.unwrap().is_empty());
    let c = upsert(&again, day, vec![record("a")], WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.written(), 0);
}

#[tokio::test]
async fn reruns_and_stale_redeliveries_change_no_row() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let batch = |value: &str, secs: i64| -> Vec<Record> {
        (0..1000)
            .map(|i| {
                Record::new(
                    format!("k{i:04}"),
                    day,
                    value,
                    at + chrono::Duration::seconds(secs),
                )
                .unwrap()
            })
            .collect()
    };
    upsert(&store, day, batch("new", 10), WriteOptions::default())
        .await
        .unwrap();
    let after_first = store.total_changes().await.unwrap();
    assert_eq!(after_first, 1000);
    upsert(&store, day, batch("new", 10), WriteOptions::default())
        .await
        .unwrap();
    upsert(&store, day, batch("old", 5), WriteOptions::default())
        .await
        .unwrap();
    let replace = WriteOptions::default().mode(backfill_core::Mode::Replace);
    let c = upsert(&store, day, batch("new", 10), replace)
        .await
        .unwrap();
    assert_eq!(c.written(), 0);
    assert_eq!(
        store.total_changes().await.unwrap(),
        after_first,
        "nothing may be written"
    );
    // Replacing with 10% of the keys gone changes exactly those rows.
    let c = upsert(&store, day, batch("new", 10)[..900].to_vec(), replace)
        .await
        .unwrap();
    assert_eq!(c.deleted, 100);
    assert_eq!(store.total_changes().await.unwrap(), after_first + 100);
}
