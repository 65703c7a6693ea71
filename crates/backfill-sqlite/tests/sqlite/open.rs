//! Opening a store: bad names and bad files are typed errors that change
//! nothing.

use backfill_core::conformance::fixtures::{at, day, kv, rec};
use backfill_core::{upsert, Error, Record, Store, WriteOptions};
use backfill_sqlite::SqliteStore;

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
    {
        let store = SqliteStore::open(&path).await.unwrap();
        upsert(&store, day(0), vec![kv("a", "v")], WriteOptions::default())
            .await
            .unwrap();
    }
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(again.rows().await.unwrap(), vec![kv("a", "v")]);
    let other = SqliteStore::builder(&path)
        .table("other")
        .open()
        .await
        .unwrap();
    assert!(other.rows().await.unwrap().is_empty());
    let c = upsert(&again, day(0), vec![kv("a", "v")], WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.written(), 0);
}

#[tokio::test]
async fn reruns_and_stale_redeliveries_change_no_row() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    let batch = |value: &str, secs: i64| -> Vec<Record> {
        (0..1000)
            .map(|i| rec(&format!("k{i:04}"), day(0), value, at(secs)))
            .collect()
    };
    upsert(&store, day(0), batch("new", 10), WriteOptions::default())
        .await
        .unwrap();
    // v3: every apply writes exactly two more rows, its day's ledger row
    // (one upsert of one row of `backfill_days`) and its timing (one of
    // `backfill_timings`), so what is counted past those, two per apply,
    // is rows of the records table.
    let after_first = store.total_changes().await.unwrap();
    assert_eq!(
        after_first,
        1000 + 2,
        "the rows, the day's ledger row and its timing"
    );
    upsert(&store, day(0), batch("new", 10), WriteOptions::default())
        .await
        .unwrap();
    upsert(&store, day(0), batch("old", 5), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        store.total_changes().await.unwrap(),
        after_first + 4,
        "a re-run writes its ledger row and its timing, and no record"
    );
    // A listing as of a fixed instant (the default would be "now", and
    // raise the day's watermark on every call).
    let replace = WriteOptions::default()
        .mode(backfill_core::Mode::Replace)
        .as_of(at(10));
    let c = upsert(&store, day(0), batch("new", 10), replace)
        .await
        .unwrap();
    assert_eq!(c.written(), 0);
    // v2: the first listing of a day records its watermark, in v3 in the
    // day's ledger row (one row of `backfill_days`); no record is written.
    assert_eq!(
        store.total_changes().await.unwrap(),
        after_first + 6,
        "nothing but the day's ledger row (with its watermark) and its timing may be written"
    );
    let c = upsert(&store, day(0), batch("new", 10), replace)
        .await
        .unwrap();
    assert_eq!(c.written(), 0);
    assert_eq!(
        store.total_changes().await.unwrap(),
        after_first + 8,
        "a re-applied listing writes its ledger row, its timing and nothing else"
    );
    // Replacing with 10% of the keys gone changes exactly those rows (into
    // tombstones; the watermark is already as high).
    let c = upsert(&store, day(0), batch("new", 10)[..900].to_vec(), replace)
        .await
        .unwrap();
    assert_eq!(c.deleted, 100);
    assert_eq!(c.unlisted, 100);
    assert_eq!(store.total_changes().await.unwrap(), after_first + 10 + 100);
    assert_eq!(store.rows().await.unwrap().len(), 900);
    assert_eq!(store.rows_with_tombstones().await.unwrap().len(), 1000);
    // And again: nothing.
    let c = upsert(&store, day(0), batch("new", 10)[..900].to_vec(), replace)
        .await
        .unwrap();
    assert_eq!((c.written(), c.unchanged), (0, 900));
    assert_eq!(store.total_changes().await.unwrap(), after_first + 12 + 100);
}

/// Whether `table` has an index whose first column is `event_date`.
fn has_event_date_index(path: &std::path::Path, table: &str) -> bool {
    let conn = rusqlite::Connection::open(path).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_index_list(?1) AS l, pragma_index_info(l.name) AS i
             WHERE i.seqno = 0 AND i.name = 'event_date' AND l.partial = 0",
            [table],
            |row| row.get(0),
        )
        .unwrap();
    n > 0
}

#[tokio::test]
async fn index_names_do_not_collide_with_table_names() {
    // Once named "{table}_event_date", the index of table `c` took the name
    // of table `c_event_date`: whichever was opened second failed.
    for order in [["c", "c_event_date"], ["c_event_date", "c"]] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        for table in order {
            let store = SqliteStore::builder(&path)
                .table(table)
                .open()
                .await
                .unwrap_or_else(|e| panic!("{order:?}: opening {table}: {e}"));
            upsert(
                &store,
                day(0),
                vec![kv(table, "v")],
                WriteOptions::default(),
            )
            .await
            .unwrap();
        }
        for table in order {
            assert!(has_event_date_index(&path, table), "{order:?}: {table}");
            let store = SqliteStore::builder(&path)
                .table(table)
                .open()
                .await
                .unwrap();
            assert_eq!(store.rows().await.unwrap(), vec![kv(table, "v")]);
        }
    }
}

#[tokio::test]
async fn a_missing_event_date_index_is_created_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    drop(SqliteStore::open(&path).await.unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let indexes: Vec<String> = conn
        .prepare("SELECT name FROM pragma_index_list('backfill_records') WHERE origin = 'c'")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    conn.execute_batch(&format!("DROP INDEX \"{}\"", indexes[0]))
        .unwrap();
    drop(conn);
    assert!(!has_event_date_index(&path, "backfill_records"));
    drop(SqliteStore::open(&path).await.unwrap());
    assert!(has_event_date_index(&path, "backfill_records"));
}

#[tokio::test]
async fn an_existing_index_on_event_date_is_used_whatever_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    drop(SqliteStore::open(&path).await.unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let index: String = conn
        .query_row(
            "SELECT name FROM pragma_index_list('backfill_records') WHERE origin = 'c'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    conn.execute_batch(&format!(
        "DROP INDEX \"{index}\"; CREATE INDEX by_day ON backfill_records (event_date, key);"
    ))
    .unwrap();
    drop(conn);
    drop(SqliteStore::open(&path).await.unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_index_list('backfill_records') WHERE origin = 'c'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(n, 1, "no second index on event_date");
}

/// A file holding one row in the default table, written and closed, and
/// its bytes.
async fn file_with_one_row(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("db.sqlite");
    let store = SqliteStore::open(&path).await.unwrap();
    upsert(&store, day(0), vec![kv("a", "v")], WriteOptions::default())
        .await
        .unwrap();
    drop(store);
    path
}

fn read_only_uri(path: &std::path::Path) -> String {
    format!("file:{}?mode=ro", path.display())
}

/// Reads work; a write is a non-retryable error that changes nothing.
async fn assert_reads_but_never_writes(store: &SqliteStore, path: &std::path::Path) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(store.rows().await.unwrap(), vec![kv("a", "v")]);
    assert_eq!(store.get("a").await.unwrap(), Some(kv("a", "v")));
    assert_eq!(store.day_rows(day(0)).await.unwrap(), vec![kv("a", "v")]);
    let write = upsert(store, day(0), vec![kv("b", "v")], WriteOptions::default()).await;
    match write {
        Err(
            e @ Error::Backend {
                backend: "sqlite", ..
            },
        ) => {
            assert!(!e.is_retryable(), "{e}");
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
    assert_eq!(store.rows().await.unwrap(), vec![kv("a", "v")]);
    assert_eq!(
        std::fs::read(path).unwrap(),
        bytes,
        "the file must be untouched"
    );
}

#[tokio::test]
async fn a_read_only_uri_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with_one_row(&dir).await;
    let store = SqliteStore::open(read_only_uri(&path)).await.unwrap();
    assert_reads_but_never_writes(&store, &path).await;
}

#[tokio::test]
async fn opening_read_only_runs_no_ddl_and_no_journal_switch() {
    // A file in rollback-journal mode whose table has lost its index: a
    // writable open would switch it to WAL and add the index, but a
    // read-only one must only read.
    let dir = tempfile::tempdir().unwrap();
    let path = file_with_one_row(&dir).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let index: String = conn
        .query_row(
            "SELECT name FROM pragma_index_list('backfill_records') WHERE origin = 'c'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    conn.execute_batch(&format!("DROP INDEX \"{index}\""))
        .unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    drop(conn);
    let store = SqliteStore::open(read_only_uri(&path)).await.unwrap();
    assert_reads_but_never_writes(&store, &path).await;
    drop(store);
    assert!(!has_event_date_index(&path, "backfill_records"));
}

#[tokio::test]
async fn opening_read_only_a_missing_table_is_an_open_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with_one_row(&dir).await;
    let bytes = std::fs::read(&path).unwrap();
    match SqliteStore::builder(read_only_uri(&path))
        .table("elsewhere")
        .open()
        .await
    {
        Err(
            e @ Error::Open {
                backend: "sqlite", ..
            },
        ) => {
            assert!(e.to_string().contains("\"elsewhere\""), "{e}")
        }
        other => panic!("expected an Open error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[tokio::test]
async fn the_read_only_switch_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with_one_row(&dir).await;
    let store = SqliteStore::builder(&path)
        .read_only(true)
        .open()
        .await
        .unwrap();
    assert!(store.is_read_only());
    assert_reads_but_never_writes(&store, &path).await;
    let writable = SqliteStore::open(&path).await.unwrap();
    assert!(!writable.is_read_only());
}

#[tokio::test]
async fn the_read_only_switch_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_with_one_row(&dir).await;
    let bytes = std::fs::read(&path).unwrap();
    match SqliteStore::builder(&path)
        .table("elsewhere")
        .read_only(true)
        .open()
        .await
    {
        Err(
            e @ Error::Open {
                backend: "sqlite", ..
            },
        ) => {
            assert!(e.to_string().contains("\"elsewhere\""), "{e}")
        }
        other => panic!("expected an Open error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let missing = dir.path().join("missing.sqlite");
    assert!(matches!(
        SqliteStore::builder(&missing).read_only(true).open().await,
        Err(Error::Open {
            backend: "sqlite",
            ..
        })
    ));
    assert!(!missing.exists(), "a read-only open creates no file");
}
