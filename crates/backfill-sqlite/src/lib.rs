//! A SQLite [`Store`] for backfill, on rusqlite with SQLite bundled.
//!
//! Each day's batch is one `BEGIN IMMEDIATE` transaction that applies every
//! record with SQLite's own conditional upsert,
//! `INSERT … ON CONFLICT(key) DO UPDATE … WHERE (incoming) > (stored)`, in
//! key order; identical and older records are not written at all. Files are
//! opened in WAL mode with `synchronous=NORMAL`. Blocking calls run on
//! tokio's blocking pool.
//!
//! Dates are stored as `YYYY-MM-DD` text and instants as
//! `YYYY-MM-DDTHH:MM:SS.ffffffZ` text, fixed width, so SQLite's byte order is
//! time order and the rows stay readable with any SQLite tool.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::{backfill, Record, Store};
//! use backfill_sqlite::SqliteStore;
//! use chrono::NaiveDate;
//!
//! async fn fetch(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
//!     let at = day.and_hms_opt(8, 30, 0).unwrap().and_utc();
//!     Ok(vec![Record::new(format!("invoice:{day}"), day, r#"{"paid":true}"#, at).unwrap()])
//! }
//!
//! // `SqliteStore::open("pipeline.db")` for a file.
//! let store = SqliteStore::builder_in_memory().table("invoices").open().await?;
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//! backfill(&store, &fetch, jan(1)..=jan(10)).await?;
//! let rerun = backfill(&store, &fetch, jan(1)..=jan(10)).await?;
//! assert_eq!(rerun.totals().written(), 0);
//! assert_eq!(store.rows().await?.len(), 10);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

use std::cmp::Ordering;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use backfill_core::adapter::check_identifier;
use backfill_core::{Batch, Counts, Error, Mode, Record, Result, Store};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use rusqlite::types::Value;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

const BACKEND: &str = "sqlite";
/// How `event_date` is stored: `YYYY-MM-DD` text (a chrono format string).
pub const DATE_FORMAT: &str = "%Y-%m-%d";
/// How `updated_at` is stored: `YYYY-MM-DDTHH:MM:SS.ffffffZ` text, fixed
/// width, so byte order is time order (a chrono format string).
pub const INSTANT_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// The default table name.
pub const DEFAULT_TABLE: &str = "backfill_records";

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
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.inner.location)
            .field("table", &self.inner.table)
            .finish()
    }
}

/// Options for opening a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    path: Option<PathBuf>,
    table: String,
    busy_timeout: Duration,
}

impl SqliteStoreBuilder {
    /// The table to keep records in (default [`DEFAULT_TABLE`]); must match
    /// `[A-Za-z_][A-Za-z0-9_]*`. Created on open if missing.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// How long a write waits for another connection's lock before failing
    /// with a retryable error (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Opens (creating if needed) the database and the table.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad table name, before touching the file;
    /// [`Error::Open`] if the file cannot be opened or is not a database.
    pub async fn open(self) -> Result<SqliteStore> {
        check_identifier("table", &self.table)?;
        let location = match &self.path {
            Some(path) => path.display().to_string(),
            None => ":memory:".to_owned(),
        };
        let table = self.table.clone();
        let conn = spawn_blocking(move || self.connect()).await??;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                sql: Statements::new(&table),
                table,
                location,
            }),
        })
    }

    fn connect(&self) -> Result<Connection> {
        let open_error = |e: rusqlite::Error| Error::open(BACKEND, e);
        let conn = match &self.path {
            Some(path) => Connection::open(path),
            None => Connection::open_in_memory(),
        }
        .map_err(open_error)?;
        conn.busy_timeout(self.busy_timeout).map_err(open_error)?;
        rusqlite::vtab::array::load_module(&conn).map_err(open_error)?;
        if self.path.is_some() {
            // The first statement to read the file: a file that is not a
            // database fails here, before anything is written.
            let mode: String = conn
                .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
                .map_err(open_error)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::open(
                    BACKEND,
                    format!("could not switch to WAL mode (journal_mode is {mode})"),
                ));
            }
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(open_error)?;
        }
        conn.execute_batch(&Statements::create(&self.table))
            .map_err(open_error)?;
        Ok(conn)
    }
}

impl SqliteStore {
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

    /// Options for a store on the database file at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: Some(path.as_ref().to_owned()),
            ..Self::builder_in_memory()
        }
    }

    /// Options for a store on a private in-memory database.
    pub fn builder_in_memory() -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: None,
            table: DEFAULT_TABLE.to_owned(),
            busy_timeout: Duration::from_secs(5),
        }
    }

    /// The table this store keeps its records in.
    pub fn table(&self) -> &str {
        &self.inner.table
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
        // The batch's keys travel as an array bound to one parameter
        // (SQLite's carray), so replacing a day writes nothing but the
        // deletions themselves.
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

/// The SQL of one table, built once from the validated name.
#[derive(Debug)]
struct Statements {
    get: String,
    get_version: String,
    all: String,
    day: String,
    upsert: String,
    delete_missing: String,
}

impl Statements {
    fn create(table: &str) -> String {
        // STRICT typing and CHECKs repeat the record rules in the table
        // itself, so no writer (ours or anyone's) can store a row that the
        // other stores would refuse. Text is compared BINARY: by bytes, like
        // Rust's `str` and Postgres' `COLLATE "C"`.
        format!(
            r#"
CREATE TABLE IF NOT EXISTS "{table}" (
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
CREATE INDEX IF NOT EXISTS "{table}_event_date" ON "{table}" (event_date);
"#
        )
    }

    fn new(table: &str) -> Self {
        let cols = "key, event_date, value, updated_at";
        Self {
            get: format!(r#"SELECT {cols} FROM "{table}" WHERE key = ?1"#),
            get_version: format!(
                r#"SELECT updated_at, value, event_date FROM "{table}" WHERE key = ?1"#
            ),
            all: format!(r#"SELECT {cols} FROM "{table}" ORDER BY key"#),
            day: format!(r#"SELECT {cols} FROM "{table}" WHERE event_date = ?1 ORDER BY key"#),
            // The one conditional write: a stored row is overwritten only
            // when the incoming (updated_at, value, event_date) is greater.
            upsert: format!(
                r#"INSERT INTO "{table}" ({cols}) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (key) DO UPDATE SET
    event_date = excluded.event_date,
    value = excluded.value,
    updated_at = excluded.updated_at
WHERE (excluded.updated_at, excluded.value, excluded.event_date)
    > ("{table}".updated_at, "{table}".value, "{table}".event_date)"#
            ),
            delete_missing: format!(
                r#"DELETE FROM "{table}" WHERE event_date = ?1 AND key NOT IN rarray(?2)"#
            ),
        }
    }
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

fn backend(e: rusqlite::Error) -> Error {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    );
    Error::backend(BACKEND, retryable, e)
}

async fn spawn_blocking<T, F>(f: F) -> Result<T>
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
