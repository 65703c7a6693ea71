//! The SQLite test binary: every integration test of the store, as modules
//! of one binary, so the crate and SQLite are linked once.
//!
//! - `conformance`: the shared suite every store must pass, in memory, on a
//!   file, and in pages of two records.
//! - `open`: bad names and bad files are typed errors that change nothing.
//! - `existing_table`: a table of another definition is refused before a
//!   write, naming the column and what differs.
//! - `schema_version`: version-1 tables are upgraded in place through
//!   version 2 to 3; newer versions and bad metadata tables are refused.
//! - `ledger`: the day ledger commits with the rows, keeps failures beside
//!   the last success, and is upgraded from version 2.
//! - `tombstones`: tombstones, listings, the watermark and purge as SQLite
//!   stores them, and a re-run writes no record.
//! - `history`: history as SQLite keeps it: a re-run writes none, turning
//!   it on for a table with rows, its objects checked on open, and the
//!   analyst's SQL against its view.
//! - `pages`: a streamed day written a few records at a time leaves what
//!   the same records leave as one batch.
//! - `limits`: values too large for SQLite are invalid records, refused
//!   before anything of their batch is written.
//!
//! Days, instants and records come from
//! [`backfill_core::conformance::fixtures`].

mod columns;
mod conformance;
mod existing_table;
mod history;
mod ledger;
mod limits;
mod open;
mod pages;
mod same_batch;
mod schema_version;
mod tombstones;

use std::path::Path;

use rusqlite::Connection;

/// A connection of its own to the database file at `path`, for building or
/// reading what a test needs behind the store's back.
fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}
