//! A Postgres [`Store`](backfill_core::Store) for backfill, on tokio-postgres
//! with a deadpool-postgres pool.
//!
//! # The write path
//!
//! Each day's batch is one transaction. Records travel as arrays (one
//! statement per slice of rows, through `UNNEST`, never a round trip per
//! row) or as one binary `COPY` per slice, and the transaction:
//!
//! 1. takes a transaction-scoped advisory lock per day whose listing
//!    watermark it reads or raises, in date order: shared for the days of
//!    the batch's live records, exclusive for a listing's own day (so a
//!    listing and a batch writing live rows of its day serialize, and no
//!    two batches wait for each other crosswise). Advisory locks write
//!    nothing to the records table;
//! 2. writes the records slice by slice, in key order. A slice whose key
//!    range holds no stored row (one index descent shows it: a day's first
//!    sync, a backfill of days the table does not hold yet), in a batch
//!    whose days have no listing watermark, is copied in with binary
//!    `COPY`: the speed of a bulk load, where `INSERT … ON CONFLICT` pays a
//!    speculative insertion per row. Such a slice has no stored version to
//!    compare with, and the primary key refuses any key another writer
//!    inserted after the check: on that `unique_violation` the page rolls
//!    back to a savepoint taken before its first COPY and merges its slices
//!    from there instead, so the counts stay exact. Every other slice is
//!    merged in one statement that joins it against the table and against
//!    the day's watermark in `backfill_days`. A day written in one or two
//!    slices (up to twice [`DEFAULT_PAGE_ROWS`] records by default: a daily
//!    sync) is joined by hash against its stored rows, read by one scan of
//!    the index on `event_date` (a day's rows were mostly written
//!    together, so few pages, in order); only its keys not found there,
//!    new or stored under another date, are looked up in the primary key.
//!    A longer day is looked up key by key, so no statement reads the
//!    whole day again. A day synced before and fetched again in one or two
//!    slices (a daily lookback), with no watermark, no listing and no
//!    history, is first compared with its stored rows, read once by binary
//!    `COPY` through the same index: a record equal to its row, or older,
//!    sends nothing; when each of the rest replaces a row of the day, they
//!    are updated where those rows lie (found by `ctid`, each only if it is
//!    still the version read, by its `xmin`), in key order, under a
//!    savepoint. A key the day does not hold, or a row another writer
//!    changed since the read (the update is undone first), sends them
//!    through the merge instead. Deciding on rows read earlier is exact: a
//!    row's version only grows. Each statement is planned for its own arguments
//!    (`plan_cache_mode = force_custom_plan`, for the apply's transaction
//!    only): the best join depends on how many records a slice holds. The
//!    statement classifies each record by its own version against
//!    the stored one (unchanged and older rows are not even locked: a
//!    re-run writes no row version of the records table), and writes the
//!    rest with `INSERT … ON CONFLICT (key) DO UPDATE`, in key order. COPY
//!    and merge alike take their locks in key order, slice after slice, so
//!    concurrent writers never deadlock (a listing too, step 3). A live record at or before the
//!    watermark of its `event_date` is written as its own tombstone. A row
//!    another writer committed after the statement's snapshot is never
//!    overwritten blindly: it is merged again, judged by the version order
//!    like any other;
//! 3. for a listing ([`Mode::Replace`](backfill_core::Mode::Replace)) of
//!    a day with live rows, turns the rows it lacks (not newer than its
//!    `as_of`) into their own tombstones in the very statements that merge
//!    its records: each page reads, without a lock, the keys it lacks in
//!    the key range it closes, and each slice sends them with its records,
//!    written by one upsert in key order as tombstones of the version that
//!    statement sees (a row that left the day meanwhile is left as its new
//!    day has it). So a listing, too, takes its rows in one ordered pass:
//!    no listing and merge of another day moving its keys can wait for
//!    each other crosswise. Then it asks the
//!    [`ReplaceGuard`](backfill_core::ReplaceGuard) (rolling everything back
//!    if it refuses);
//! 4. writes the day's [ledger](#the-day-ledger) row, last: one
//!    `INSERT … ON CONFLICT (records_table, day) DO UPDATE` of the day's row
//!    of `backfill_days`, whatever the batch's size, which also raises a
//!    listing's watermark to its `as_of` if lower.
//!
//! A batch is the one-page case of a **streamed day**
//! ([`upsert_stream`](backfill_core::upsert_stream), a job's
//! [`Fetched::stream`](backfill_core::Fetched::stream)), which
//! [`apply`](backfill_core::Store::apply) writes exactly as a batch (the
//! one-page day), in one transaction, holding one page in memory at a time: a
//! page is at most [`page_rows`](PostgresStoreBuilder::page_rows) records
//! and about [`page_bytes`](PostgresStoreBuilder::page_bytes), read from
//! the job's sorted runs just before it is written. The day locks come
//! first, from every record's `event_date`, known before the first page.
//! Pages arrive in key order with unique keys, so each page's counts are
//! exact on their own. A listing's tombstones follow each page, for the
//! key range it closes (after the previous page's last key, up to its own
//! last key; the last page's range runs to the end of the key space), and
//! the guard is asked after the last page with the same numbers a batch
//! gives it. An error in any page, or a dropped future, leaves nothing of
//! the day. The savepoint of a page's COPY only ever undoes that page,
//! which is still in memory: earlier pages stay as written. Each such
//! savepoint keeps a subtransaction id until the transaction ends, and
//! Postgres caches 64 per session: beyond that every other session's
//! snapshots would look subtransactions up in `pg_subtrans`. So an apply
//! takes at most 64; the pages after them are still copied, without one,
//! and a race lost there (another writer inserting a key of the day while
//! it is copied in) fails the apply with a retryable error: the day rolls
//! back whole, and its retry merges the other writer's keys.
//!
//! A re-run that changes no record therefore writes exactly one row
//! version per day: its ledger row in `backfill_days` (a HOT update: no
//! index is touched), saying when it last synced and by which run; the
//! records table gets no tuple and no row lock.
//!
//! Nothing is physically deleted but by
//! [`purge_tombstones`](backfill_core::Store::purge_tombstones), a
//! maintenance call: purge only tombstones older than the longest delay
//! with which your upstream may re-deliver an old version, or that version
//! comes back to life.
//!
//! A slice is bounded by rows ([`DEFAULT_PAGE_ROWS`]) and by bytes
//! ([`DEFAULT_PAGE_BYTES`]): Postgres refuses any protocol message over
//! 1 GiB, so a day of large values is sent in several statements of the
//! same transaction, a listing's keys in ranges of at most the same number
//! of bytes, and a single value over [`MAX_VALUE_BYTES`] is refused before
//! anything is sent.
//!
//! Text is compared `COLLATE "C"` (by bytes), so ties are decided exactly as
//! in Rust and SQLite. Reads return live rows only;
//! [`rows_with_tombstones`](backfill_core::Store::rows_with_tombstones)
//! shows the tombstones too.
//!
//! # The day ledger
//!
//! Each day a store has applied has one row in `backfill_days`
//! (SPEC §7): when its last successful apply committed (`synced_at`, by
//! the job's clock), which run did it (`run_id`, NULL for a direct
//! [`upsert`](backfill_core::upsert)), how (`mode`, and `as_of` for a
//! listing), the `digest` of the batch (32 lowercase hex characters) and
//! its counts; and the last failure after that success (`failed_at`,
//! `failed_run_id`, `attempts`, `error`). The success is written in the
//! apply's own transaction, so the ledger never claims a day whose rows are
//! not there, nor misses one whose rows are; a refused listing or any
//! failure writes no ledger row. It clears the failure columns.
//! [`record_failure`](backfill_core::Store::record_failure) writes the
//! failure columns alone, in a transaction of its own, keeping the last
//! success and the watermark (a NUL in the error text, which Postgres text
//! cannot hold, is kept as U+FFFD). [`ledger`](backfill_core::Store::ledger)
//! reads the rows of a range of days, in day order:
//!
//! ```text
//! SELECT day, listing_watermark, synced_at, run_id, mode, as_of, digest,
//!        inserted, updated, unchanged, stale, deleted, unlisted, collapsed,
//!        failed_at, failed_run_id, attempts, error
//! FROM "schema".backfill_days
//! WHERE records_table = 'table' AND day BETWEEN $1 AND $2 ORDER BY day
//! ```
//!
//! Days synced before the upgrade to schema version 3 have no ledger
//! columns set (only their listing watermark, if any): they read as
//! missing, and are synced again by a job that syncs missing days.
//!
//! # Tables
//!
//! A store keeps its records in one table, and shares two metadata tables
//! with every other store of the same schema: `backfill_tables` (each
//! records table's schema version) and `backfill_days` (per records table
//! and day, the listing watermark and the day ledger). Neither name may be
//! used as a records table. This release creates schema version 3, which a
//! migration tool can create itself:
//!
//! ```text
//! CREATE TABLE "schema"."table" (
//!     key        text COLLATE "C" PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 512),
//!     event_date date NOT NULL CHECK (event_date BETWEEN '0001-01-01' AND '9999-12-31'),
//!     value      text COLLATE "C" NOT NULL,
//!     updated_at timestamptz NOT NULL
//!         CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'),
//!     deleted    boolean NOT NULL DEFAULT false,
//!     CHECK (NOT deleted OR value = '')
//! ) WITH (fillfactor = 80);
//! CREATE INDEX ON "schema"."table" (event_date);
//! CREATE TABLE "schema".backfill_tables (
//!     records_table  text COLLATE "C" PRIMARY KEY,
//!     schema_version integer NOT NULL
//! );
//! CREATE TABLE "schema".backfill_days (
//!     records_table     text COLLATE "C" NOT NULL,
//!     day               date NOT NULL,
//!     listing_watermark timestamptz NULL,
//!     synced_at         timestamptz NULL,
//!     run_id            text COLLATE "C" NULL,
//!     mode              text NULL CHECK (mode IN ('merge', 'replace')),
//!     as_of             timestamptz NULL,
//!     digest            text NULL CHECK (digest ~ '^[0-9a-f]{32}$'),
//!     inserted          bigint NULL CHECK (inserted >= 0),
//!     updated           bigint NULL CHECK (updated >= 0),
//!     unchanged         bigint NULL CHECK (unchanged >= 0),
//!     stale             bigint NULL CHECK (stale >= 0),
//!     deleted           bigint NULL CHECK (deleted >= 0),
//!     unlisted          bigint NULL CHECK (unlisted >= 0),
//!     collapsed         bigint NULL CHECK (collapsed >= 0),
//!     failed_at         timestamptz NULL,
//!     failed_run_id     text NULL,
//!     attempts          integer NULL CHECK (attempts >= 1),
//!     error             text NULL,
//!     PRIMARY KEY (records_table, day)
//! );
//! INSERT INTO "schema".backfill_tables VALUES ('table', 3);
//! ```
//!
//! From version 2, a migration tool adds the ledger columns once per schema
//! (`ALTER TABLE "schema".backfill_days ADD COLUMN synced_at timestamptz
//! NULL, …`, each as above, in that order) and sets every records table's
//! `schema_version` to 3.
//!
//! Opening a store creates only what is missing, and checks that every
//! table that exists is exactly the one the store would have created (see
//! [`TableMismatch`]). Older versions are upgraded in place by the first
//! open that may run DDL, under the same schema-wide advisory lock and in
//! the same transaction as creation: a records table of version 1 (the
//! release before tombstones: no `deleted` column, no version row) gets
//! `deleted` appended (no rewrite; every row is kept, live) and goes on to
//! version 3; at version 2, the schema's shared `backfill_days` gets the
//! ledger columns appended (NULL-able, no rewrite; every watermark kept) if
//! the catalog, read again under the lock, shows it without them — once,
//! however many records tables share it — and the table's version row is
//! set to 3. A version newer than this release's is refused, and so is any
//! table of a schema where one is: so once one table of a schema is
//! upgraded, the release before this one can no longer open any of them.
//!
//! A role with only `SELECT`, `INSERT`, `UPDATE` and `DELETE` on an
//! existing records table of the current version and on the schema's
//! `backfill_tables` and `backfill_days` can open it, read, write and record
//! failures; a read-only replica can open it and read its rows and ledger
//! (recording a failure there is the server's read-only error). Neither can
//! add columns: a table of version 1, or of version 2 in a schema whose
//! `backfill_days` lacks the ledger columns, is an
//! [`Error::Open`](backfill_core::Error::Open) saying that one open with
//! DDL rights (the table's owner) must run first. (Once that has added
//! them, for another table of the schema, a version-2 table only needs its
//! version row raised, which the DML-only role's open does.) With
//! [`create_if_missing(false)`](PostgresStoreBuilder::create_if_missing)
//! nothing is ever created or upgraded: any table below version 3 is an
//! `Error::Open`.
//!
//! Two more shared tables are made when first needed, and read beside
//! `backfill_days` into the ledger when they exist, so a schema that never
//! needed them keeps exactly the tables above (and a release that does not
//! know them reads it unchanged):
//!
//! - `backfill_accepted (records_table, day, accepted_at)`: the days a
//!   person [accepted](backfill_core::Store::accept), made by the first
//!   acceptance;
//! - `backfill_timings (records_table, day, synced_at, fetch_ms,
//!   write_ms)`: how long each day's last successful apply took
//!   ([`Timing`](backfill_core::Timing)), written in the apply's statement
//!   that writes its ledger row. It is made on open, when missing, by a
//!   store that may create what is missing and a role that may create
//!   tables in the schema; a store whose role may not read and write it
//!   works without timings. A timing counts only while its `synced_at` is
//!   the day's in `backfill_days`: a day applied since by a release or a
//!   role that does not write timings reads as having none.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::{backfill, Record};
//! use backfill_postgres::PostgresStore;
//! use chrono::NaiveDate;
//!
//! async fn fetch(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
//!     let at = day.and_hms_opt(8, 0, 0).unwrap().and_utc();
//!     Ok(vec![Record::new(format!("payment:{day}"), day, "{}", at).unwrap()])
//! }
//!
//! let store = PostgresStore::builder()
//!     .schema("pipeline")
//!     .table("payments")
//!     .connect("postgres://app@localhost/warehouse")
//!     .await?;
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//! backfill(&store, &fetch, jan(1)..=jan(31)).await?;
//! # Ok(()) }
//! ```
//!
//! # Typed columns
//!
//! Fields of each record's JSON value can be kept as columns of their own
//! ([`PostgresStoreBuilder::column`], declared as a
//! [`Column`](backfill_core::columns::Column)), so the table is queried
//! with plain SQL, from psql, a BI tool or dbt, with no view and no casts.
//! The write path reads them from the value in Rust, once per record
//! ([`Columns::extract`](backfill_core::columns::Columns::extract)), and
//! sends them with the row in binary, by `COPY` and by the merge alike.
//! (Generated columns would re-parse `value::jsonb` once per column for
//! every row written, their casts to `date` and `timestamptz` are not
//! immutable, and a cast failing inside a `COPY` cannot name the key.)
//! They are a function of `value` alone: the version, the digests and a
//! re-run that writes nothing are the same as without them.
//!
//! | type | Postgres column |
//! |---|---|
//! | `text` | `text` (the database's default collation) |
//! | `integer` | `bigint` |
//! | `double` | `double precision` |
//! | `numeric` | `numeric`, with the JSON's own digits and scale (`12.50`) |
//! | `boolean` | `boolean` |
//! | `date` | `date` |
//! | `timestamptz` | `timestamptz` |
//! | `json` | `jsonb` |
//!
//! Every typed column allows `NULL`: a tombstone's columns are `NULL`, and
//! so is a nullable field that is missing. An
//! [indexed](backfill_core::columns::Column::indexed) one gets an index
//! named `<table>:<column>` when the table is created. A record whose value
//! does not fit is refused with
//! [`Error::InvalidColumn`](backfill_core::Error::InvalidColumn), naming
//! the key, the column, the path and the text, and nothing of its day is
//! kept: a new day's `COPY` reads each record's columns as it sends the
//! record's row, so one under way is abandoned there and the day's
//! transaction rolled back. Opening checks the typed columns like the rest of the table: a
//! column the declaration lacks, or of another type, is refused naming it,
//! unless [`allow_column_changes`](PostgresStoreBuilder::allow_column_changes)
//! lets opening drop it (and add it again with the declared type). A
//! declared column the table lacks is added in place, in the open's
//! transaction, and filled from the table's live rows (read in key order,
//! 10 000 at a time, each row updated once: on a large table, about the
//! cost of rewriting it); a stored row that does not fit fails the open
//! with [`Error::InvalidColumn`](backfill_core::Error::InvalidColumn)
//! naming its key, and nothing is added. A store that may not create
//! ([`create_if_missing(false)`](PostgresStoreBuilder::create_if_missing))
//! refuses such a table, saying what to do; a role without DDL rights works
//! on a table that already has its columns.
//!
//! # History
//!
//! With [`PostgresStoreBuilder::history`] the store keeps every version of
//! every key ([`backfill_core::history`] says what history is). The table
//! itself holds each key's newest version; beside it, the table
//! `"<table>:versions"` holds every other one (those the table replaced,
//! stale re-deliveries it never took, live versions a listing turned into
//! tombstones, tombstones a purge removed), each with `absent_from`, the
//! first listing of its day that lacked it; the table `"<table>:listings"`
//! holds every listing instant of every day; and the view
//! **`<table>_history`** people query reads them together: each version
//! with `valid_from` and `valid_to`, a listing's delete as a tombstone row
//! at its instant, and the typed columns. All of them are checked on open
//! (the view by its comment, which marks it the store's).
//!
//! So a backfill of new keys writes history nothing but its listings, and
//! a changed row costs one more: the merge returns the row it replaced
//! (the one it saw, which its `xmin` check proves is the one it
//! overwrote), and history keeps it, after the page, in key order. Versions
//! the table did not take go to history in the day's own transaction after
//! every row of the records table, those history holds already filtered
//! out before they are touched; a re-run writes no tuple of either table.
//! As each key's newest version is its row in the table, a row changed or
//! deleted by hand, outside the store, changes history with it.
//!
//! ```sql
//! SELECT key, value FROM orders_history
//! WHERE valid_from <= '2026-03-01 12:00Z' AND (valid_to IS NULL OR valid_to > '2026-03-01 12:00Z')
//!   AND NOT deleted;
//! ```
//!
//! Turned on for a table with rows, history starts from them
//! ([`PostgresStore::history_started_with`]); once on, every store opening
//! the table writes it, and a store that may not create
//! (`create_if_missing(false)`) refuses a table whose history is missing
//! or out of step.
//!
//! # Which errors are retried
//!
//! Store errors are [`Error::Backend`](backfill_core::Error::Backend), and
//! [`is_retryable`](backfill_core::Error::is_retryable) tells a job whether
//! to try the day again. Every apply is idempotent (a re-run of a batch
//! writes nothing it already wrote), so a retry is always safe, even when a
//! commit's outcome is unknown; the only question is whether it can
//! succeed. These SQLSTATEs retry:
//!
//! | SQLSTATE | name | why a retry can succeed |
//! |---|---|---|
//! | class `08` except `08P01` | connection exception | the connection was lost or refused; the pool opens a new one (`08007`, commit outcome unknown, included) |
//! | `40000`, `40001`, `40003`, `40P01` | transaction rollback, serialization failure, statement completion unknown, deadlock | the other transaction is gone on the next try |
//! | `55P03` | lock not available | a busy lock (`lock_timeout`, `NOWAIT`) is released by its holder |
//! | `57014` | query canceled | mostly `statement_timeout` under load; a retry runs in another moment (bounded by the job's attempts) |
//! | `57P01`, `57P02`, `57P03`, `57P05`, `25P03` | admin or crash shutdown, cannot connect now, idle (in transaction) session timeout | the server restarts or the session is replaced |
//! | `53000`, `53200`, `53300` | insufficient resources, out of memory, too many connections | load that passes |
//! | `72000` | snapshot too old | a new transaction takes a new snapshot |
//!
//! So do errors without a SQLSTATE that mean the connection is gone (closed
//! or an I/O error on the socket), and a pool timeout. Everything else is
//! final, notably: `08P01` protocol violation (the same message fails
//! again), `25006` read-only transaction (a replica or a read-only
//! database stays read-only), `53100` disk full and `53400` configuration
//! limit exceeded (an operator must act), `57P04` database dropped, class
//! `58` system errors and `XX` internal errors, and every error about the
//! data, the schema or privileges (classes `22`, `23`, `42`, `28`, …).
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layout, file for file as in backfill-sqlite: `store.rs` holds
// `PostgresStore`, `write.rs` the one write (`apply_day`), `builder.rs`
// the options and connecting, `migrate.rs` creating and upgrading the
// tables on open, `schema.rs` the check of an existing table against the
// catalog, `sql.rs` every SQL text, `error.rs` which server errors are
// worth a retry; and `tls.rs` (feature `tls`) the rustls connector.
mod builder;
mod error;
mod history;
mod migrate;
mod schema;
mod slices;
mod sql;
mod store;
#[cfg(feature = "tls")]
mod tls;
mod typed;
mod write;

pub use backfill_core::adapter::{Difference, TableMismatch};
pub use builder::PostgresStoreBuilder;
pub use store::PostgresStore;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use tls::Tls;

pub use deadpool_postgres;
pub use tokio_postgres;

/// The backend name in this crate's errors.
const BACKEND: &str = "postgres";

/// The default schema: the library's one ([`backfill_core::settings`]).
pub const DEFAULT_SCHEMA: &str = backfill_core::settings::DEFAULT_SCHEMA;
/// The default table name: the library's one ([`backfill_core::settings`]).
pub const DEFAULT_TABLE: &str = backfill_core::settings::DEFAULT_TABLE;
/// How long making one connection may take by default — TCP, TLS, the
/// startup and authentication exchange — before it fails as timed out: 30 s.
/// A server that accepts connections and never answers (a hung host, a
/// proxy with nothing behind it) fails opening instead of hanging it.
pub const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// The records table's default `fillfactor`, in percent
/// ([`PostgresStoreBuilder::fill_factor`]): a fifth of each page left free,
/// so that a re-fetched day whose records changed is mostly updated in
/// place, without an index write per row.
pub const DEFAULT_FILL_FACTOR: u8 = 80;
/// The default number of records sent per statement.
pub const DEFAULT_PAGE_ROWS: usize = 10_000;
/// The default number of bytes (keys and values, plus a little per row)
/// sent per statement: 64 MiB.
pub const DEFAULT_PAGE_BYTES: usize = 64 << 20;
/// The largest `value` this store sends, in bytes: 1 GiB minus 1 MiB.
///
/// Postgres refuses any protocol message over 1 GiB (and any single text
/// value over 1 GiB), so a record whose value alone would exceed it is
/// refused with [`Error::InvalidRecord`](backfill_core::Error::InvalidRecord)
/// (field [`Value`](backfill_core::Field::Value), problem
/// [`TooLong`](backfill_core::Problem::TooLong) with this `max`) before
/// anything of its batch is sent. The MiB kept free holds the key, the
/// other columns and the message framing. Values anywhere near this size
/// also need that much server memory per copy; store large blobs elsewhere
/// and keep a reference in `value`.
pub const MAX_VALUE_BYTES: usize = (1 << 30) - (1 << 20);
