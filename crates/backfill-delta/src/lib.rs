//! A Delta Lake [`Store`](backfill_core::Store) for backfill, on
//! [delta-rs](https://docs.rs/deltalake): the same one write path as the
//! other stores, into a table that Spark, Databricks, Trino, DuckDB and
//! Polars read, written by many machines at once.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::{upsert, Record, Store, WriteOptions};
//! use backfill_delta::DeltaStore;
//! use chrono::{NaiveDate, TimeZone, Utc};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let orders = dir.path().join("orders");
//! # let orders = orders.to_str().unwrap();
//! // A local directory or a `file:///…` URL.
//! let store = DeltaStore::open(orders).await?;
//! let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
//! let at = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
//! let records = vec![Record::new("order:1", day, r#"{"total":12}"#, at)?];
//! upsert(&store, day, records.clone(), WriteOptions::default()).await?;
//! let again = upsert(&store, day, records, WriteOptions::default()).await?;
//! assert_eq!(again.unchanged, 1);
//! assert_eq!(store.day_rows(day).await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Where it lives
//!
//! A local directory (a path or a `file:///…` URL), or a prefix on S3 or
//! S3-compatible storage (`s3://bucket/path`, `s3a://…`). On S3 the
//! credentials, region and endpoint come from the usual AWS environment
//! variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` for another S3 service, `AWS_ALLOW_HTTP` for a
//! plain-HTTP one), or from [`DeltaStore::open_with`]'s storage options
//! (the same names in lower case). A commit is put with `If-None-Match: *`,
//! S3's conditional write: of two writers making the same version, S3 lets
//! one through, so no lock table (DynamoDB) is needed; the store must
//! honour conditional writes, as AWS S3, MinIO and Cloudflare R2 do.
//!
//! # The table
//!
//! Partitioned by `event_date` (`event_date=YYYY-MM-DD/`), with the columns
//! `key` (string), `event_date` (date), `value` (string), `updated_at`
//! (timestamp, microseconds, UTC) and `deleted` (boolean). A key is in one
//! row of the whole table, live or a tombstone, in the partition of its
//! version's `event_date`. A day's records are in one file, sorted by key
//! (delta-rs starts another past its target file size; Snappy-compressed,
//! with no dictionary for `key`, `value` and `updated_at`, whose values
//! seldom repeat), so a re-fetched
//! day rewrites that day's files and no others; a day whose rows do not
//! change is not rewritten at all (a re-run commits the day's new ledger
//! row only, and with
//! [`skip_unchanged`](backfill_core::WriteOptions::skip_unchanged) an
//! identical re-run commits no version).
//!
//! A day new to the table most likely becomes its records as they came (a
//! backfill into a new table, a daily sync's new day), so while such a day
//! is decided, its records' file is already being written on a thread of
//! its own (when no other day is being applied through the store, so that
//! a core is free for it). The file is committed if the day's rows are
//! those records, and deleted if they are not (a stale version of a key
//! another day holds newer, another writer's commit of the same day).
//!
//! Readers that want the live rows filter on the tombstone marker:
//!
//! ```sql
//! -- Spark, Databricks, Trino, DuckDB (delta_scan), …
//! CREATE VIEW orders_live AS SELECT key, event_date, value, updated_at
//! FROM orders WHERE NOT deleted;
//! ```
//!
//! # Typed columns
//!
//! Typed columns ([`Column`](backfill_core::columns::Column), declared
//! with [`DeltaStoreBuilder::columns`] or the command line's `--column`)
//! are real columns of the table, nullable, after the ones above, in
//! Delta's own types: `integer` a `long`, `double` a `double`, `boolean`
//! a `boolean`, `date` a `date`, `timestamptz` a `timestamp` (µs, UTC);
//! `text` and `json` a `string`, and `numeric` a `string` holding the
//! number exactly as it came (a Delta `decimal` has a fixed scale and at
//! most 38 digits, which an API's numbers do not promise). A record whose
//! field does not fit its column fails its day, naming the column, and
//! nothing of that day is written. The declaration is kept in the table
//! property `backfill.columns`, so opening the table with another one is
//! refused, naming the column that differs, unless
//! [`allow_column_changes`](DeltaStoreBuilder::allow_column_changes): then
//! the table's schema changes and every file is rewritten in the new
//! shape, in one commit, after every stored row is checked against the new
//! declaration. `indexed` has no meaning on a Delta table (its files carry
//! per-column statistics every reader uses instead) and is ignored.
//!
//! # The ledger commits with the data
//!
//! Delta commits one table at a time, so the day ledger is kept **in the
//! table**: each day's ledger entry is one row of its own partition, in a
//! small file of its own, with the key `"\0backfill.ledger:YYYY-MM-DD"`
//! (a record's key never holds a NUL), `deleted = true` (so the live-rows
//! filter above leaves it out) and the entry as JSON in `value`. A day's
//! write removes the day's old files and adds the new ones, its ledger
//! row's among them, in **one commit**: a single `_delta_log` entry that
//! either exists or does not. Whatever instant a writer dies at, the day's
//! rows and its ledger entry are those of one and the same version: files
//! written before the commit are in no version (`VACUUM` removes them), and
//! after it both are in.
//!
//! Why a row and not the log's other places for application data:
//! `commitInfo` is not part of a snapshot (it is gone once the log is
//! cleaned up), an application transaction (`txn`) holds a number only,
//! `domainMetadata` needs a writer feature delta-rs does not write, and an
//! `add` action's tags are lost when another engine compacts the day's
//! files (`OPTIMIZE`). A row survives all of these: `OPTIMIZE`, `ZORDER`
//! and checkpoints keep rows, and this store reads a ledger row from
//! whichever file holds it.
//!
//! # History
//!
//! With [`DeltaStoreBuilder::history`] (`--history` on the command line,
//! `history=True` in Python) the table keeps [history](backfill_core::history):
//! every version of every key, valid from its `updated_at` until the next
//! one's, the same whatever order the days arrived in, read with
//! [`Store::history`](backfill_core::Store::history) and
//! [`Store::as_of`](backfill_core::Store::as_of) (`backfill history`,
//! `backfill rows --as-of`). Once on, it stays on: the table property
//! `backfill.history` says so to every writer, whatever it was opened
//! with. Turning it on for a table with rows writes nothing but that
//! property: each row is its key's first version.
//!
//! History is kept **in the table, day by day**, in the partition of the
//! versions' `event_date`, committed with the day's rows in the same
//! commit. A day's records are each a version as delivered; what they do
//! not hold goes to a small file of the day's own, rewritten only when it
//! changes: the versions a write replaced, stale re-deliveries, versions a
//! listing closed, tombstones a purge removed (one row each, key
//! `"\0backfill.version:<key>"`, `updated_at` the version's, and in `value`
//! JSON: `{"deleted": false, "value": "<the value>", "absent_from": <the
//! first listing that lacked it, or null>}`), and the instants of the day's
//! listings (key `"\0backfill.listing:"`). Like the ledger row, each has
//! `deleted = true`, so the live-rows filter above leaves it out. A backfill
//! into a new table writes no history row at all; an identical re-run
//! none; a lookback day exactly the versions it replaced. A write decides
//! history with the days it reads already (its own, its records' dates,
//! the days holding its keys), by the reference store's rules, so a
//! streamed day of a table keeping history is decided in memory whole.
//!
//! # Many writers
//!
//! Delta uses optimistic concurrency: a commit names the version it makes,
//! and of two writers making the same version, one loses. A write here is
//! decided on one snapshot: the days it reads whole (its own, each
//! record's `event_date`, and every day that holds one of its keys) and
//! the keys it writes. When its commit loses, it reads the commits that
//! won: if none touched those days or added one of those keys anywhere,
//! it commits the same files on top of them; otherwise it deletes its
//! files and decides the day again on the new snapshot. So writers of
//! different days never fail each other (they commit one after the
//! other), and writers of the same day end as one of their serial orders
//! would. A day's first attempt decides on the snapshot this store read
//! or committed last, when that was within the last second, without
//! listing the log again: whatever was committed since makes its commit
//! lose, and it is checked as above (a day that would commit nothing on
//! that snapshot is decided again on the latest). A backfill writing day
//! after day so saves a listing of the log per day.
//!
//! # Days larger than memory
//!
//! A day fetched whole is decided in memory. A streamed day
//! ([`upsert_stream`](backfill_core::upsert_stream), a fetch that returns
//! a stream) larger than a page (50 000 records) is decided page by page,
//! as its pages arrive in key order: each page against the day's stored
//! rows of its key range only, read from the day's files (sorted by key)
//! a batch at a time, 50 000 at most at once, by the same reference
//! decisions; its rows stream to the day's new files, and the guard, the
//! ledger row and the commit come after the last page, as for a day
//! fetched whole. Memory holds a page, a range of stored rows, a row group
//! being written and 8 bytes a key (the keys' hashes, to check other
//! writers' commits against), whatever the day's size; plus, whole, any
//! other day whose rows the write changes (records of other days, keys
//! moving in from one). A day whose rows are all unchanged writes no
//! records file. A lost race reads the day's pages again from the job's
//! temporary files. A day whose files are not in key order (compacted by
//! another engine) is decided whole.
//!
//! # Maintenance
//!
//! Every write of a day replaces that day's files, so the table does not
//! accumulate small files the way appends do; the files it replaces stay
//! on storage for time travel until `VACUUM` removes them (run it from any
//! Delta engine, with the retention your readers' time travel needs).
//! Tombstones go with [`Store::purge_tombstones`](backfill_core::Store::purge_tombstones).

mod commit;
mod error;
mod paged;
mod rows;
mod s3;
mod store;
mod table;

pub use store::{DeltaStore, DeltaStoreBuilder};

/// The table's location as shown in errors and `Debug`: its URL without a
/// password or query.
pub(crate) fn shown_location(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}
