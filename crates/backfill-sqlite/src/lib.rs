//! A SQLite [`Store`](backfill_core::Store) for backfill, on rusqlite with
//! SQLite bundled.
//!
//! Each day's batch is one `BEGIN IMMEDIATE` transaction that applies every
//! record with SQLite's own conditional upsert,
//! `INSERT … ON CONFLICT(key) DO UPDATE … WHERE (incoming) > (stored)`, in
//! key order; identical and older records are not written at all. The
//! same transaction ends by writing the day's [ledger](#the-day-ledger)
//! row. Files are
//! opened in WAL mode with `synchronous=NORMAL`. Blocking calls run on
//! tokio's blocking pool.
//!
//! Dates are stored as `YYYY-MM-DD` text and instants as
//! `YYYY-MM-DDTHH:MM:SS.ffffffZ` text, fixed width, so SQLite's byte order is
//! time order and the rows stay readable with any SQLite tool.
//!
//! # Tombstones and listings
//!
//! A deleted key is kept as a **tombstone**: its row stays, with
//! `deleted = 1` and an empty `value`, and wins or loses by the version
//! order `(updated_at, deleted, value, event_date)` like any version, so a
//! stale re-delivery of the deleted row cannot bring it back.
//! [`get`](backfill_core::Store::get), [`rows`](backfill_core::Store::rows)
//! and [`day_rows`](backfill_core::Store::day_rows) return live rows only;
//! [`rows_with_tombstones`](backfill_core::Store::rows_with_tombstones)
//! returns them all. With plain SQL, read `WHERE deleted = 0`.
//!
//! A batch in [`Mode::Replace`](backfill_core::Mode::Replace) is a
//! **listing** of its day as of an instant: in the same transaction, the
//! day's live rows it lacks and that are not newer than that instant become
//! their own tombstones (one `UPDATE` over the day's rows, the listed keys
//! staged in a temporary table first, see [streamed days](#streamed-days)),
//! after the [`ReplaceGuard`](backfill_core::ReplaceGuard) has agreed to
//! that many; nothing is physically deleted. The day's **listing
//! watermark**, the latest such instant, is then raised (and not written at
//! all when it is already as high, so a re-applied listing writes nothing).
//! Every batch's upsert reads the watermark of each record's own day inside
//! SQLite: a live record that would be written and is not newer than it is
//! written as its own tombstone, since a listing at least that recent did
//! not contain it. `BEGIN IMMEDIATE` takes SQLite's one write lock first,
//! so no watermark moves while a batch reads it.
//!
//! # Streamed days
//!
//! A day fetched as a stream of chunks
//! ([`upsert_stream`](backfill_core::upsert_stream),
//! [`Fetched::stream`](backfill_core::Fetched::stream)) reaches the store as
//! a [`DayWrite`](backfill_core::DayWrite) whose records, validated,
//! collapsed and in key order, are read a page at a time from the job's
//! memory and temporary files. The store applies it
//! ([`apply`](backfill_core::Store::apply)) with the very write a batch
//! goes through (a batch is the one-page case), holding one page at a
//! time, so a day of millions of records takes memory for a page, not for
//! the day:
//!
//! - **One transaction** for the whole day, `BEGIN IMMEDIATE` as for a
//!   batch. The watermarks of all the day's `event_date`s (known before
//!   the first page) are read first; then each page is merged in key
//!   order exactly as a batch's records are. Keys are unique across the
//!   day's pages, so each page's counts are exact and the sum is the one
//!   batch's.
//! - **A listing** stages each page's keys in a table of the connection's
//!   `temp` schema (`temp."backfill:listed"`, a temporary file beyond
//!   SQLite's page cache, emptied after each listing). After the last
//!   page, one statement counts the day's live rows and those the whole
//!   listing lacks, the guard is asked with those totals, and one `UPDATE`
//!   turns the unlisted rows into tombstones, looking each of the day's
//!   rows up in the staged keys' primary key. A batch's listing is staged
//!   the same way.
//! - **The ledger row** is written last, in the same transaction, with the
//!   day's digest and counts; then the transaction commits. A value over
//!   the length limit in any page, an error reading a page, the guard's
//!   refusal, or a call dropped before the write commits rolls all of it
//!   back: nothing of the day is written.
//!
//! The SQLite work runs on tokio's blocking pool, the day moved there
//! whole: the write reads each page (from memory, or the job's temporary
//! files on the local disk) and writes it, on a current-thread runtime as
//! on a multi-thread one (`block_in_place` would not work on the first).
//! A page
//! holds at most [`DEFAULT_PAGE_ROWS`] records and about
//! [`DEFAULT_PAGE_BYTES`] of keys and values, or what
//! [`SqliteStoreBuilder::page_rows`] and
//! [`SqliteStoreBuilder::page_bytes`] set; the page size changes memory
//! and speed, never the result.
//!
//! Memory is then bounded by the pages, the job's stream budget
//! ([`WriteOptions::stream_memory`](backfill_core::WriteOptions::stream_memory))
//! and SQLite's page caches (a `temp` cache of 16 MiB among them), not by
//! the day: with the default budget, a streamed day of 10 000 000 records
//! of about 125 bytes, merged into a new file and then re-applied as a
//! listing, peaked at about 95 MiB of resident memory each time, as did
//! one of 1 000 000 (the same million as one batch: 215 MiB). The day's
//! writes still pass through the WAL before its checkpoint, and a
//! listing's keys through the temporary file, so both grow with the day
//! on disk; an in-memory database (`:memory:`) holds the day's rows in
//! memory, of course.
//!
//! # The day ledger
//!
//! Every day a store has applied, or failed, has one row in `backfill_days`
//! (below), the day's [`LedgerEntry`](backfill_core::LedgerEntry) as
//! [`ledger`](backfill_core::Store::ledger) reads it:
//!
//! - **A success** is written by the batch's own transaction, as its last
//!   statement: one `INSERT … ON CONFLICT (records_table, day) DO UPDATE`
//!   that sets `synced_at` (the job's clock), `run_id`, `mode` (`merge` or
//!   `replace`), `as_of` (a listing's, else `NULL`), `digest` (32
//!   lowercase hex characters) and the counts `inserted` … `collapsed`,
//!   clears the failure columns, and raises a listing's watermark (never
//!   lowering it). The ledger therefore commits with the day's rows or not
//!   at all: a batch that fails, or a listing the guard refuses, leaves
//!   the row as it was. Of two concurrent batches of one day, the row ends
//!   as the last to commit wrote it.
//! - **A re-run** writes its ledger row too, even when it changes no
//!   record: `synced_at`, `run_id` and the counts move forward, and
//!   nothing else is written (the row is one statement per batch, nothing
//!   per record). A job with
//!   [`skip_unchanged`](backfill_core::WriteOptions::skip_unchanged) skips
//!   a merge whose digest is the day's last one before it reaches the
//!   store, and writes nothing at all.
//! - **A failure**, [`record_failure`](backfill_core::Store::record_failure),
//!   is one upsert in its own transaction that sets `failed_at`,
//!   `failed_run_id`, `attempts` and `error`, keeping the last success and
//!   the watermark. A read-only store returns its error.
//!
//! Instants are in [`INSTANT_FORMAT`] like the records', so with plain SQL
//! `SELECT day FROM backfill_days WHERE records_table = 'invoices' AND
//! synced_at IS NOT NULL AND failed_at IS NULL` lists the synced days.
//! Days synced before the upgrade to schema version 3 (below) have no
//! ledger columns set and read as **missing** (their watermark is kept):
//! the next sync of such a day writes its row.
//!
//! Tombstones are removed only by
//! [`purge_tombstones`](backfill_core::Store::purge_tombstones), a
//! maintenance call that no sync makes. Purging reopens one door: a stale
//! re-delivery older than a purged tombstone finds its key absent and
//! brings it back, so purge only tombstones older than the longest delay
//! with which your upstream may re-deliver an old version.
//!
//! # The metadata tables
//!
//! Beside its records table, a store keeps two tables in the same
//! database, shared by every records table in it and created when missing:
//!
//! - `backfill_tables (records_table TEXT PRIMARY KEY, schema_version
//!   INTEGER NOT NULL)`: each records table's schema version;
//! - `backfill_days (records_table TEXT, day TEXT, listing_watermark TEXT
//!   NULL, …, PRIMARY KEY (records_table, day))`: each day's listing
//!   watermark and [ledger](#the-day-ledger) row, `day` as `YYYY-MM-DD` and
//!   the watermark in [`INSTANT_FORMAT`]. The ledger columns, all `NULL`-able:
//!   `synced_at TEXT`, `run_id TEXT`, `mode TEXT`, `as_of TEXT`, `digest
//!   TEXT`, `inserted`, `updated`, `unchanged`, `stale`, `deleted`,
//!   `unlisted`, `collapsed` (`INTEGER`, at least 0), `failed_at TEXT`,
//!   `failed_run_id TEXT`, `attempts INTEGER` (at least 1), `error TEXT`.
//!
//! Both are `STRICT`, with `BINARY` text and `CHECK`s on their dates and
//! instants, and are checked on open like the records table (below). A
//! records table may therefore not be named `backfill_tables` or
//! `backfill_days` (an [`InvalidName`](backfill_core::Error::InvalidName)
//! error, before the file is touched). When a records table is created,
//! day rows left over from a dropped table of the same name are removed,
//! since their watermarks would delete the new table's rows.
//!
//! Two more tables are made when first needed, and read beside
//! `backfill_days` into the ledger when they exist, so a file that never
//! needed them keeps exactly the tables above (and a release that does not
//! know them reads it unchanged):
//!
//! - `backfill_accepted (records_table, day, accepted_at)`: the days a
//!   person [accepted](backfill_core::Store::accept), made by the first
//!   acceptance;
//! - `backfill_timings (records_table, day, synced_at, fetch_ms,
//!   write_ms)`: how long each day's last successful apply took
//!   ([`Timing`](backfill_core::Timing)), made by the first apply, in its
//!   transaction. A timing counts only while its `synced_at` is the day's
//!   in `backfill_days`: a day applied since by a release that does not
//!   write timings reads as having none.
//!
//! Neither name can be a records table's either.
//!
//! # Upgrading from versions 1 and 2
//!
//! This release writes schema version 3: the records table's last column
//! is `deleted INTEGER NOT NULL DEFAULT 0`, checked to be 0 or 1 and to go
//! with an empty value (version 2), the metadata tables exist (version 2),
//! and `backfill_days` has the ledger columns (version 3). A records table
//! of an earlier release is upgraded in place the first time a writable
//! store opens it, in one `BEGIN IMMEDIATE` transaction with the check of
//! the tables' old definitions before it, so it happens once even when
//! several processes open the file together, and not at all if a table is
//! not the store's:
//!
//! - from version 1 (no `deleted` column, no row in `backfill_tables`):
//!   `ALTER TABLE … ADD COLUMN deleted …`, every row kept, live; the
//!   metadata tables; then on to version 3;
//! - from version 2: `ALTER TABLE backfill_days ADD COLUMN …` for each
//!   ledger column, unless another records table's upgrade already added
//!   them (the table is shared), every watermark kept; the days synced
//!   before read as missing in the ledger;
//! - then the table's version row is set to 3.
//!
//! Once `backfill_days` has the ledger columns, a release before this one
//! refuses the database (its table check finds columns it does not
//! create), for every records table in it. A store opened
//! [read-only](SqliteStoreBuilder::read_only) never upgrades: it refuses a
//! table below version 3 with an [`Open`](backfill_core::Error::Open)
//! error saying it must be opened once writable. A table recorded with a
//! schema version newer than this release's is refused the same way.
//! Opening a database where everything is in place writes nothing.
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
//!
//! # Typed columns
//!
//! Fields of each record's JSON value can be kept as columns of their own
//! ([`SqliteStoreBuilder::column`], declared as a
//! [`Column`](backfill_core::columns::Column)), so the table is queried
//! with plain SQL: `SELECT status, sum(total_cents) FROM orders GROUP BY 1`.
//! The values are read from the value by the write path, in Rust, once per
//! record ([`Columns::extract`](backfill_core::columns::Columns::extract)),
//! and written with the row. They are a function of `value` alone: the
//! version, the digests and a re-run that writes nothing are the same as
//! without them.
//!
//! | type | SQLite column | kept as |
//! |---|---|---|
//! | `text` | `TEXT` | the string |
//! | `integer` | `INTEGER` | 64 bits signed |
//! | `double` | `REAL` | a finite double |
//! | `numeric` | `TEXT` | the number exactly as the JSON writes it |
//! | `boolean` | `INTEGER` | 0 or 1 |
//! | `date` | `TEXT` | `YYYY-MM-DD` |
//! | `timestamptz` | `TEXT` | UTC, as `updated_at` is written (text order is time order) |
//! | `json` | `TEXT` | the field's JSON text |
//!
//! Every typed column allows `NULL`: a tombstone's columns are `NULL`, and
//! so is a nullable field that is missing. Each has a `CHECK` of its form,
//! and a required one a `CHECK` that a live row has it, so no writer can
//! store a row the declaration refuses. An [indexed](backfill_core::columns::Column::indexed)
//! one gets an index named `<table>:<column>`. A record whose value does
//! not fit is refused with
//! [`Error::InvalidColumn`](backfill_core::Error::InvalidColumn), naming
//! the key, the column, the path and the text, and nothing of its day is
//! written.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::columns::Column;
//! use backfill_core::{upsert, Record, WriteOptions};
//! use backfill_sqlite::SqliteStore;
//! use chrono::NaiveDate;
//!
//! let store = SqliteStore::builder_in_memory()
//!     .table("orders")
//!     .column(Column::parse("status:text")?)
//!     .column(Column::parse("total_cents:integer")?)
//!     .column(Column::parse("customer:text?=customer.id")?.indexed(true))
//!     .open()
//!     .await?;
//! let day = NaiveDate::from_ymd_opt(2026, 1, 15).unwrap();
//! let at = day.and_hms_opt(9, 0, 0).unwrap().and_utc();
//! let order = r#"{"status": "placed", "total_cents": 1250, "customer": {"id": "c7"}}"#;
//! upsert(&store, day, vec![Record::new("order:1", day, order, at)?], WriteOptions::default()).await?;
//! let bad = Record::new("order:2", day, r#"{"status": "placed", "total_cents": "12 EUR"}"#, at)?;
//! let refused = upsert(&store, day, vec![bad], WriteOptions::default()).await;
//! assert!(matches!(refused, Err(backfill_core::Error::InvalidColumn(_))));
//! # Ok(()) }
//! ```
//!
//! Opening checks the typed columns like the rest of the table: a table
//! with a column the declaration lacks, or of another type, is refused,
//! naming the column, unless
//! [`allow_column_changes`](SqliteStoreBuilder::allow_column_changes) lets
//! opening drop it (and add it again with the declared type). A declared
//! column the table lacks is added in place
//! (`ADD COLUMN`, in the open's transaction) and filled from the table's
//! live rows, read in key order 10 000 at a time, each updated once: on a
//! large table, about the cost of rewriting it. A stored row that does not
//! fit fails the open with
//! [`Error::InvalidColumn`](backfill_core::Error::InvalidColumn) naming its
//! key, and nothing is added; a read-only store refuses such a table.
//!
//! # History
//!
//! With [`SqliteStoreBuilder::history`] the store keeps every version of
//! every key beside the table ([`backfill_core::history`] says what
//! history is): the table `"<table>:versions"`, one row per `(key,
//! updated_at)` with `absent_from`, the first listing of its day that
//! lacked it; the table `"<table>:listings"`, every listing instant of
//! every day; and the view **`<table>_history`** people query, each
//! version with `valid_from` and `valid_to` (a window over the versions),
//! a listing's delete as a tombstone row at its instant, and the typed
//! columns. All three are checked on open like the table, and history is
//! written in the day's own transaction: every version the write meets
//! that is not identical to its stored row, then what a listing lacked.
//! Instants are text that sorts like time, so "as of" is a comparison:
//!
//! ```sql
//! SELECT key, value FROM orders_history
//! WHERE valid_from <= '2026-03-01T12:00:00.000000Z'
//!   AND (valid_to IS NULL OR valid_to > '2026-03-01T12:00:00.000000Z')
//!   AND deleted = 0;
//! ```
//!
//! Turned on for a table with rows, history starts from them
//! ([`SqliteStore::history_started_with`]); once on, every store opening
//! the table writes it.
//!
//! # An existing table
//!
//! Opening creates the tables and the index only when they are missing, so
//! a database opened read-only (a `file:…?mode=ro` URI, or
//! [`SqliteStoreBuilder::read_only`]) can be read. A table that already
//! exists, records or metadata, is used only if it is the one the store
//! would have created (for a records table, at the schema version it has):
//! the same columns in any order with the same declared types, `NOT NULL`,
//! `DEFAULT`s, `BINARY` collation, the same primary key, the same
//! `CHECK`s, and `STRICT`.
//! Anything else is refused when opening, with an
//! [`Open`](backfill_core::Error::Open) error whose source is a
//! [`TableMismatch`] naming each column and what differs, as the Postgres
//! store does: a table that merely looks right can store wrong data (keys
//! `a` and `A` are one row under `COLLATE NOCASE`; a non-STRICT `INTEGER`
//! column turns `"042"` into 42).
//!
//! # Other SQLite connections to the file
//!
//! Any SQLite tool may read and write the file while a store is open, in
//! another process or in this one (Python's `sqlite3` module beside the
//! package is a second copy of SQLite in one process). Two copies of SQLite
//! in a process ordinarily undo each other's POSIX locks: closing one
//! copy's connection releases the other's, which may then see its `-wal`
//! deleted under it. On Linux this crate's SQLite takes its locks as
//! open-file-description locks (`F_OFD_SETLK`, through the VFS's
//! `xSetSystemCall`), which the other copy sees as another process's and
//! cannot release, and keeps the `-wal` and `-shm` files when a store
//! closes (`SQLITE_FCNTL_PERSIST_WAL`). The replacement is installed when
//! the process opens its first store; a connection this copy of SQLite
//! opened before that (through rusqlite directly) keeps the locks it took.
//! Elsewhere SQLite's own locks are kept: there, open your own connection
//! to a store's file from another process.
//!
//! # Which errors retry
//!
//! A job retries a day whose error
//! [`is_retryable`](backfill_core::Error::is_retryable). Here that is lock
//! contention only: `SQLITE_BUSY` (another connection held the lock past
//! the [busy timeout](SqliteStoreBuilder::busy_timeout)), `SQLITE_LOCKED`,
//! `SQLITE_PROTOCOL` (a lost WAL locking race) and `SQLITE_SCHEMA`.
//! Everything else, a read-only database, a full disk, a constraint, a
//! corrupt file, fails the day at once.
// Unsafe code only in `locks`, the calls into SQLite that Rust cannot make
// safely.
#![deny(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

// Layout: `store.rs` holds `SqliteStore`, `write.rs` the one write
// (`apply_day`, a day's pages in four steps), `builder.rs` opening,
// `migrate.rs` creating and upgrading the tables, `schema.rs` the check of
// an existing table, `sql.rs` every SQL text, `error.rs` which SQLite
// errors are worth a retry.
mod builder;
mod error;
mod history;
mod locks;
mod migrate;
mod schema;
mod sql;
mod store;
mod typed;
mod write;

pub use backfill_core::adapter::{Difference, TableMismatch};
pub use builder::{SqliteStoreBuilder, DEFAULT_PAGE_BYTES, DEFAULT_PAGE_ROWS};
pub use store::SqliteStore;

/// The name this adapter gives itself in errors.
const BACKEND: &str = "sqlite";

/// How `event_date` is stored: `YYYY-MM-DD` text (a chrono format string).
pub const DATE_FORMAT: &str = "%Y-%m-%d";

/// How `updated_at` is stored: `YYYY-MM-DDTHH:MM:SS.ffffffZ` text, fixed
/// width, so byte order is time order (a chrono format string).
pub const INSTANT_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// The default table name: the library's one ([`backfill_core::settings`]).
pub const DEFAULT_TABLE: &str = backfill_core::settings::DEFAULT_TABLE;
