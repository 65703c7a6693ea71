//! The shared conformance suite, against an in-memory database, a file,
//! and a store that writes a streamed day two records at a time.

use backfill_sqlite::SqliteStore;

mod in_memory {
    use super::*;

    backfill_core::conformance_tests!(async { SqliteStore::open_in_memory().await.unwrap() });
}

mod on_file {
    use super::*;

    // The temporary directory lives as long as each test, beside the store.
    backfill_core::conformance_tests!(with_guard: async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("records.db"))
            .await
            .unwrap();
        (store, dir)
    });
}

mod in_pages_of_two {
    use super::*;

    // Every streamed day of the suite spans many pages.
    backfill_core::conformance_tests!(async {
        SqliteStore::builder_in_memory()
            .page_rows(2)
            .open()
            .await
            .unwrap()
    });
}

/// History: its own cases on a file, and the whole suite again with
/// history on (keeping it changes nothing the records table does), in
/// pages of two so that a listing's versions span many pages.
mod with_history {
    use super::*;

    backfill_core::history_conformance_tests!(with_guard: async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::builder(dir.path().join("records.db"))
            .history(true)
            .open()
            .await
            .unwrap();
        (store, dir)
    });

    mod in_pages_of_two {
        use super::*;

        backfill_core::history_conformance_tests!(async {
            SqliteStore::builder_in_memory()
                .history(true)
                .page_rows(2)
                .open()
                .await
                .unwrap()
        });
        backfill_core::conformance_tests!(async {
            SqliteStore::builder_in_memory()
                .history(true)
                .page_rows(2)
                .open()
                .await
                .unwrap()
        });
    }
}

/// The typed-column cases, on a file of each test's own, read back with a
/// connection of their own in SQLite's types.
mod typed_columns {
    use std::path::PathBuf;

    use async_trait::async_trait;
    use backfill_core::columns::{ColumnType, ColumnValue, Columns};
    use backfill_core::conformance::columns::TypedStore;
    use backfill_core::Result;
    use backfill_sqlite::SqliteStore;
    use chrono::{DateTime, NaiveDate, Utc};
    use rusqlite::types::Value;

    struct Harness {
        _dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl Harness {
        async fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("records.db");
            Self { _dir: dir, path }
        }
    }

    /// A column's value as SQLite keeps it, read back as the column's type.
    fn typed(ty: ColumnType, value: Value) -> ColumnValue {
        match (ty, value) {
            (_, Value::Null) => ColumnValue::Null,
            (ColumnType::Integer, Value::Integer(n)) => ColumnValue::Integer(n),
            (ColumnType::Boolean, Value::Integer(n)) => ColumnValue::Boolean(n != 0),
            (ColumnType::Double, Value::Real(x)) => ColumnValue::Double(x),
            (ColumnType::Text, Value::Text(s)) => ColumnValue::Text(s),
            (ColumnType::Numeric, Value::Text(s)) => ColumnValue::Numeric(s),
            (ColumnType::Json, Value::Text(s)) => ColumnValue::Json(s),
            (ColumnType::Date, Value::Text(s)) => {
                ColumnValue::Date(NaiveDate::parse_from_str(&s, "%Y-%m-%d").unwrap())
            }
            (ColumnType::Timestamp, Value::Text(s)) => {
                ColumnValue::Timestamp(s.parse::<DateTime<Utc>>().unwrap())
            }
            (ty, value) => panic!("a {ty} column holds {value:?}"),
        }
    }

    #[async_trait]
    impl TypedStore for Harness {
        type Store = SqliteStore;

        async fn open(&self, columns: &Columns) -> Result<SqliteStore> {
            SqliteStore::builder(&self.path)
                .columns(columns.iter().cloned())
                .open()
                .await
        }

        async fn open_changing(&self, columns: &Columns) -> Result<SqliteStore> {
            SqliteStore::builder(&self.path)
                .columns(columns.iter().cloned())
                .allow_column_changes(true)
                .open()
                .await
        }

        async fn typed_rows(&self, columns: &Columns) -> Vec<(String, Vec<ColumnValue>)> {
            let conn = rusqlite::Connection::open(&self.path).unwrap();
            let names: Vec<String> = columns
                .iter()
                .map(|c| format!("\"{}\"", c.name()))
                .collect();
            let sql = format!(
                "SELECT key{}{} FROM backfill_records ORDER BY key",
                if names.is_empty() { "" } else { ", " },
                names.join(", ")
            );
            let mut stmt = conn.prepare(&sql).unwrap();
            let rows = stmt
                .query_map([], |row| {
                    let values = columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| Ok(typed(c.column_type(), row.get(i + 1)?)))
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    Ok((row.get(0)?, values))
                })
                .unwrap();
            rows.map(Result::unwrap).collect()
        }
    }

    backfill_core::column_conformance_tests!(Harness::new());
}
