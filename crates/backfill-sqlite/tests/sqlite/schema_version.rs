//! Schema versions 2 and 3: a records table of version 1 is upgraded in
//! place on a writable open (every row kept, live), once, through version 2
//! to 3; a read-only open refuses it, and a newer version is refused; the
//! metadata tables are checked like the records table, and their names are
//! reserved. (Version 2 → 3 and the ledger columns: `ledger.rs`.)

use backfill_core::conformance::fixtures::{at, jan, listing, rec, tomb};
use backfill_core::{upsert, Error, Mode, Record, Store, WriteOptions};
use backfill_sqlite::SqliteStore;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

use super::raw;

/// The records table and index exactly as the release at commit d5cb5de
/// (schema version 1) created them, for table `t`.
const V1_DDL: &str = r#"
CREATE TABLE IF NOT EXISTS "t" (
    key TEXT NOT NULL COLLATE BINARY PRIMARY KEY
        CHECK (length(CAST(key AS BLOB)) BETWEEN 1 AND 512 AND instr(CAST(key AS BLOB), x'00') = 0),
    event_date TEXT NOT NULL COLLATE BINARY
        CHECK (length(event_date) = 10 AND date(event_date, '+0 days') IS event_date AND event_date BETWEEN '0001-01-01' AND '9999-12-31'),
    value TEXT NOT NULL COLLATE BINARY
        CHECK (instr(CAST(value AS BLOB), x'00') = 0),
    updated_at TEXT NOT NULL COLLATE BINARY
        CHECK (length(updated_at) = 27 AND substr(updated_at, 1, 4) BETWEEN '0001' AND '9999' AND strftime('%Y-%m-%dT%H:%M:%S', substr(updated_at, 1, 19), '+0 days') IS substr(updated_at, 1, 19) AND substr(updated_at, 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')
) STRICT;
CREATE INDEX IF NOT EXISTS "t:event_date" ON "t" (event_date);
"#;

/// The layout of backfill-sqlite 0.1.0, before existing tables were
/// checked (weaker CHECKs, another index name): also version 1.
const EARLIEST_DDL: &str = r#"
CREATE TABLE IF NOT EXISTS "t" (
    key        TEXT NOT NULL COLLATE BINARY PRIMARY KEY
               CHECK (length(CAST(key AS BLOB)) BETWEEN 1 AND 512
                      AND instr(CAST(key AS BLOB), x'00') = 0),
    event_date TEXT NOT NULL
               CHECK (length(event_date) = 10 AND date(event_date) = event_date),
    value      TEXT NOT NULL COLLATE BINARY
               CHECK (instr(CAST(value AS BLOB), x'00') = 0),
    updated_at TEXT NOT NULL COLLATE BINARY
               CHECK (length(updated_at) = 27)
) STRICT;
CREATE INDEX IF NOT EXISTS "t_event_date" ON "t" (event_date);
"#;

/// The rows a version-1 file holds: two days, one value empty.
fn v1_rows() -> Vec<Record> {
    vec![
        rec("a", jan(1), r#"{"n":1}"#, at(10)),
        rec("b", jan(1), "", at(11)),
        rec("c", jan(2), "x", at(12)),
    ]
}

/// A database file whose table `t` was made by `ddl` and holds
/// [`v1_rows`], written the way version 1 wrote them.
fn v1_file(dir: &tempfile::TempDir, ddl: &str) -> PathBuf {
    let path = dir.path().join("v1.sqlite");
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch(ddl).unwrap();
    for r in v1_rows() {
        conn.execute(
            "INSERT INTO t (key, event_date, value, updated_at) VALUES (?1, ?2, ?3, ?4)",
            (
                r.key(),
                r.event_date().format("%Y-%m-%d").to_string(),
                r.value(),
                r.updated_at()
                    .format(backfill_sqlite::INSTANT_FORMAT)
                    .to_string(),
            ),
        )
        .unwrap();
    }
    path
}

async fn open(path: &Path) -> backfill_core::Result<SqliteStore> {
    SqliteStore::builder(path).table("t").open().await
}

fn schema_version(path: &Path) -> Option<i64> {
    let conn = raw(path);
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE name = 'backfill_tables')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    if !exists {
        return None;
    }
    conn.query_row(
        "SELECT schema_version FROM backfill_tables WHERE records_table = 't'",
        [],
        |r| r.get(0),
    )
    .ok()
}

fn column_names(path: &Path) -> Vec<String> {
    raw(path)
        .prepare("SELECT name FROM pragma_table_xinfo('t') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// What opening a file may not change: its schema cookie, its metadata
/// rows, and (once closed) its bytes.
fn fingerprint(path: &Path) -> (i64, Vec<(String, i64)>, Vec<u8>) {
    let conn = raw(path);
    let cookie: i64 = conn
        .query_row("PRAGMA schema_version", [], |r| r.get(0))
        .unwrap();
    let versions = conn
        .prepare("SELECT records_table, schema_version FROM backfill_tables ORDER BY 1")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(conn);
    (cookie, versions, std::fs::read(path).unwrap())
}

async fn assert_upgrades_in_place(ddl: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_file(&dir, ddl);
    assert_eq!(schema_version(&path), None);
    let store = open(&path).await.unwrap();
    // Every row kept, live.
    assert_eq!(store.rows().await.unwrap(), v1_rows());
    assert_eq!(store.rows_with_tombstones().await.unwrap(), v1_rows());
    assert_eq!(store.get("b").await.unwrap(), Some(v1_rows()[1].clone()));
    assert_eq!(store.total_changes().await.unwrap(), 0);
    assert_eq!(schema_version(&path), Some(3));
    assert_eq!(
        column_names(&path),
        ["key", "event_date", "value", "updated_at", "deleted"],
        "`deleted` is the last column, as in a new table"
    );
    let indexes: i64 = raw(&path)
        .query_row(
            "SELECT count(*) FROM pragma_index_list('t') WHERE origin = 'c'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 1, "the existing index on event_date serves");

    // Writes work: an update, a tombstone, a listing.
    let c = upsert(
        &store,
        jan(1),
        vec![
            rec("a", jan(1), "new", at(20)),
            tomb("b", jan(1), at(20)),
            rec("d", jan(1), "d", at(20)),
        ],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((c.inserted, c.updated, c.deleted), (1, 1, 1));
    let listing = listing(at(30));
    let c = upsert(&store, jan(2), Vec::new(), listing).await.unwrap();
    assert_eq!((c.deleted, c.unlisted), (1, 1));
    let expected_all = vec![
        rec("a", jan(1), "new", at(20)),
        tomb("b", jan(1), at(20)),
        rec("c", jan(2), "x", at(12)).to_tombstone(),
        rec("d", jan(1), "d", at(20)),
    ];
    assert_eq!(store.rows_with_tombstones().await.unwrap(), expected_all);
    // Through version 2 to 3: the days table has the ledger columns, and
    // both writes wrote their day's ledger row.
    let days_columns: i64 = raw(&path)
        .query_row(
            "SELECT count(*) FROM pragma_table_xinfo('backfill_days')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(days_columns, 19);
    let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
    let seen: Vec<_> = ledger
        .iter()
        .map(|e| (e.day, e.state(), e.listing_watermark))
        .collect();
    assert_eq!(
        seen,
        [
            (jan(1), backfill_core::DayState::Synced, None),
            (jan(2), backfill_core::DayState::Synced, Some(at(30))),
        ]
    );
    drop(store);

    // Reopening is a no-op: no DDL, no row, not a byte of the file.
    let before = fingerprint(&path);
    let store = open(&path).await.unwrap();
    assert_eq!(store.total_changes().await.unwrap(), 0);
    assert_eq!(store.rows_with_tombstones().await.unwrap(), expected_all);
    drop(store);
    assert_eq!(fingerprint(&path), before, "reopening changed the file");
}

#[tokio::test]
async fn a_version_1_table_is_upgraded_in_place_keeping_every_row() {
    assert_upgrades_in_place(V1_DDL).await;
}

#[tokio::test]
async fn a_table_of_the_earliest_layout_is_upgraded_too() {
    assert_upgrades_in_place(EARLIEST_DDL).await;
}

#[tokio::test]
async fn a_version_1_table_of_another_shape_is_refused_before_any_change() {
    let dir = tempfile::tempdir().unwrap();
    let nocase = V1_DDL.replacen(
        "key TEXT NOT NULL COLLATE BINARY PRIMARY KEY",
        "key TEXT NOT NULL COLLATE NOCASE PRIMARY KEY",
        1,
    );
    let path = v1_file(&dir, &nocase);
    let before = fingerprint_without_metadata(&path);
    match open(&path).await {
        Err(e @ Error::Open { .. }) => assert!(e.to_string().contains("NOCASE"), "{e}"),
        other => panic!("expected an Open error, got {other:?}"),
    }
    assert_eq!(schema_version(&path), None, "no metadata table created");
    assert_eq!(column_names(&path).len(), 4, "no column added");
    assert_eq!(fingerprint_without_metadata(&path), before);
}

fn fingerprint_without_metadata(path: &Path) -> (i64, Vec<u8>) {
    let cookie = raw(path)
        .query_row("PRAGMA schema_version", [], |r| r.get(0))
        .unwrap();
    (cookie, std::fs::read(path).unwrap())
}

#[tokio::test]
async fn a_read_only_open_refuses_a_version_1_table_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_file(&dir, V1_DDL);
    let before = fingerprint_without_metadata(&path);
    for read_only in [
        SqliteStore::builder(&path).table("t").read_only(true),
        SqliteStore::builder(format!("file:{}?mode=ro", path.display())).table("t"),
    ] {
        match read_only.open().await {
            Err(e @ Error::Open { .. }) => {
                let message = e.to_string();
                for word in ["\"t\"", "version 1", "upgrade", "writable"] {
                    assert!(message.contains(word), "{word:?} missing from: {message}");
                }
            }
            other => panic!("expected an Open error, got {other:?}"),
        }
    }
    assert_eq!(fingerprint_without_metadata(&path), before);
    // One writable open upgrades it; then read-only opens read it.
    drop(open(&path).await.unwrap());
    let store = SqliteStore::builder(&path)
        .table("t")
        .read_only(true)
        .open()
        .await
        .unwrap();
    assert_eq!(store.rows().await.unwrap(), v1_rows());
}

#[tokio::test]
async fn a_newer_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    drop(open(&path).await.unwrap());
    raw(&path)
        .execute(
            "UPDATE backfill_tables SET schema_version = 4 WHERE records_table = 't'",
            [],
        )
        .unwrap();
    for read_only in [false, true] {
        match SqliteStore::builder(&path)
            .table("t")
            .read_only(read_only)
            .open()
            .await
        {
            Err(e @ Error::Open { .. }) => {
                let message = e.to_string();
                assert!(message.contains("schema version 4"), "{message}");
                assert!(message.contains("newer release"), "{message}");
            }
            other => panic!("read_only {read_only}: expected an Open error, got {other:?}"),
        }
    }
    assert_eq!(schema_version(&path), Some(4), "left as it was");
}

#[tokio::test]
async fn a_new_table_is_version_3_and_forgets_the_days_of_a_dropped_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await.unwrap();
    assert_eq!(schema_version(&path), Some(3));
    let listing = WriteOptions::default().mode(Mode::Replace).as_of(at(100));
    upsert(&store, jan(1), vec![rec("a", jan(1), "v", at(1))], listing)
        .await
        .unwrap();
    drop(store);
    raw(&path).execute_batch("DROP TABLE t").unwrap();
    let store = open(&path).await.unwrap();
    // With the old watermark (100) left behind, this would arrive deleted.
    let c = upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(c.inserted, 1);
    // v3: the one day row is the new table's ledger row of that merge,
    // nothing of the dropped table's (its watermark, its listing).
    let days: Vec<(String, Option<String>, String)> = raw(&path)
        .prepare("SELECT day, listing_watermark, mode FROM backfill_days")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(days, [("2026-01-01".to_owned(), None, "merge".to_owned())]);
}

#[tokio::test]
async fn a_table_of_the_current_shape_without_its_version_row_is_registered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await.unwrap();
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    drop(store);
    raw(&path)
        .execute_batch("DROP TABLE backfill_tables; DROP TABLE backfill_days;")
        .unwrap();
    let store = open(&path).await.unwrap();
    assert_eq!(schema_version(&path), Some(3));
    assert_eq!(
        store.rows().await.unwrap(),
        vec![rec("a", jan(1), "v", at(1))]
    );
}

#[tokio::test]
async fn reserved_names_are_refused_before_touching_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    for name in ["backfill_tables", "backfill_days"] {
        match SqliteStore::builder(&path).table(name).open().await {
            Err(Error::InvalidName {
                what: "table",
                name: got,
            }) => assert_eq!(got, name),
            other => panic!("{name}: expected InvalidName, got {other:?}"),
        }
    }
    assert!(!path.exists(), "no file may be created for a reserved name");
}

/// Opens a new file whose metadata table was created beforehand by `ddl`,
/// and expects an `Open` error naming every one of `words`; the records
/// table must not have been created.
async fn assert_metadata_refused(ddl: &str, words: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    raw(&path).execute_batch(ddl).unwrap();
    match open(&path).await {
        Err(e @ Error::Open { .. }) => {
            let message = e.to_string();
            for word in words {
                assert!(message.contains(word), "{word:?} missing from: {message}");
            }
        }
        other => panic!("{ddl}: expected an Open error, got {other:?}"),
    }
    let tables: i64 = raw(&path)
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 't'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "nothing created beside a refused metadata table");
}

/// The store's own `backfill_days`, whitespace collapsed, with each
/// replacement applied (each must find its text).
fn days_ddl_with(replacements: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    drop(rt.block_on(open(&path)).unwrap());
    let ddl: String = raw(&path)
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'backfill_days'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mut ddl = ddl.split_whitespace().collect::<Vec<_>>().join(" ");
    for (from, to) in replacements {
        assert!(ddl.contains(from), "{from:?} not found in {ddl}");
        ddl = ddl.replacen(from, to, 1);
    }
    ddl
}

#[tokio::test]
async fn metadata_tables_of_another_shape_are_refused() {
    assert_metadata_refused(
        "CREATE TABLE backfill_tables (records_table TEXT NOT NULL PRIMARY KEY, \
         schema_version TEXT NOT NULL) STRICT",
        &["\"backfill_tables\"", "\"schema_version\"", "INTEGER"],
    )
    .await;
    assert_metadata_refused(
        "CREATE TABLE backfill_tables (records_table TEXT NOT NULL COLLATE NOCASE PRIMARY KEY, \
         schema_version INTEGER NOT NULL) STRICT",
        &["\"backfill_tables\"", "\"records_table\"", "NOCASE"],
    )
    .await;
    assert_metadata_refused(
        "CREATE TABLE backfill_tables (records_table TEXT NOT NULL COLLATE BINARY PRIMARY KEY, \
         schema_version INTEGER NOT NULL)",
        &["\"backfill_tables\"", "STRICT"],
    )
    .await;
    let days = [
        (
            // The primary key without `day`: one watermark for every day.
            vec![(
                "PRIMARY KEY (records_table, day)",
                "PRIMARY KEY (records_table)",
            )],
            vec!["\"backfill_days\"", "\"day\"", "primary key"],
        ),
        (
            vec![(
                "listing_watermark TEXT COLLATE BINARY",
                "listing_watermark TEXT NOT NULL COLLATE BINARY",
            )],
            vec!["\"listing_watermark\"", "NOT NULL"],
        ),
        (
            vec![(
                "listing_watermark TEXT COLLATE BINARY",
                "listing_watermark INTEGER",
            )],
            vec!["\"listing_watermark\"", "INTEGER"],
        ),
        (
            vec![(
                "PRIMARY KEY (records_table, day)",
                "note TEXT, PRIMARY KEY (records_table, day)",
            )],
            vec!["\"note\""],
        ),
        (
            vec![(
                "day TEXT NOT NULL COLLATE BINARY CHECK (",
                "day TEXT NOT NULL COLLATE BINARY CHECK (1 OR ",
            )],
            vec!["\"day\"", "CHECK"],
        ),
    ];
    for (replacements, words) in days {
        let ddl = tokio::task::spawn_blocking(move || days_ddl_with(&replacements))
            .await
            .unwrap();
        assert_metadata_refused(&ddl, &words).await;
    }
}

#[tokio::test]
async fn tables_of_one_file_keep_their_own_watermarks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let a = SqliteStore::builder(&path).table("a").open().await.unwrap();
    let b = SqliteStore::builder(&path).table("b").open().await.unwrap();
    let listing = listing(at(100));
    upsert(&a, jan(1), Vec::new(), listing).await.unwrap();
    // Under a's watermark this would be a tombstone; b has none.
    let c = upsert(
        &b,
        jan(1),
        vec![rec("k", jan(1), "v", at(50))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(c.inserted, 1);
    let c = upsert(
        &a,
        jan(1),
        vec![rec("k", jan(1), "v", at(50))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(c.deleted, 1);
    let versions: Vec<(String, i64)> = raw(&path)
        .prepare("SELECT records_table, schema_version FROM backfill_tables ORDER BY 1")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, [("a".to_owned(), 3), ("b".to_owned(), 3)]);
}

#[tokio::test]
async fn concurrent_opens_of_a_version_1_file_upgrade_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = v1_file(&dir, V1_DDL);
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { open(&path).await })
        })
        .collect();
    for handle in opens {
        let store = handle.await.unwrap().unwrap();
        assert_eq!(store.rows().await.unwrap(), v1_rows());
    }
    assert_eq!(schema_version(&path), Some(3));
    assert_eq!(column_names(&path).len(), 5);
}
