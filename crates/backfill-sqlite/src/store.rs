//! [`SqliteStore`] and its [`Store`] impl; [`apply_batch`] is the one write.

use std::cmp::Ordering;
use std::fmt;
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use backfill_core::{
    Batch, Counts, Error, Field, Mode, Problem, Record, Result, Store, MAX_KEY_BYTES,
};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::builder::{Opened, SqliteStoreBuilder};
use crate::error::backend;
use crate::sql::Statements;
use crate::{BACKEND, DATE_FORMAT, INSTANT_FORMAT};

/// Room a row needs besides its value, within SQLite's length limit (which
/// bounds the whole row): the longest key, the date (10 bytes), the instant
/// (27 bytes) and the row's header (at most 21 bytes for four text fields),
/// rounded up.
const ROW_OVERHEAD: usize = MAX_KEY_BYTES + 10 + 27 + 32;

/// A [`Store`] in one table of a SQLite database.
///
/// Cheap to clone: clones share one connection. Several processes may open
/// the same file; writers queue on SQLite's lock for up to the busy timeout,
/// and a batch that still finds the database busy fails with a retryable
/// error.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    sql: Statements,
    table: String,
    location: String,
    read_only: bool,
    max_value_bytes: usize,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.inner.location)
            .field("table", &self.inner.table)
            .field("read_only", &self.inner.read_only)
            .finish()
    }
}

impl SqliteStore {
    pub(crate) fn new(opened: Opened, table: String, location: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                conn: Mutex::new(opened.conn),
                sql: Statements::new(&table),
                table,
                location,
                read_only: opened.read_only,
                max_value_bytes: opened.length_limit.saturating_sub(ROW_OVERHEAD),
            }),
        }
    }

    /// Opens (creating if needed) the database file at `path` with the
    /// default table.
    ///
    /// # Errors
    ///
    /// See [`SqliteStoreBuilder::open`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::builder(path).open().await
    }

    /// Opens a private in-memory database with the default table.
    ///
    /// # Errors
    ///
    /// See [`SqliteStoreBuilder::open`].
    pub async fn open_in_memory() -> Result<Self> {
        Self::builder_in_memory().open().await
    }

    /// Options for a store on the database file at `path` (or a `file:` URI).
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(Some(path.as_ref().to_owned()))
    }

    /// Options for a store on a private in-memory database.
    pub fn builder_in_memory() -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(None)
    }

    /// The table this store keeps its records in.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// Whether the database was opened read-only (by
    /// [`SqliteStoreBuilder::read_only`] or a `mode=ro` URI): every write
    /// fails.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The longest value, in bytes, this store takes: SQLite's length limit
    /// on the connection, less room for the rest of the row. A record with
    /// a longer value is refused as
    /// [`Error::InvalidRecord`] with [`Problem::TooLong`], before anything
    /// of its batch is written.
    pub fn max_value_bytes(&self) -> usize {
        self.inner.max_value_bytes
    }

    /// Rows inserted, updated or deleted through this store's connection
    /// since it was opened (SQLite's `total_changes()`). Identical and
    /// stale records do not count: a re-run leaves it unchanged.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] if the connection is unusable.
    pub async fn total_changes(&self) -> Result<u64> {
        self.with_conn(|conn, _| Ok(conn.total_changes())).await
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Statements) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        spawn_blocking(move || {
            // A panic while holding the lock happened outside a committed
            // transaction (rusqlite rolls back on drop), so the connection is
            // still sound.
            let mut conn = inner
                .conn
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut conn, &inner.sql)
        })
        .await?
    }

    /// What must hold before a batch reaches SQLite: checks that cost
    /// nothing here and would otherwise surface as SQLite's own opaque
    /// errors, or as a write to a read-only file.
    fn admit(&self, batch: &Batch) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::backend(
                BACKEND,
                false,
                format!(
                    "{} was opened read-only; the store never writes to it",
                    self.inner.location
                ),
            ));
        }
        let max = self.inner.max_value_bytes;
        match batch.records().iter().find(|r| r.value().len() > max) {
            Some(record) => Err(Error::InvalidRecord {
                key: record.key().to_owned(),
                field: Field::Value,
                problem: Problem::TooLong {
                    len: record.value().len(),
                    max,
                },
            }),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        let key = key.to_owned();
        self.with_conn(move |conn, sql| {
            let mut stmt = conn.prepare_cached(&sql.get).map_err(backend)?;
            let row = stmt
                .query_row([key], read_row)
                .optional()
                .map_err(backend)?;
            row.map(into_record).transpose()
        })
        .await
    }

    async fn rows(&self) -> Result<Vec<Record>> {
        self.with_conn(|conn, sql| query_rows(conn, &sql.all, []))
            .await
    }

    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        self.with_conn(move |conn, sql| query_rows(conn, &sql.day, [format_date(day)]))
            .await
    }

    async fn apply(&self, batch: &Batch) -> Result<Counts> {
        self.admit(batch)?;
        // A cheap clone (the records are shared) for the blocking pool; they
        // are already validated, collapsed and sorted by key.
        let batch = batch.clone();
        self.with_conn(move |conn, sql| apply_batch(conn, sql, &batch))
            .await
    }
}

/// The write: one IMMEDIATE transaction (the write lock is taken up front,
/// so two writers never deadlock upgrading a read lock), rows in key order.
fn apply_batch(conn: &mut Connection, sql: &Statements, batch: &Batch) -> Result<Counts> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    let mut counts = Counts::default();
    {
        let mut stored = tx.prepare_cached(&sql.get_version).map_err(backend)?;
        let mut upsert = tx.prepare_cached(&sql.upsert).map_err(backend)?;
        for record in batch.records() {
            let date = format_date(record.event_date());
            let instant = format_instant(record.updated_at());
            // Read only to *count* what the upsert is about to do; whether
            // it writes is decided by the upsert's own WHERE clause, and the
            // two are cross-checked below.
            let before: Option<(String, String, String)> = stored
                .query_row([record.key()], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()
                .map_err(backend)?;
            let written = upsert
                .execute(params![record.key(), date, record.value(), instant])
                .map_err(backend)?;
            let expect_write = match &before {
                None => {
                    counts.inserted += 1;
                    true
                }
                Some((s_instant, s_value, s_date)) => {
                    let incoming = (instant.as_str(), record.value(), date.as_str());
                    match incoming.cmp(&(s_instant.as_str(), s_value.as_str(), s_date.as_str())) {
                        Ordering::Greater => {
                            counts.updated += 1;
                            true
                        }
                        Ordering::Equal => {
                            counts.unchanged += 1;
                            false
                        }
                        Ordering::Less => {
                            counts.stale += 1;
                            false
                        }
                    }
                }
            };
            if expect_write != (written == 1) {
                return Err(Error::backend(
                    BACKEND,
                    false,
                    format!(
                        "version order disagreement on key {:?}: SQLite wrote {written} rows; \
                         is the table's collation BINARY?",
                        record.key()
                    ),
                ));
            }
        }
    }
    if batch.mode() == Mode::Replace {
        // Replacing a day writes nothing but the deletions themselves.
        let keys: Vec<Value> = batch
            .records()
            .iter()
            .map(|r| Value::Text(r.key().to_owned()))
            .collect();
        counts.deleted = tx
            .prepare_cached(&sql.delete_missing)
            .and_then(|mut stmt| stmt.execute(params![format_date(batch.day()), Rc::new(keys)]))
            .map_err(backend)? as u64;
    }
    tx.commit().map_err(backend)?;
    Ok(counts)
}

type RawRow = (String, String, String, String);

fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

fn query_rows<P: rusqlite::Params>(conn: &Connection, sql: &str, params: P) -> Result<Vec<Record>> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let rows = stmt.query_map(params, read_row).map_err(backend)?;
    rows.map(|row| into_record(row.map_err(backend)?)).collect()
}

fn into_record((key, date, value, instant): RawRow) -> Result<Record> {
    let corrupt = |what: &str| {
        Error::backend(
            BACKEND,
            false,
            format!("row {key:?} holds an unreadable {what}"),
        )
    };
    let event_date =
        NaiveDate::parse_from_str(&date, DATE_FORMAT).map_err(|_| corrupt("event_date"))?;
    let updated_at = NaiveDateTime::parse_from_str(&instant, INSTANT_FORMAT)
        .map_err(|_| corrupt("updated_at"))?
        .and_utc();
    Record::new(key, event_date, value, updated_at)
}

fn format_date(day: NaiveDate) -> String {
    day.format(DATE_FORMAT).to_string()
}

fn format_instant(at: DateTime<Utc>) -> String {
    at.format(INSTANT_FORMAT).to_string()
}

/// Runs blocking SQLite work on tokio's blocking pool; a panic in it is
/// resumed here.
pub(crate) async fn spawn_blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic())
        }
        Error::backend(BACKEND, true, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_sort_like_time() {
        let early = NaiveDate::from_ymd_opt(999, 12, 31).unwrap();
        let late = NaiveDate::from_ymd_opt(1000, 1, 1).unwrap();
        assert_eq!(format_date(early), "0999-12-31");
        assert!(format_date(early) < format_date(late));
        let a = early
            .and_hms_micro_opt(23, 59, 59, 999_999)
            .unwrap()
            .and_utc();
        let b = late.and_hms_opt(0, 0, 0).unwrap().and_utc();
        assert_eq!(format_instant(a), "0999-12-31T23:59:59.999999Z");
        assert_eq!(format_instant(b).len(), 27);
        assert!(format_instant(a) < format_instant(b));
    }
}
