//! Opening a database: the connection, its settings, and the table, created
//! only when missing and checked when it exists.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use backfill_core::adapter::check_identifier;
use backfill_core::columns::{Column, Columns};
use backfill_core::{Error, Result};
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};

use crate::error::open as open_error;
use crate::store::{spawn_blocking, Opened, SqliteStore};
use crate::write::PageSize;
use crate::{migrate, schema, sql, DEFAULT_TABLE};

/// Options for opening a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    path: Option<PathBuf>,
    table: String,
    busy_timeout: Duration,
    read_only: bool,
    length_limit: Option<u32>,
    pages: PageSize,
    columns: Vec<Column>,
    column_changes: bool,
    history: bool,
}

/// `temp`'s page cache, as `PRAGMA cache_size` takes it: negative, in KiB.
const TEMP_CACHE_KIB: i64 = -(16 << 10);

/// The most records of a streamed day the store holds at a time, by
/// default: 10 000 (about 1 MiB of typical records; past a few thousand
/// rows a page's size no longer changes the write's speed).
pub const DEFAULT_PAGE_ROWS: usize = 10_000;

/// The most bytes of keys and values of a streamed day the store holds at
/// a time, by default: 16 MiB (a single larger record travels alone).
pub const DEFAULT_PAGE_BYTES: usize = 16 << 20;

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

    /// Options for a store on the database file at `path` (or a `file:` URI).
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(Some(path.as_ref().to_owned()))
    }

    /// Options for a store on a private in-memory database.
    pub fn builder_in_memory() -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(None)
    }
}

impl SqliteStoreBuilder {
    pub(crate) fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            table: DEFAULT_TABLE.to_owned(),
            busy_timeout: Duration::from_secs(5),
            read_only: false,
            length_limit: None,
            pages: PageSize::default(),
            columns: Vec::new(),
            column_changes: false,
            history: false,
        }
    }

    /// A typed column: a field of each record's JSON value that the table
    /// keeps as a column of its own, in SQLite's type for it (see the
    /// [crate docs](crate#typed-columns)). Repeat for each; the order is
    /// the table's. A record whose value does not fit a column is refused
    /// with [`Error::InvalidColumn`], and nothing of its day is written.
    pub fn column(mut self, column: Column) -> Self {
        self.columns.push(column);
        self
    }

    /// Every column of `columns`, as [`SqliteStoreBuilder::column`] each.
    pub fn columns(mut self, columns: impl IntoIterator<Item = Column>) -> Self {
        self.columns.extend(columns);
        self
    }

    /// Whether opening may drop and remake typed columns (default
    /// `false`). With it, a column of the table beyond the store's own
    /// that the declaration lacks is dropped, with its index, and a typed
    /// column declared with another type is dropped and added again,
    /// filled from the rows — in opening's one transaction, so a row that
    /// does not fit its new type refuses the open and leaves the table as
    /// it was. Without it, such a table is refused, naming the column. A
    /// dropped column's data is lost from the table only: it is still in
    /// each row's value, and declaring the column again fills it.
    pub fn allow_column_changes(mut self, allow: bool) -> Self {
        self.column_changes = allow;
        self
    }

    /// Whether the table keeps [history](backfill_core::history) (default
    /// `false`): every version of every key, valid from its `updated_at`,
    /// read with [`Store::history`](backfill_core::Store::history) and
    /// [`Store::as_of`](backfill_core::Store::as_of), and by people through
    /// the view `<table>_history` (see the [crate docs](crate#history)).
    ///
    /// Turned on for a table with rows, history starts from them: one
    /// version per key ([`SqliteStore::history_started_with`] says how
    /// many). Once on, it stays on: a store opened on the table without
    /// this keeps writing it, so that no writer leaves a hole. Turning it
    /// off is dropping the view `<table>_history` and the tables
    /// `"<table>:versions"` and `"<table>:listings"`.
    pub fn history(mut self, history: bool) -> Self {
        self.history = history;
        self
    }

    /// The table to keep records in (default [`DEFAULT_TABLE`]); must match
    /// `[a-z_][a-z0-9_]*` (see [`check_identifier`]) and may not be
    /// `backfill_tables`, `backfill_days`, `backfill_accepted` or
    /// `backfill_timings`, the store's [metadata tables](crate#the-metadata-tables). Created on open if
    /// missing; if it exists, it must be the table the store would create
    /// (see the [crate docs](crate#an-existing-table)), or one of an earlier
    /// schema version, which is [upgraded](crate#upgrading-from-versions-1-and-2).
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

    /// Opens the database read-only (default `false`): reads work, opening
    /// creates and changes nothing (a missing table is an error), and every
    /// write fails with a non-retryable error. A `file:…?mode=ro` path does
    /// the same.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Lowers SQLite's length limit (`SQLITE_LIMIT_LENGTH`) for this store's
    /// connection: the largest string or row it stores, in bytes (default
    /// and most 1 000 000 000). A record whose value would not fit is
    /// refused before anything is written (see
    /// [`SqliteStore::max_value_bytes`]).
    pub fn length_limit(mut self, bytes: u32) -> Self {
        self.length_limit = Some(bytes);
        self
    }

    /// The most records of a streamed day
    /// ([`upsert_stream`](backfill_core::upsert_stream)) the store reads
    /// and writes at a time (default [`DEFAULT_PAGE_ROWS`]; 0 counts as
    /// 1). The day is still one transaction whatever the page size, with
    /// the same result; only memory and the number of round trips between
    /// the caller's task and the blocking pool change. A page holds at most
    /// this many rows and about [`page_bytes`](Self::page_bytes) of keys
    /// and values, whichever comes first.
    pub fn page_rows(mut self, rows: usize) -> Self {
        self.pages.rows = rows.max(1);
        self
    }

    /// About the most bytes of keys and values of a streamed day the store
    /// reads and writes at a time (default [`DEFAULT_PAGE_BYTES`]); a single
    /// larger record travels alone. See [`page_rows`](Self::page_rows).
    pub fn page_bytes(mut self, bytes: usize) -> Self {
        self.pages.bytes = bytes;
        self
    }

    /// Opens (creating if needed) the database and the table.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad or reserved table name, before
    /// touching the file; [`Error::Open`] if the file cannot be opened or
    /// is not a database, if the table or a metadata table exists with
    /// another definition than the store's (the message names the table,
    /// the column and what differs), if the table has a schema version
    /// newer than this release's, or if, in a read-only database, the
    /// table is missing or needs an upgrade.
    pub async fn open(self) -> Result<SqliteStore> {
        check_identifier("table", &self.table)?;
        if sql::RESERVED.contains(&self.table.as_str()) {
            return Err(Error::InvalidName {
                what: "table",
                name: self.table,
            });
        }
        let location = match &self.path {
            Some(path) => path.display().to_string(),
            None => ":memory:".to_owned(),
        };
        let columns = Columns::new(self.columns.clone())?;
        let (table, pages) = (self.table.clone(), self.pages);
        let typed = columns.clone();
        let opened = spawn_blocking(move || self.connect(&typed)).await??;
        Ok(SqliteStore::new(opened, table, location, pages, columns))
    }

    fn connect(&self, typed: &Columns) -> Result<Opened> {
        // URIs (`file:…?mode=ro`) are understood either way.
        let flags = if self.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::default()
        };
        // Before the first file is opened: this copy of SQLite's locks made
        // safe from another copy in the process (`locks`).
        crate::locks::install();
        let conn = match &self.path {
            Some(path) => Connection::open_with_flags(path, flags),
            None => Connection::open_in_memory_with_flags(flags),
        }
        .map_err(open_error)?;
        conn.busy_timeout(self.busy_timeout).map_err(open_error)?;
        if let Some(bytes) = self.length_limit {
            let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
            conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, bytes)
                .map_err(open_error)?;
        }
        let length_limit = conn.limit(Limit::SQLITE_LIMIT_LENGTH).map_err(open_error)?;
        let read_only = conn.is_readonly(rusqlite::MAIN_DB).map_err(open_error)?;

        // The first statement to read the file: a file that is not a
        // database fails here, before anything is written.
        schema::object_kind(&conn, &self.table).map_err(open_error)?;
        if self.path.is_some() && !read_only {
            // Only a writable database is switched, and only if it is not
            // in WAL mode already: switching writes the file header.
            let mode: String = conn
                .query_row("PRAGMA journal_mode", [], |row| row.get(0))
                .map_err(open_error)?;
            if !mode.eq_ignore_ascii_case("wal") {
                let mode: String = conn
                    .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
                    .map_err(open_error)?;
                if !mode.eq_ignore_ascii_case("wal") {
                    return Err(open_error(format!(
                        "could not switch to WAL mode (journal_mode is {mode})"
                    )));
                }
            }
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(open_error)?;
            crate::locks::keep_wal(&conn).map_err(open_error)?;
        }
        if !read_only {
            // A listing stages its keys in `temp` (`sql::LISTED`), a file
            // past this cache. SQLite (as bundled, with memory management)
            // keeps every connection's page caches in one LRU, and with
            // `temp`'s default 2 MiB the staging evicted the records
            // table's hot pages on every statement: a listing of a million
            // keys took 3× as long as the same merge. 16 MiB keeps both.
            conn.pragma_update(Some("temp"), "cache_size", TEMP_CACHE_KIB)
                .map_err(open_error)?;
        }

        // Create or upgrade only what is missing: a read-only database, or
        // one where everything is in place, runs no DDL and writes nothing.
        let history = migrate::prepare(
            &conn,
            &self.table,
            typed,
            read_only,
            self.column_changes,
            self.history,
        )?;
        let changes_at_open = conn.total_changes();
        Ok(Opened {
            conn,
            history,
            read_only,
            length_limit: usize::try_from(length_limit).unwrap_or(0),
            changes_at_open,
        })
    }
}
