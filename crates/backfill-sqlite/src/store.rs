//! [`SqliteStore`] and its [`Store`] impl; the one write is
//! [`apply_day`](crate::write::apply_day).

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use backfill_core::columns::Columns;
use backfill_core::{
    Counts, DayFailure, DayWrite, Digest, Error, HistoryRow, LedgerEntry, Record, Result, RunId,
    Store, SyncedDay, Timing, MAX_KEY_BYTES,
};
use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tokio::task::JoinHandle;

use crate::error::backend;
use crate::sql::{self, Statements};
use crate::typed::{format_date, format_instant, into_record, parse_instant, query_rows, read_row};
use crate::write::{apply_day, next_page, PageSize, Writer};
use crate::{BACKEND, DATE_FORMAT};

/// Room a row needs besides its value, within SQLite's length limit (which
/// bounds the whole row): the longest key, the date (10 bytes), the instant
/// (27 bytes), `deleted` (0 or 1, held in the header) and the row's header
/// (at most 23 bytes for four text fields and an integer), rounded up.
const ROW_OVERHEAD: usize = MAX_KEY_BYTES + 10 + 27 + 32;

/// Tells a write on the blocking pool, when dropped, that its caller
/// stopped waiting.
#[derive(Debug, Default)]
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

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
    changes_at_open: u64,
    /// Rows a listing staged in `temp` and cleared again: counted by
    /// SQLite's `total_changes()`, but no row of the store's.
    staged: AtomicU64,
    pages: PageSize,
    columns: Columns,
    history_started_with: Option<u64>,
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

/// What opening learned about the connection, for the store.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) conn: Connection,
    pub(crate) read_only: bool,
    /// SQLite's `SQLITE_LIMIT_LENGTH` on this connection: the largest string
    /// or row it stores.
    pub(crate) length_limit: usize,
    /// `total_changes()` when opening was done: the rows opening itself
    /// wrote (a version row), not counted as the store's.
    pub(crate) changes_at_open: u64,
    /// Whether the table keeps history, and whether opening turned it on.
    pub(crate) history: crate::history::HistoryOpened,
}

impl SqliteStore {
    pub(crate) fn new(
        opened: Opened,
        table: String,
        location: String,
        pages: PageSize,
        columns: Columns,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                conn: Mutex::new(opened.conn),
                sql: Statements::new(&table, &columns, opened.history.on),
                history_started_with: opened.history.started_with,
                table,
                location,
                read_only: opened.read_only,
                max_value_bytes: opened.length_limit.saturating_sub(ROW_OVERHEAD),
                changes_at_open: opened.changes_at_open,
                staged: AtomicU64::new(0),
                pages,
                columns,
            }),
        }
    }

    /// The store's typed columns, in the table's order.
    pub fn columns(&self) -> &Columns {
        &self.inner.columns
    }

    /// Whether the table keeps [history](backfill_core::history)
    /// ([`SqliteStoreBuilder::history`](crate::SqliteStoreBuilder::history)).
    pub fn keeps_history(&self) -> bool {
        self.inner.sql.history.is_some()
    }

    /// When opening turned history on for the table: how many rows it
    /// held, each now a version in history. `None` when history was on
    /// already, or is off.
    pub fn history_started_with(&self) -> Option<u64> {
        self.inner.history_started_with
    }

    /// The table this store keeps its records in.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// Whether the database was opened read-only (by
    /// [`SqliteStoreBuilder::read_only`](crate::SqliteStoreBuilder::read_only) or a `mode=ro` URI): every write
    /// fails.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The longest value, in bytes, this store takes: SQLite's length limit
    /// on the connection, less room for the rest of the row. A record with
    /// a longer value is refused as [`Error::InvalidRecord`] with
    /// [`Problem::TooLong`](backfill_core::Problem::TooLong), before any
    /// of its page is written, and nothing of its day is (a batch is one
    /// page; a streamed day's earlier pages roll back with it).
    pub fn max_value_bytes(&self) -> usize {
        self.inner.max_value_bytes
    }

    /// Rows inserted, updated or deleted through this store's connection
    /// since it was opened (SQLite's `total_changes()`, less what opening
    /// itself wrote and the keys a listing stages in a temporary table),
    /// in the records table and in the metadata tables alike. Identical
    /// and stale records, and the rows a listing leaves as they are, do
    /// not count; every applied batch counts exactly one more, its day's
    /// ledger row (its watermark raise included), and every recorded
    /// failure one. A re-run of a day adds exactly 1.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] if the connection is unusable.
    pub async fn total_changes(&self) -> Result<u64> {
        let inner = Arc::clone(&self.inner);
        self.with_conn(move |conn, _| {
            // Read under the connection's lock: no apply is staging now.
            let not_ours = inner.changes_at_open + inner.staged.load(Ordering::Relaxed);
            Ok(conn.total_changes().saturating_sub(not_ours))
        })
        .await
    }

    /// Waits, up to the [busy timeout](crate::SqliteStoreBuilder::busy_timeout),
    /// for SQLite's write lock, and gives it back at once: whether a day
    /// could be written now. Another process holding the lock past the
    /// timeout (a `BEGIN IMMEDIATE`, an `EXCLUSIVE` transaction) is a
    /// retryable [`Error::Backend`] (busy); nothing is written either way.
    /// The command line checks this before it fetches anything.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`]: busy or locked (retryable), read-only, or an
    /// unusable connection.
    pub async fn check_write_lock(&self) -> Result<()> {
        self.with_conn(|conn, _| {
            conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK")
                .map_err(crate::error::backend)
        })
        .await
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Statements) -> Result<T> + Send + 'static,
    {
        joined(self.spawn_with_conn(f)).await?
    }

    /// Starts `f` with the connection on the blocking pool at once, for
    /// [`joined`] to await.
    fn spawn_with_conn<T, F>(&self, f: F) -> JoinHandle<Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Statements) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock happened outside a committed
            // transaction (rusqlite rolls back on drop), so the connection is
            // still sound.
            let mut conn = inner
                .conn
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut conn, &inner.sql)
        })
    }

    /// A non-retryable error if the store was opened read-only.
    fn writable(&self) -> Result<()> {
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
        Ok(())
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

    async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
        self.with_conn(|conn, sql| query_rows(conn, &sql.all_with_tombstones, []))
            .await
    }

    /// On the blocking pool, with the day moved there: one transaction,
    /// one page in memory at a time (see the
    /// [crate docs](crate#streamed-days)). If this call's future is
    /// dropped, the write rolls back at its next page or before it commits.
    async fn apply(&self, mut day: DayWrite) -> Result<Counts> {
        self.writable()?;
        let abandoned = Abandoned::default();
        let flag = Arc::clone(&abandoned.0);
        let inner = Arc::clone(&self.inner);
        let write = tokio::task::spawn_blocking(move || {
            let writer = Writer {
                sql: &inner.sql,
                max_value_bytes: inner.max_value_bytes,
                page: inner.pages,
                staged: &inner.staged,
                abandoned: &flag,
                columns: &inner.columns,
            };
            // The first page (a batch's only one) is checked and its typed
            // columns read before the connection is locked, while another
            // day's write may hold it.
            let first = next_page(&writer, &mut day)?;
            // As in `spawn_with_conn`: a panic under the lock left no
            // transaction committed, so the connection is still sound.
            let mut conn = inner
                .conn
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            apply_day(&mut conn, &writer, &mut day, first)
        });
        let counts = joined(write).await?;
        drop(abandoned); // After the write: it has nothing to stop then.
        counts
    }

    async fn history(&self) -> Result<Vec<HistoryRow>> {
        self.with_conn(|conn, sql| {
            let history = sql.history.as_ref().ok_or(Error::HistoryOff)?;
            let mut stmt = conn.prepare_cached(&history.all).map_err(backend)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok((read_row(row)?, row.get::<_, Option<String>>(5)?))
                })
                .map_err(backend)?;
            rows.map(|row| {
                let (raw, valid_to) = row.map_err(backend)?;
                let valid_to = match valid_to {
                    Some(text) => Some(parse_instant(&text).ok_or_else(|| {
                        Error::backend(
                            BACKEND,
                            false,
                            format!("history holds an unreadable valid_to {text:?}"),
                        )
                    })?),
                    None => None,
                };
                Ok(HistoryRow {
                    record: into_record(raw)?,
                    valid_to,
                })
            })
            .collect()
        })
        .await
    }

    async fn as_of(&self, at: DateTime<Utc>) -> Result<Vec<Record>> {
        self.with_conn(move |conn, sql| {
            let history = sql.history.as_ref().ok_or(Error::HistoryOff)?;
            query_rows(conn, &history.as_of, [format_instant(at)])
        })
        .await
    }

    async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
        let (first, last) = (format_date(*days.start()), format_date(*days.end()));
        self.with_conn(move |conn, sql| {
            // One read transaction: the days and their acceptances as of
            // one instant.
            let tx = conn.transaction().map_err(backend)?;
            let mut entries: Vec<LedgerEntry> = {
                let mut stmt = tx.prepare_cached(&sql.ledger_read).map_err(backend)?;
                let rows = stmt
                    .query_map([&first, &last], LedgerRow::read)
                    .map_err(backend)?;
                rows.map(|row| row.map_err(backend)?.into_entry())
                    .collect::<Result<_>>()?
            };
            let kept = |table: &str| -> Result<bool> {
                tx.query_row(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1)",
                    [table],
                    |row| row.get(0),
                )
                .map_err(backend)
            };
            if kept(sql::TIMINGS)? {
                let mut stmt = tx.prepare_cached(&sql.timings_read).map_err(backend)?;
                let rows = stmt
                    .query_map([&first, &last], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, i64>(1)?,
                            row.get::<_, i64>(2)?,
                        ))
                    })
                    .map_err(backend)?;
                for row in rows {
                    let (day, fetch, write) = row.map_err(backend)?;
                    let Ok(day) = NaiveDate::parse_from_str(&day, DATE_FORMAT) else {
                        continue;
                    };
                    // The join found the day's ledger row: it is an entry.
                    if let Ok(i) = entries.binary_search_by_key(&day, |e| e.day) {
                        if let Some(synced) = &mut entries[i].synced {
                            synced.timing = Timing::from_millis(fetch, write);
                        }
                    }
                }
            }
            if kept(sql::ACCEPTED)? {
                let mut stmt = tx.prepare_cached(&sql.accepted_read).map_err(backend)?;
                let rows = stmt
                    .query_map([&first, &last], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                    })
                    .map_err(backend)?;
                for row in rows {
                    let (day, at) = row.map_err(backend)?;
                    let unreadable = || {
                        Error::backend(
                            BACKEND,
                            false,
                            format!("{} holds an unreadable acceptance of {day:?}", sql::ACCEPTED),
                        )
                    };
                    let day = NaiveDate::parse_from_str(&day, DATE_FORMAT)
                        .map_err(|_| unreadable())?;
                    let at = parse_instant(&at).ok_or_else(unreadable)?;
                    backfill_core::merge_acceptance(&mut entries, day, at);
                }
            }
            Ok(entries)
        })
        .await
    }

    async fn accept(&self, day: NaiveDate, at: Option<DateTime<Utc>>) -> Result<()> {
        self.writable()?;
        self.with_conn(move |conn, sql| {
            match at {
                Some(at) => {
                    conn.execute(&sql::create_accepted(), []).map_err(backend)?;
                    conn.prepare_cached(&sql.accept)
                        .and_then(|mut stmt| {
                            stmt.execute(params![format_date(day), format_instant(at)])
                        })
                        .map_err(backend)?;
                }
                None => match conn.prepare_cached(&sql.unaccept) {
                    Ok(mut stmt) => {
                        stmt.execute([format_date(day)]).map_err(backend)?;
                    }
                    // Never accepted anything: nothing to take back.
                    Err(e) if e.to_string().contains("no such table") => {}
                    Err(e) => return Err(backend(e)),
                },
            }
            Ok(())
        })
        .await
    }

    async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
        self.writable()?;
        let failure = failure.clone();
        self.with_conn(move |conn, sql| {
            // One statement, so one transaction of its own.
            conn.prepare_cached(&sql.failed)
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        format_date(day),
                        format_instant(failure.at),
                        failure.run_id.as_ref().map(RunId::as_str),
                        failure.attempts,
                        failure.error,
                    ])
                })
                .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
        self.writable()?;
        self.with_conn(move |conn, sql| {
            // One IMMEDIATE transaction: the touched days' digests and the
            // rows go together. SQLite has one writer at a time, so it
            // cannot deadlock with a day's write.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend)?;
            let before = format_instant(before);
            tx.prepare_cached(&sql.purge_digests)
                .and_then(|mut stmt| stmt.execute([&before]))
                .map_err(backend)?;
            let purged = tx
                .prepare_cached(&sql.purge)
                .and_then(|mut stmt| stmt.execute([&before]))
                .map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(purged as u64)
        })
        .await
    }
}

/// One row of the days table, as stored.
struct LedgerRow {
    day: String,
    listing_watermark: Option<String>,
    synced_at: Option<String>,
    run_id: Option<String>,
    mode: Option<String>,
    as_of: Option<String>,
    digest: Option<String>,
    /// inserted, updated, unchanged, stale, deleted, unlisted, collapsed.
    counts: [Option<i64>; 7],
    failed_at: Option<String>,
    failed_run_id: Option<String>,
    attempts: Option<i64>,
    error: Option<String>,
}

impl LedgerRow {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            day: row.get(0)?,
            listing_watermark: row.get(1)?,
            synced_at: row.get(2)?,
            run_id: row.get(3)?,
            mode: row.get(4)?,
            as_of: row.get(5)?,
            digest: row.get(6)?,
            counts: [
                row.get(7)?,
                row.get(8)?,
                row.get(9)?,
                row.get(10)?,
                row.get(11)?,
                row.get(12)?,
                row.get(13)?,
            ],
            failed_at: row.get(14)?,
            failed_run_id: row.get(15)?,
            attempts: row.get(16)?,
            error: row.get(17)?,
        })
    }

    /// The entry, or an error naming what is unreadable: `synced` when
    /// `synced_at` is set (its columns must then be), `failure` when
    /// `failed_at` is.
    fn into_entry(self) -> Result<LedgerEntry> {
        let corrupt = |what: &str| {
            Error::backend(
                BACKEND,
                false,
                format!("the ledger row of day {} holds {what}", self.day),
            )
        };
        let instant = |text: &Option<String>, what: &str| -> Result<Option<DateTime<Utc>>> {
            text.as_deref()
                .map(|t| parse_instant(t).ok_or_else(|| corrupt(&format!("an unreadable {what}"))))
                .transpose()
        };
        let day = NaiveDate::parse_from_str(&self.day, DATE_FORMAT)
            .map_err(|_| corrupt("an unreadable day"))?;
        let mut entry = LedgerEntry::new(day);
        entry.listing_watermark = instant(&self.listing_watermark, "listing_watermark")?;
        if let Some(at) = instant(&self.synced_at, "synced_at")? {
            let mode = self
                .mode
                .as_deref()
                .and_then(|m| m.parse::<backfill_core::Mode>().ok())
                .ok_or_else(|| corrupt("a success without a readable mode"))?;
            let digest = self
                .digest
                .as_deref()
                .and_then(Digest::from_hex)
                .ok_or_else(|| corrupt("a success without a readable digest"))?;
            let mut n = [0u64; 7];
            for (n, stored) in n.iter_mut().zip(self.counts) {
                *n = stored
                    .and_then(|c| u64::try_from(c).ok())
                    .ok_or_else(|| corrupt("a success without its counts"))?;
            }
            let mut counts = Counts::default();
            [
                counts.inserted,
                counts.updated,
                counts.unchanged,
                counts.stale,
                counts.deleted,
                counts.unlisted,
                counts.collapsed,
            ] = n;
            let as_of = instant(&self.as_of, "as_of")?;
            let run_id = self.run_id.map(RunId::from);
            let synced = SyncedDay::new(at, run_id, mode, as_of, digest, counts);
            entry.synced = Some(synced);
        }
        if let Some(at) = instant(&self.failed_at, "failed_at")? {
            let attempts = self
                .attempts
                .and_then(|a| u32::try_from(a).ok())
                .ok_or_else(|| corrupt("a failure without its attempts"))?;
            let error = self
                .error
                .ok_or_else(|| corrupt("a failure without its error"))?;
            entry.failure = Some(DayFailure::new(
                at,
                self.failed_run_id.map(RunId::from),
                attempts,
                &error,
            ));
        }
        Ok(entry)
    }
}

/// Runs blocking SQLite work on tokio's blocking pool; a panic in it is
/// resumed here.
pub(crate) async fn spawn_blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    joined(tokio::task::spawn_blocking(f)).await
}

/// Waits for blocking work started on tokio's blocking pool; a panic in it
/// is resumed here.
pub(crate) async fn joined<T>(work: JoinHandle<T>) -> Result<T> {
    work.await.map_err(|e| {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic())
        }
        Error::backend(BACKEND, true, e)
    })
}
