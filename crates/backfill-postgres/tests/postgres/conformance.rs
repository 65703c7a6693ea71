//! The shared conformance suite against Postgres: what every store must
//! pass; once more with chunks of two records, so every streamed day of
//! the suite spans many pages (and many savepoints, COPYs and listing
//! ranges) and every batch many chunks.

use backfill_testkit as testkit;

backfill_core::conformance_tests!(optional: testkit::store());

mod in_chunks_of_two {
    use super::*;
    use backfill_postgres::PostgresStore;

    async fn store() -> Option<PostgresStore> {
        let url = testkit::url().await?;
        let store = PostgresStore::builder()
            .schema(testkit::unique_schema())
            .page_rows(2)
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to the test Postgres: {e}"));
        Some(store)
    }

    backfill_core::conformance_tests!(optional: store());
}

/// History: its own cases, and the whole suite again with history on
/// (keeping it changes nothing the records table does) in chunks of two,
/// so that every streamed day's history is written from many pages.
mod with_history {
    use backfill_postgres::PostgresStore;
    use backfill_testkit as testkit;

    async fn store(page_rows: usize) -> Option<PostgresStore> {
        let url = testkit::url().await?;
        let store = PostgresStore::builder()
            .schema(testkit::unique_schema())
            .history(true)
            .page_rows(page_rows)
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to the test Postgres: {e}"));
        Some(store)
    }

    backfill_core::history_conformance_tests!(optional: store(10_000));

    mod in_chunks_of_two {
        use super::store;

        backfill_core::history_conformance_tests!(optional: store(2));
        backfill_core::conformance_tests!(optional: store(2));
    }
}

/// The typed-column cases, on a schema of each test's own, read back in
/// Postgres' own types.
mod typed_columns {
    use async_trait::async_trait;
    use backfill_core::columns::{ColumnType, ColumnValue, Columns};
    use backfill_core::conformance::columns::TypedStore;
    use backfill_core::Result;
    use backfill_postgres::{PostgresStore, DEFAULT_TABLE};
    use backfill_testkit as testkit;
    use chrono::{DateTime, NaiveDate, Utc};
    use tokio_postgres::Row;

    struct Harness {
        url: String,
        schema: String,
    }

    async fn harness() -> Option<Harness> {
        Some(Harness {
            url: testkit::url().await?,
            schema: testkit::unique_schema(),
        })
    }

    /// Column `i` of `row` as the column's type.
    fn typed(ty: ColumnType, row: &Row, i: usize) -> ColumnValue {
        fn or_null<T>(v: Option<T>, f: impl FnOnce(T) -> ColumnValue) -> ColumnValue {
            v.map_or(ColumnValue::Null, f)
        }
        match ty {
            ColumnType::Integer => or_null(row.get::<_, Option<i64>>(i), ColumnValue::Integer),
            ColumnType::Boolean => or_null(row.get::<_, Option<bool>>(i), ColumnValue::Boolean),
            ColumnType::Double => or_null(row.get::<_, Option<f64>>(i), ColumnValue::Double),
            ColumnType::Date => or_null(row.get::<_, Option<NaiveDate>>(i), ColumnValue::Date),
            ColumnType::Timestamp => or_null(
                row.get::<_, Option<DateTime<Utc>>>(i),
                ColumnValue::Timestamp,
            ),
            ColumnType::Numeric => or_null(row.get::<_, Option<String>>(i), ColumnValue::Numeric),
            ColumnType::Json => or_null(row.get::<_, Option<String>>(i), ColumnValue::Json),
            _ => or_null(row.get::<_, Option<String>>(i), ColumnValue::Text),
        }
    }

    #[async_trait]
    impl TypedStore for Harness {
        type Store = PostgresStore;

        async fn open(&self, columns: &Columns) -> Result<PostgresStore> {
            PostgresStore::builder()
                .schema(&self.schema)
                .columns(columns.iter().cloned())
                .connect(&self.url)
                .await
        }

        async fn open_changing(&self, columns: &Columns) -> Result<PostgresStore> {
            PostgresStore::builder()
                .schema(&self.schema)
                .columns(columns.iter().cloned())
                .allow_column_changes(true)
                .connect(&self.url)
                .await
        }

        async fn typed_rows(&self, columns: &Columns) -> Vec<(String, Vec<ColumnValue>)> {
            let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            // numeric and jsonb as their text: numeric keeps the digits as
            // written, jsonb its normalized JSON.
            let select: String = columns
                .iter()
                .map(|c| match c.column_type() {
                    ColumnType::Numeric | ColumnType::Json => format!(", \"{}\"::text", c.name()),
                    _ => format!(", \"{}\"", c.name()),
                })
                .collect();
            let sql = format!(
                r#"SELECT key{select} FROM "{}"."{DEFAULT_TABLE}" ORDER BY key COLLATE "C""#,
                self.schema
            );
            client
                .query(&sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|row| {
                    let values = columns
                        .iter()
                        .enumerate()
                        .map(|(i, c)| typed(c.column_type(), row, i + 1))
                        .collect();
                    (row.get(0), values)
                })
                .collect()
        }
    }

    backfill_core::column_conformance_tests!(optional: harness());
}
