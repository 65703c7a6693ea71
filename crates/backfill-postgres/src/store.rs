//! [`PostgresStore`] and its [`Store`] implementation: the one write path.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use backfill_core::{Batch, Counts, Error, Field, Mode, Problem, Record, Result, Store};
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::Pool;
use tokio_postgres::Row;

use crate::builder::PostgresStoreBuilder;
use crate::error::{pg_error, pool_error};
use crate::sql::Statements;
use crate::{BACKEND, MAX_VALUE_BYTES};

/// A [`Store`] in one Postgres table.
///
/// Cheap to clone: clones share the pool. Its `Debug` output names the
/// schema and table, never a connection string or password.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Pool,
    pub(crate) sql: Arc<Statements>,
    pub(crate) chunk_rows: usize,
    pub(crate) chunk_bytes: usize,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.sql.schema)
            .field("table", &self.sql.table)
            .field("chunk_rows", &self.chunk_rows)
            .field("chunk_bytes", &self.chunk_bytes)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects with a connection string, using the default schema and
    /// table. See [`PostgresStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder().connect(url).await
    }

    /// Options: schema, table, chunk sizes, pool, TLS, whether to create
    /// what is missing.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder::default()
    }

    /// The schema of this store's table.
    pub fn schema(&self) -> &str {
        &self.sql.schema
    }

    /// This store's table.
    pub fn table(&self) -> &str {
        &self.sql.table
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_error)
    }

    async fn read(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Record>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await.map_err(pg_error)?;
        let rows = client.query(&stmt, params).await.map_err(pg_error)?;
        rows.iter().map(into_record).collect()
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        Ok(self.read(&self.sql.get, &[&key]).await?.pop())
    }

    async fn rows(&self) -> Result<Vec<Record>> {
        self.read(&self.sql.all, &[]).await
    }

    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        self.read(&self.sql.day, &[&day]).await
    }

    async fn apply(&self, batch: &Batch) -> Result<Counts> {
        // Before a connection is even taken: nothing of the batch is sent.
        check_value_sizes(batch.records())?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let merge = tx.prepare_cached(&self.sql.merge).await.map_err(pg_error)?;
        let mut counts = Counts::default();
        // Chunks follow the batch's key order, so locks are taken in key
        // order across the whole transaction.
        for chunk in Chunks::new(batch.records(), self.chunk_rows, self.chunk_bytes) {
            let keys: Vec<&str> = chunk.iter().map(Record::key).collect();
            let dates: Vec<NaiveDate> = chunk.iter().map(Record::event_date).collect();
            let values: Vec<&str> = chunk.iter().map(Record::value).collect();
            let instants: Vec<DateTime<Utc>> = chunk.iter().map(Record::updated_at).collect();
            let row = tx
                .query_one(&merge, &[&keys, &dates, &values, &instants])
                .await
                .map_err(pg_error)?;
            let inserted: i64 = row.get("inserted");
            let updated: i64 = row.get("updated");
            let unchanged: i64 = row.get("unchanged");
            let stale: i64 = row.get("stale");
            let raced: Option<Vec<String>> = row.get("raced");
            counts.inserted += inserted as u64;
            counts.updated += updated as u64;
            counts.unchanged += unchanged as u64;
            counts.stale += stale as u64;
            if let Some(raced) = raced.filter(|keys| !keys.is_empty()) {
                // Rows our snapshot saw as absent or older, but that another
                // writer committed first with a version at least as new: the
                // upsert's WHERE left them alone. Classify them against what
                // is stored now, for the counts only.
                let stored = tx
                    .query(&self.sql.versions, &[&raced])
                    .await
                    .map_err(pg_error)?;
                for row in &stored {
                    let stored = into_record(row)?;
                    let incoming = chunk
                        .binary_search_by(|r| r.key().cmp(stored.key()))
                        .map(|i| &chunk[i])
                        .map_err(|_| Error::backend(BACKEND, false, "raced key not in batch"))?;
                    if incoming == &stored {
                        counts.unchanged += 1;
                    } else {
                        counts.stale += 1;
                    }
                }
            }
        }
        if batch.mode() == Mode::Replace {
            let keys: Vec<&str> = batch.records().iter().map(Record::key).collect();
            let deleted = tx
                .execute(&self.sql.delete_missing, &[&batch.day(), &keys])
                .await
                .map_err(pg_error)?;
            counts.deleted = deleted;
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(counts)
    }
}

/// Refuses the first record whose value could never travel in one protocol
/// message (see [`MAX_VALUE_BYTES`]).
fn check_value_sizes(records: &[Record]) -> Result<()> {
    match records.iter().find(|r| r.value().len() > MAX_VALUE_BYTES) {
        Some(record) => Err(Error::InvalidRecord {
            key: record.key().to_owned(),
            field: Field::Value,
            problem: Problem::TooLong {
                len: record.value().len(),
                max: MAX_VALUE_BYTES,
            },
        }),
        None => Ok(()),
    }
}

/// What a record costs in a statement beyond its key and value: array
/// element lengths, the date and the instant (28 bytes), rounded up.
const ROW_OVERHEAD: usize = 64;

/// Consecutive slices of records, each at most `rows` records and `bytes`
/// bytes (key, value and [`ROW_OVERHEAD`] per record), and never empty: a
/// record larger than `bytes` travels alone.
#[derive(Debug)]
struct Chunks<'a> {
    rest: &'a [Record],
    rows: usize,
    bytes: usize,
}

impl<'a> Chunks<'a> {
    fn new(records: &'a [Record], rows: usize, bytes: usize) -> Self {
        Self {
            rest: records,
            rows: rows.max(1),
            bytes,
        }
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = &'a [Record];

    fn next(&mut self) -> Option<&'a [Record]> {
        if self.rest.is_empty() {
            return None;
        }
        let mut size = 0;
        let mut len = 0;
        for record in self.rest.iter().take(self.rows) {
            size += record.key().len() + record.value().len() + ROW_OVERHEAD;
            if len > 0 && size > self.bytes {
                break;
            }
            len += 1;
        }
        let (chunk, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(chunk)
    }
}

fn into_record(row: &Row) -> Result<Record> {
    let key: String = row.try_get(0).map_err(pg_error)?;
    let event_date: NaiveDate = row.try_get(1).map_err(pg_error)?;
    let value: String = row.try_get(2).map_err(pg_error)?;
    let updated_at: DateTime<Utc> = row.try_get(3).map_err(pg_error)?;
    Record::new(key, event_date, value, updated_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn records(sizes: &[usize]) -> Vec<Record> {
        let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        sizes
            .iter()
            .enumerate()
            .map(|(i, n)| Record::new(format!("{i:04}"), day, "v".repeat(*n), at).unwrap())
            .collect()
    }

    fn lengths(records: &[Record], rows: usize, bytes: usize) -> Vec<usize> {
        Chunks::new(records, rows, bytes)
            .map(<[Record]>::len)
            .collect()
    }

    /// One record's cost with a 4-byte key and an `n`-byte value.
    fn cost(n: usize) -> usize {
        4 + n + ROW_OVERHEAD
    }

    #[test]
    fn chunks_are_bounded_by_rows() {
        let r = records(&[1; 7]);
        assert_eq!(lengths(&r, 3, usize::MAX), [3, 3, 1]);
        assert_eq!(lengths(&r, 7, usize::MAX), [7]);
        assert_eq!(lengths(&r, 0, usize::MAX), [1; 7]);
        assert!(lengths(&[], 3, 100).is_empty());
    }

    #[test]
    fn chunks_are_bounded_by_bytes() {
        let r = records(&[100, 100, 100, 100, 100]);
        assert_eq!(lengths(&r, 100, 2 * cost(100)), [2, 2, 1]);
        assert_eq!(lengths(&r, 100, 2 * cost(100) - 1), [1, 1, 1, 1, 1]);
        assert_eq!(lengths(&r, 2, 10 * cost(100)), [2, 2, 1]);
    }

    #[test]
    fn a_record_larger_than_a_chunk_travels_alone() {
        let r = records(&[10, 1_000, 10, 10]);
        assert_eq!(lengths(&r, 100, 2 * cost(10)), [1, 1, 2]);
        let chunks: Vec<_> = Chunks::new(&r, 100, 1).collect();
        assert_eq!(chunks.concat(), r, "every record, in order, once");
    }
}
