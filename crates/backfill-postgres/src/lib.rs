//! A Postgres [`Store`](backfill_core::Store) for backfill, on tokio-postgres
//! with a deadpool-postgres pool.
//!
//! Each day's batch is one transaction. Records travel as arrays (one
//! statement per chunk of rows, through `UNNEST`, never a round trip per
//! row), and one statement per chunk:
//!
//! 1. joins the chunk against the table and drops the rows that are
//!    identical or older than what is stored (an anti-join, so unchanged rows
//!    are not even locked: a re-run writes no row version and no WAL);
//! 2. writes the rest with `INSERT … ON CONFLICT (key) DO UPDATE … WHERE
//!    (incoming) > (stored)`, in key order, so concurrent writers never
//!    deadlock and a row committed meanwhile by another writer is still only
//!    overwritten by a newer version.
//!
//! A chunk is bounded by rows ([`DEFAULT_CHUNK_ROWS`]) and by bytes
//! ([`DEFAULT_CHUNK_BYTES`]): Postgres refuses any protocol message over
//! 1 GiB, so a day of large values is sent in several statements of the
//! same transaction, and a single value over [`MAX_VALUE_BYTES`] is refused
//! before anything is sent.
//!
//! Text is compared `COLLATE "C"` (by bytes), so ties are decided exactly as
//! in Rust and SQLite.
//!
//! Opening a store creates only what is missing (schema, table, index),
//! and checks that an existing table is exactly the one the store would
//! have created (see [`TableMismatch`]). A role with only `SELECT`,
//! `INSERT`, `UPDATE` and `DELETE` on an existing table can open it; so can
//! a read-only replica, to read.
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

mod builder;
mod error;
mod sql;
mod store;
mod table;

pub use builder::PostgresStoreBuilder;
pub use store::PostgresStore;
pub use table::{Difference, TableMismatch};

pub use deadpool_postgres;
pub use tokio_postgres;

/// The backend name in this crate's errors.
const BACKEND: &str = "postgres";

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The default table name.
pub const DEFAULT_TABLE: &str = "backfill_records";
/// The default number of records sent per statement.
pub const DEFAULT_CHUNK_ROWS: usize = 10_000;
/// The default number of bytes (keys and values, plus a little per row)
/// sent per statement: 64 MiB.
pub const DEFAULT_CHUNK_BYTES: usize = 64 << 20;
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
