//! History as SQLite keeps it: what a re-run writes (nothing), turning it
//! on for a table with rows, that it stays on, the objects checked on
//! open, and the SQL an analyst runs against the view with their own
//! connection.

use backfill_core::conformance::fixtures::{at, jan, listing, rec, tomb};
use backfill_core::{upsert, Error, Record, Store, WriteOptions};
use backfill_sqlite::SqliteStore;
use rusqlite::Connection;

async fn with_history(path: &std::path::Path) -> SqliteStore {
    SqliteStore::builder(path)
        .history(true)
        .open()
        .await
        .unwrap()
}

async fn put(store: &SqliteStore, records: Vec<Record>, options: WriteOptions) {
    let d = records.first().map_or(jan(1), Record::event_date);
    upsert(store, d, records, options).await.unwrap();
}

fn open_error(result: backfill_core::Result<SqliteStore>) -> String {
    match result {
        Err(Error::Open { source, .. }) => source.to_string(),
        other => panic!("expected an open error, got {other:?}"),
    }
}

/// A re-run of merges and of a listing (same instant) writes no row to
/// the records table or to history: SQLite's change counter moves by the
/// day's ledger row only. A stale re-delivery already in history writes
/// nothing either; a new stale one writes its version alone.
#[tokio::test]
async fn a_rerun_writes_no_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = with_history(&dir.path().join("db.sqlite")).await;
    let d = jan(1);
    let day = |v: &str, t: i64| -> Vec<Record> {
        (0..50)
            .map(|i| rec(&format!("k{i:02}"), d, &format!("{v}{i}"), at(t)))
            .collect()
    };
    put(&store, day("a", 10), WriteOptions::default()).await;
    put(&store, day("b", 20), WriteOptions::default()).await;
    put(&store, day("b", 20), listing(at(30))).await;
    let before = store.total_changes().await.unwrap();
    put(&store, day("b", 20), WriteOptions::default()).await;
    put(&store, day("a", 10), WriteOptions::default()).await;
    put(&store, day("b", 20), listing(at(30))).await;
    assert_eq!(
        store.total_changes().await.unwrap() - before,
        6,
        "three ledger rows and their timings, nothing else"
    );
    let before = store.total_changes().await.unwrap();
    put(
        &store,
        vec![rec("k00", d, "older", at(5))],
        WriteOptions::default(),
    )
    .await;
    assert_eq!(
        store.total_changes().await.unwrap() - before,
        3,
        "the stale version in history, the ledger row and its timing"
    );
    assert_eq!(store.history().await.unwrap().len(), 101);
}

/// Turned on for a table with rows, history starts from them, one version
/// per key (tombstones included) with the days' listings, and says so;
/// the next open finds it on. A store opened without asking keeps
/// writing it.
#[tokio::test]
async fn history_turned_on_starts_from_the_rows_and_stays_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let plain = SqliteStore::open(&path).await.unwrap();
    assert!(!plain.keeps_history());
    assert!(matches!(plain.history().await, Err(Error::HistoryOff)));
    assert!(matches!(plain.as_of(at(0)).await, Err(Error::HistoryOff)));
    let d = jan(1);
    put(
        &plain,
        vec![rec("a", d, "1", at(10)), rec("b", d, "2", at(10))],
        WriteOptions::default(),
    )
    .await;
    put(&plain, vec![tomb("c", d, at(12))], WriteOptions::default()).await;
    put(&plain, vec![rec("a", d, "1", at(10))], listing(at(50))).await;
    drop(plain);

    let store = with_history(&path).await;
    assert!(store.keeps_history());
    assert_eq!(store.history_started_with(), Some(3));
    let rows = store.history().await.unwrap();
    let versions: Vec<_> = rows.iter().map(|r| r.record.clone()).collect();
    assert_eq!(versions, store.rows_with_tombstones().await.unwrap());
    assert!(rows.iter().all(|r| r.valid_to.is_none()));
    drop(store);

    let again = with_history(&path).await;
    assert_eq!(again.history_started_with(), None, "on already");
    drop(again);
    let unasked = SqliteStore::open(&path).await.unwrap();
    assert!(unasked.keeps_history(), "once on, history stays on");
    put(
        &unasked,
        vec![rec("a", d, "0", at(5))],
        WriteOptions::default(),
    )
    .await;
    // The listing at 50 (the day's watermark) lacked the stale version:
    // it is closed there, where the live table stores its tombstone.
    let a: Vec<_> = unasked
        .history()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.record.key() == "a")
        .map(|r| (r.record.value().to_owned(), r.valid_from(), r.valid_to))
        .collect();
    assert_eq!(
        a,
        [
            ("0".to_owned(), at(5), Some(at(10))),
            ("1".to_owned(), at(10), None)
        ]
    );
}

/// The history objects are checked on open like the records table: a
/// view of another definition, or a table where the view goes, is
/// refused naming it, and nothing is written; a read-only open cannot
/// turn history on.
#[tokio::test]
async fn history_objects_of_another_shape_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    drop(with_history(&path).await);
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        r#"DROP VIEW backfill_records_history;
           CREATE VIEW backfill_records_history AS SELECT * FROM "backfill_records:versions""#,
    )
    .unwrap();
    let message = open_error(SqliteStore::builder(&path).history(true).open().await);
    assert!(message.contains("backfill_records_history"), "{message}");
    assert!(message.contains("is not the history view"), "{message}");
    let message = open_error(SqliteStore::open(&path).await);
    assert!(
        message.contains("is not the history view"),
        "unasked too: {message}"
    );

    let other = dir.path().join("other.sqlite");
    let conn = Connection::open(&other).unwrap();
    conn.execute_batch("CREATE TABLE backfill_records_history (x INTEGER)")
        .unwrap();
    drop(SqliteStore::open(&other).await.unwrap());
    let message = open_error(SqliteStore::builder(&other).history(true).open().await);
    assert!(message.contains("is a table"), "{message}");
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name GLOB 'backfill_records:[vl]*'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "nothing of history was created");

    let plain = dir.path().join("plain.sqlite");
    drop(SqliteStore::open(&plain).await.unwrap());
    let message = open_error(
        SqliteStore::builder(format!("file:{}?mode=ro", plain.display()))
            .history(true)
            .open()
            .await,
    );
    assert!(message.contains("keeps no history"), "{message}");
}

/// The queries the guide's History chapter gives an analyst, run with their own SQLite
/// connection against the view: the rows as of an instant, and what
/// changed between two instants.
#[tokio::test]
async fn an_analyst_queries_the_view_with_their_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let store = with_history(&path).await;
    let (d1, d2) = (jan(1), jan(2));
    put(
        &store,
        vec![rec("order:1", d1, r#"{"status":"open"}"#, at(3_600))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![rec("order:2", d2, r#"{"status":"open"}"#, at(90_000))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![rec("order:1", d1, r#"{"status":"paid"}"#, at(100_000))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![tomb("order:2", d2, at(110_000))],
        WriteOptions::default(),
    )
    .await;

    let conn = Connection::open(&path).unwrap();
    let as_of = |instant: &str| -> Vec<(String, String)> {
        conn.prepare(
            "SELECT key, value FROM backfill_records_history
             WHERE valid_from <= ?1 AND (valid_to IS NULL OR valid_to > ?1) AND deleted = 0
             ORDER BY key",
        )
        .unwrap()
        .query_map([instant], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let open = r#"{"status":"open"}"#.to_owned();
    assert_eq!(
        as_of("2026-01-02T02:00:00.000000Z"),
        [
            ("order:1".to_owned(), open.clone()),
            ("order:2".to_owned(), open.clone())
        ]
    );
    assert_eq!(
        as_of("2026-01-02T12:00:00.000000Z"),
        [("order:1".to_owned(), r#"{"status":"paid"}"#.to_owned())]
    );

    let changes: Vec<(String, String, i64)> = conn
        .prepare(
            "SELECT key, valid_from, deleted FROM backfill_records_history
             WHERE valid_from > ?1 AND valid_from <= ?2 ORDER BY valid_from, key",
        )
        .unwrap()
        .query_map(
            ["2026-01-02T00:00:00.000000Z", "2026-01-03T00:00:00.000000Z"],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        changes,
        [
            (
                "order:2".to_owned(),
                "2026-01-02T01:00:00.000000Z".to_owned(),
                0
            ),
            (
                "order:1".to_owned(),
                "2026-01-02T03:46:40.000000Z".to_owned(),
                0
            ),
            (
                "order:2".to_owned(),
                "2026-01-02T06:33:20.000000Z".to_owned(),
                1
            ),
        ]
    );
}

/// Typed columns in history: each version's as delivered, `NULL` in a
/// tombstone row; a column declared later is added to history too and
/// filled from each version's value (`NULL` where an old version's does
/// not fit), and the view remade with it; a column dropped from the
/// table goes from history with it.
#[tokio::test]
async fn history_keeps_the_typed_columns() {
    use backfill_core::columns::Column;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let open = |columns: &[&str], changes: bool| {
        let columns: Vec<Column> = columns.iter().map(|c| Column::parse(c).unwrap()).collect();
        SqliteStore::builder(&path)
            .history(true)
            .columns(columns)
            .allow_column_changes(changes)
            .open()
    };
    let d = jan(1);
    let store = open(&["total:integer"], false).await.unwrap();
    put(
        &store,
        vec![rec("o", d, r#"{"total":1}"#, at(10))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![rec("o", d, r#"{"total":2,"status":"paid"}"#, at(20))],
        WriteOptions::default(),
    )
    .await;
    put(&store, vec![tomb("o", d, at(30))], WriteOptions::default()).await;
    drop(store);
    let view = |columns: &str| -> Vec<Vec<Option<String>>> {
        let conn = Connection::open(&path).unwrap();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {columns} FROM backfill_records_history ORDER BY valid_from"
            ))
            .unwrap();
        let n = stmt.column_count();
        stmt.query_map([], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, rusqlite::types::Value>(i).map(|v| match v {
                        rusqlite::types::Value::Null => None,
                        rusqlite::types::Value::Integer(i) => Some(i.to_string()),
                        rusqlite::types::Value::Text(t) => Some(t),
                        other => Some(format!("{other:?}")),
                    })
                })
                .collect()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        view("total"),
        [vec![some("1")], vec![some("2")], vec![None]]
    );

    // Declared later: filled from each version, NULL where it did not have it.
    let store = open(&["total:integer", "status:text?"], false)
        .await
        .unwrap();
    drop(store);
    assert_eq!(
        view("total, status"),
        [
            vec![some("1"), None],
            vec![some("2"), some("paid")],
            vec![None, None]
        ]
    );
    // Dropped from the table (with leave to), dropped from history too.
    let store = open(&["status:text?"], true).await.unwrap();
    put(
        &store,
        vec![rec("o", d, r#"{"status":"back"}"#, at(40))],
        WriteOptions::default(),
    )
    .await;
    drop(store);
    assert_eq!(
        view("status"),
        [
            vec![None],
            vec![some("paid")],
            vec![None],
            vec![some("back")]
        ]
    );
    let conn = Connection::open(&path).unwrap();
    let has_total: bool = conn
        .query_row(
            r#"SELECT EXISTS (SELECT 1 FROM pragma_table_xinfo('backfill_records:versions') WHERE name = 'total')"#,
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!has_total);
}
