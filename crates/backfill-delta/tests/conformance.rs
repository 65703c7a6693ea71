//! The shared conformance suite, every case, on a Delta table in a local
//! directory, and on one in S3-compatible object storage.

use backfill_delta::DeltaStore;

// Streamed days in pages of 3 records, 3 stored rows decided at a time:
// each streamed case's day goes through the pages a day too large for
// memory is read in (ranges split, unchanged ranges copied once one
// changes, listings across pages, keys moving between days); a day
// fetched whole is one page, decided in memory.
backfill_core::conformance_tests!(with_guard: async {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let location = dir.path().join("table");
    let store = DeltaStore::builder(location.to_str().unwrap())
        .page_rows(3)
        .open()
        .await
        .expect("opening the table");
    (store, dir)
});

/// Every history case on a local table keeping history; streamed days in
/// pages of 3 (a table keeping history decides a streamed day whole).
mod history {
    use backfill_delta::DeltaStore;

    backfill_core::history_conformance_tests!(with_guard: async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let location = dir.path().join("table");
        let store = DeltaStore::builder(location.to_str().unwrap())
            .history(true)
            .page_rows(3)
            .open()
            .await
            .expect("opening the table");
        (store, dir)
    });
}

/// The typed-column cases on a local table, its columns read back from
/// the table's Parquet files with the Parquet reader, as any engine reads
/// them.
mod typed_columns {
    use std::path::PathBuf;

    use async_trait::async_trait;
    use backfill_core::columns::{ColumnType, ColumnValue, Columns};
    use backfill_core::conformance::columns::TypedStore;
    use backfill_core::Result;
    use backfill_delta::DeltaStore;
    use chrono::{DateTime, NaiveDate};
    use deltalake::arrow::array::{
        Array, AsArray, BooleanArray, Date32Array, Float64Array, Int64Array,
        TimestampMicrosecondArray,
    };
    use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    struct Harness {
        _dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl Harness {
        async fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("table");
            Self { _dir: dir, path }
        }

        fn location(&self) -> &str {
            self.path.to_str().unwrap()
        }
    }

    /// Row `i` of a typed column's array, as the column's type.
    fn typed(ty: ColumnType, array: &dyn Array, i: usize) -> ColumnValue {
        if array.is_null(i) {
            return ColumnValue::Null;
        }
        let any = array.as_any();
        match ty {
            ColumnType::Text => ColumnValue::Text(array.as_string::<i32>().value(i).to_owned()),
            ColumnType::Numeric => {
                ColumnValue::Numeric(array.as_string::<i32>().value(i).to_owned())
            }
            ColumnType::Json => ColumnValue::Json(array.as_string::<i32>().value(i).to_owned()),
            ColumnType::Integer => {
                ColumnValue::Integer(any.downcast_ref::<Int64Array>().unwrap().value(i))
            }
            ColumnType::Double => {
                ColumnValue::Double(any.downcast_ref::<Float64Array>().unwrap().value(i))
            }
            ColumnType::Boolean => {
                ColumnValue::Boolean(any.downcast_ref::<BooleanArray>().unwrap().value(i))
            }
            ColumnType::Date => {
                let days = any.downcast_ref::<Date32Array>().unwrap().value(i);
                let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
                ColumnValue::Date(epoch + chrono::Duration::days(i64::from(days)))
            }
            ColumnType::Timestamp => {
                let micros = any
                    .downcast_ref::<TimestampMicrosecondArray>()
                    .unwrap()
                    .value(i);
                ColumnValue::Timestamp(DateTime::from_timestamp_micros(micros).unwrap())
            }
            other => panic!("a column of type {other}"),
        }
    }

    #[async_trait]
    impl TypedStore for Harness {
        type Store = DeltaStore;

        /// Streamed days in pages of 7: the streamed case's typed columns
        /// are written page by page.
        async fn open(&self, columns: &Columns) -> Result<DeltaStore> {
            DeltaStore::builder(self.location())
                .columns(columns.iter().cloned())
                .page_rows(7)
                .open()
                .await
        }

        async fn open_changing(&self, columns: &Columns) -> Result<DeltaStore> {
            DeltaStore::builder(self.location())
                .columns(columns.iter().cloned())
                .allow_column_changes(true)
                .open()
                .await
        }

        async fn typed_rows(&self, columns: &Columns) -> Vec<(String, Vec<ColumnValue>)> {
            let url = deltalake::ensure_table_uri(self.location()).unwrap();
            let table = deltalake::open_table(url).await.unwrap();
            let mut rows = Vec::new();
            for uri in table.get_file_uris().unwrap() {
                let path = match url::Url::parse(&uri) {
                    Ok(url) => url.to_file_path().unwrap(),
                    Err(_) => PathBuf::from(uri),
                };
                let file = std::fs::File::open(path).unwrap();
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .build()
                    .unwrap();
                for batch in reader {
                    let batch = batch.unwrap();
                    let keys = batch.column_by_name("key").unwrap().as_string::<i32>();
                    for i in 0..batch.num_rows() {
                        // The day's ledger row is not a record.
                        if keys.value(i).starts_with('\0') {
                            continue;
                        }
                        let values = columns
                            .iter()
                            .map(|c| {
                                let array = batch.column_by_name(c.name()).unwrap_or_else(|| {
                                    panic!("a data file without the column {:?}", c.name())
                                });
                                typed(c.column_type(), array, i)
                            })
                            .collect();
                        rows.push((keys.value(i).to_owned(), values));
                    }
                }
            }
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            rows
        }
    }

    backfill_core::column_conformance_tests!(Harness::new());
}

/// On `BACKFILL_S3_URL` (`s3://bucket`, with the AWS variables pointing at
/// its server: `scripts/s3-server.sh` starts a local one), a table under a
/// prefix of each test's own; spread over the buckets `bucket-0` … when
/// `BACKFILL_S3_SPREAD` says there are that many (a local server lists a
/// prefix by scanning its whole bucket); streamed days in pages of 3.
mod s3 {
    use super::*;
    use backfill_testkit as testkit;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The next of the spread buckets.
    static SPREAD: AtomicUsize = AtomicUsize::new(0);

    async fn store() -> Option<DeltaStore> {
        let bucket = testkit::s3_bucket()?;
        let spread: usize = std::env::var("BACKFILL_S3_SPREAD")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let bucket = match spread {
            0 => bucket,
            n => format!("{bucket}-{}", SPREAD.fetch_add(1, Ordering::Relaxed) % n),
        };
        let location = format!("{bucket}/{}", testkit::unique_schema());
        // Streamed days in pages of 3: each streamed case reads the day's
        // stored files a batch at a time through the S3 client.
        Some(
            DeltaStore::builder(location)
                .page_rows(3)
                .open()
                .await
                .expect("opening the table on S3"),
        )
    }

    backfill_core::conformance_tests!(optional: store());
}
