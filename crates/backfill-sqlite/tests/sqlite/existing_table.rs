//! Opening a table that already exists: a table of the store's own
//! definition is used; any other definition is refused before a write, with
//! an error that names the column and what differs, because a table that
//! merely looks right can store wrong data (keys that collapse under
//! `NOCASE`, values turned into integers by a non-STRICT `INTEGER` column).
//!
//! Each case takes the definition the store itself creates and changes one
//! thing, so a case proves exactly one check.

use backfill_core::conformance::fixtures::{day, kv};
use backfill_core::{upsert, Error, Store, WriteOptions};
use backfill_sqlite::{SqliteStore, TableMismatch};
use rusqlite::Connection;
use tempfile::TempDir;

const TABLE: &str = "t";

/// A database file whose table `t` has the store's own definition with each
/// `(from, to)` replacement applied (whitespace collapsed first), and no
/// rows. Panics if a replacement finds nothing to replace, so a change to
/// the store's DDL cannot turn a case into a no-op.
async fn table_with(replacements: &[(&str, &str)]) -> (TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    drop(
        SqliteStore::builder(&path)
            .table(TABLE)
            .open()
            .await
            .unwrap(),
    );
    let conn = Connection::open(&path).unwrap();
    let ddl: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [TABLE],
            |row| row.get(0),
        )
        .unwrap();
    let mut ddl = ddl.split_whitespace().collect::<Vec<_>>().join(" ");
    for (from, to) in replacements {
        assert!(ddl.contains(from), "{from:?} not found in {ddl}");
        ddl = ddl.replacen(from, to, 1);
    }
    conn.execute_batch(&format!("DROP TABLE {TABLE}; {ddl};"))
        .unwrap();
    (dir, path)
}

/// Opens `t` in `path` and expects an `Open` error whose message contains
/// every one of `words`.
async fn assert_refused(path: &std::path::Path, words: &[&str]) {
    match SqliteStore::builder(path).table(TABLE).open().await {
        Err(
            e @ Error::Open {
                backend: "sqlite", ..
            },
        ) => {
            let message = e.to_string();
            for word in words {
                assert!(message.contains(word), "{word:?} missing from: {message}");
            }
        }
        other => panic!("expected an Open error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_stores_own_definition_is_accepted_whatever_its_whitespace() {
    let (_dir, path) = table_with(&[]).await;
    let store = SqliteStore::builder(&path)
        .table(TABLE)
        .open()
        .await
        .unwrap();
    upsert(
        &store,
        day(0),
        vec![kv("a", "042"), kv("A", "1")],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        store.rows().await.unwrap(),
        vec![kv("A", "1"), kv("a", "042")]
    );
}

#[tokio::test]
async fn a_nocase_key_is_refused() {
    // Under NOCASE, `a` and `A` are one row: counts say inserted 2 and the
    // reference store keeps both, but the table keeps one.
    let (_dir, path) = table_with(&[(
        "key TEXT NOT NULL COLLATE BINARY PRIMARY KEY",
        "key TEXT NOT NULL COLLATE NOCASE PRIMARY KEY",
    )])
    .await;
    assert_refused(&path, &["\"key\"", "NOCASE", "BINARY"]).await;
}

#[tokio::test]
async fn a_nocase_primary_key_declared_on_the_table_is_refused() {
    let (_dir, path) = table_with(&[
        (
            "key TEXT NOT NULL COLLATE BINARY PRIMARY KEY",
            "key TEXT NOT NULL COLLATE BINARY",
        ),
        (") STRICT", ", PRIMARY KEY (key COLLATE NOCASE)) STRICT"),
    ])
    .await;
    assert_refused(&path, &["\"key\"", "NOCASE"]).await;
}

#[tokio::test]
async fn an_integer_value_in_a_table_that_is_not_strict_is_refused() {
    // Seen: "042" stored as 42, and then `rows()` fails.
    let (_dir, path) = table_with(&[
        (
            "value TEXT NOT NULL COLLATE BINARY",
            "value INTEGER NOT NULL COLLATE BINARY",
        ),
        (") STRICT", ")"),
    ])
    .await;
    assert_refused(&path, &["\"value\"", "INTEGER", "TEXT", "STRICT"]).await;
}

#[tokio::test]
async fn a_table_that_is_not_strict_is_refused() {
    let (_dir, path) = table_with(&[(") STRICT", ")")]).await;
    assert_refused(&path, &["STRICT"]).await;
}

#[tokio::test]
async fn a_missing_check_is_refused() {
    let (_dir, path) = table_with(&[(
        "value TEXT NOT NULL COLLATE BINARY CHECK (instr(CAST(value AS BLOB), x'00') = 0)",
        "value TEXT NOT NULL COLLATE BINARY",
    )])
    .await;
    assert_refused(&path, &["\"value\"", "CHECK"]).await;
}

#[tokio::test]
async fn a_weaker_check_is_refused() {
    let (_dir, path) = table_with(&[("BETWEEN 1 AND 512", "BETWEEN 1 AND 5120")]).await;
    assert_refused(&path, &["\"key\"", "CHECK", "5120"]).await;
}

#[tokio::test]
async fn a_missing_primary_key_is_refused() {
    let (_dir, path) = table_with(&[(
        "key TEXT NOT NULL COLLATE BINARY PRIMARY KEY",
        "key TEXT NOT NULL COLLATE BINARY",
    )])
    .await;
    assert_refused(&path, &["\"key\"", "primary key"]).await;
}

#[tokio::test]
async fn a_nullable_column_is_refused() {
    let (_dir, path) = table_with(&[(
        "updated_at TEXT NOT NULL COLLATE BINARY",
        "updated_at TEXT COLLATE BINARY",
    )])
    .await;
    assert_refused(&path, &["\"updated_at\"", "NOT NULL"]).await;
}

#[tokio::test]
async fn an_extra_column_is_refused() {
    let (_dir, path) = table_with(&[(") STRICT", ", note TEXT) STRICT")]).await;
    assert_refused(&path, &["\"note\""]).await;
}

#[tokio::test]
async fn a_missing_column_is_refused() {
    let (_dir, path) = table_with(&[]).await;
    // Renaming rewrites the column's CHECK too, so only the name differs.
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "ALTER TABLE {TABLE} RENAME COLUMN updated_at TO changed_at"
        ))
        .unwrap();
    assert_refused(&path, &["\"updated_at\"", "missing", "\"changed_at\""]).await;
}

#[tokio::test]
async fn the_error_is_a_table_mismatch_naming_each_column() {
    let (_dir, path) = table_with(&[
        (
            "key TEXT NOT NULL COLLATE BINARY PRIMARY KEY",
            "key TEXT NOT NULL COLLATE NOCASE PRIMARY KEY",
        ),
        (") STRICT", ", note TEXT) STRICT"),
    ])
    .await;
    match SqliteStore::builder(&path).table(TABLE).open().await {
        Err(Error::Open { source, .. }) => {
            let mismatch = source
                .downcast_ref::<TableMismatch>()
                .unwrap_or_else(|| panic!("the source is a TableMismatch: {source}"));
            assert_eq!(mismatch.table(), "\"t\"");
            let found: Vec<(Option<&str>, &str)> = mismatch
                .differences()
                .iter()
                .map(|d| (d.column(), d.problem()))
                .collect();
            assert!(
                found.contains(&(Some("key"), "has collation NOCASE, expected BINARY")),
                "{found:?}"
            );
            assert!(
                found.contains(&(Some("note"), "is not one the store creates")),
                "{found:?}"
            );
        }
        other => panic!("expected an Open error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_view_of_that_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("CREATE VIEW {TABLE} AS SELECT 1 AS key"))
        .unwrap();
    assert_refused(&path, &["view"]).await;
}

/// The file layout of backfill-sqlite 0.1.0 before this crate checked
/// existing tables: the DDL exactly as that version ran it.
const EARLIER_DDL: &str = r#"
CREATE TABLE IF NOT EXISTS "backfill_records" (
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
CREATE INDEX IF NOT EXISTS "backfill_records_event_date" ON "backfill_records" (event_date);
"#;

#[tokio::test]
async fn a_file_from_the_earlier_version_keeps_opening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(EARLIER_DDL).unwrap();
    conn.execute(
        "INSERT INTO backfill_records VALUES ('a', '2026-01-01', 'old', '2026-01-01T00:00:00.000000Z')",
        [],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path).await.unwrap();
    let c = upsert(
        &store,
        day(0),
        vec![kv("a", "old"), kv("b", "new")],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((c.inserted, c.unchanged), (1, 1));
    drop(store);
    let indexes: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM pragma_index_list('backfill_records') WHERE origin = 'c'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 1, "its index on event_date serves; no second one");
}

#[tokio::test]
async fn a_deleted_column_that_allows_a_tombstone_with_a_value_is_refused() {
    let (_dir, path) = table_with(&[(
        "CHECK (deleted IN (0, 1) AND (deleted = 0 OR value = ''))",
        "CHECK (deleted IN (0, 1))",
    )])
    .await;
    assert_refused(&path, &["\"deleted\"", "CHECK", "value = ''"]).await;
}

#[tokio::test]
async fn a_deleted_column_of_another_type_or_default_is_refused() {
    let (_dir, path) = table_with(&[(
        "deleted INTEGER NOT NULL DEFAULT 0",
        "deleted TEXT NOT NULL DEFAULT 0",
    )])
    .await;
    assert_refused(&path, &["\"deleted\"", "TEXT", "INTEGER"]).await;
    // A default of 1 would make every row another writer inserts a
    // tombstone (and fail the CHECK on its value).
    let (_dir, path) = table_with(&[(
        "deleted INTEGER NOT NULL DEFAULT 0",
        "deleted INTEGER NOT NULL DEFAULT 1",
    )])
    .await;
    assert_refused(&path, &["\"deleted\"", "DEFAULT 1", "DEFAULT 0"]).await;
}

#[tokio::test]
async fn a_table_without_the_deleted_column_but_registered_as_version_2_is_refused() {
    let (_dir, path) = table_with(&[]).await;
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("ALTER TABLE {TABLE} DROP COLUMN deleted"))
        .unwrap();
    assert_refused(&path, &["\"deleted\"", "missing"]).await;
}
