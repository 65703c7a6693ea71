//! [`PostgresStore`] and its [`Store`] implementation: the one write path.

use std::fmt;
use std::future::{poll_fn, Future};
use std::ops::RangeInclusive;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use async_trait::async_trait;
use backfill_core::{
    Batch, Counts, DayFailure, Digest, Error, Field, LedgerEntry, Mode, Problem, Record, Result,
    RunId, Store, SyncedDay,
};
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::Pool;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
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

    async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
        self.read(&self.sql.with_tombstones, &[]).await
    }

    async fn apply(&self, batch: &Batch) -> Result<Counts> {
        // Before a connection is even taken: nothing of the batch is sent.
        check_value_sizes(batch.records())?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;

        // 1. The days whose watermark this batch reads (shared) or raises
        // (exclusive), in date order, before any watermark is read; whether
        // any of them has a watermark, read once they are locked; and the
        // savepoint that a lost race of a COPY rolls back to (after the
        // locks: rolling back must not release them). One round trip.
        let (days, exclusive) = days_to_lock(batch);
        let lock = tx
            .prepare_cached(&self.sql.lock_days)
            .await
            .map_err(pg_error)?;
        let watermarked = tx
            .prepare_cached(&self.sql.watermarked)
            .await
            .map_err(pg_error)?;
        let (locked, marked, savepoint) = join3(
            async {
                match days.is_empty() {
                    true => Ok(0),
                    false => tx.execute(&lock, &[&days, &exclusive]).await,
                }
            },
            // A statement of its own, after the locks: its snapshot is
            // taken once they are held.
            async {
                match days.is_empty() {
                    true => Ok(false),
                    false => tx.query_one(&watermarked, &[&days]).await?.try_get(0),
                }
            },
            tx.batch_execute(SAVEPOINT),
        )
        .await;
        locked.map_err(pg_error)?;
        let marked = marked.map_err(pg_error)?;
        savepoint.map_err(pg_error)?;
        let writes = Writes {
            // A day with a listing watermark may bury a record, which only
            // the merge decides: no COPY then.
            copy: match marked {
                true => None,
                false => Some((
                    tx.prepare_cached(&self.sql.key_range_empty)
                        .await
                        .map_err(pg_error)?,
                    tx.prepare_cached(&self.sql.copy_in)
                        .await
                        .map_err(pg_error)?,
                )),
            },
            merge: tx.prepare_cached(&self.sql.merge).await.map_err(pg_error)?,
        };

        // 2. The records, chunk by chunk in key order: a chunk whose key
        // range holds no stored row is copied in, any other merged. Every
        // statement takes its row locks in key order, and the chunks
        // follow the batch's key order, so a whole apply locks in key
        // order and concurrent writers never wait for each other
        // crosswise.
        let mut counts = Counts::default();
        let mut raced = false;
        for chunk in Chunks::new(batch.records(), self.chunk_rows, self.chunk_bytes) {
            match writes.apply(&tx, chunk, &mut counts).await {
                Ok(()) => {}
                Err(Raced::Yes) => {
                    raced = true;
                    break;
                }
                Err(Raced::No(e)) => return Err(e),
            }
        }
        if raced {
            // Another writer inserted a key of a chunk we found absent
            // between our check and our COPY: undo everything since the
            // savepoint and merge every chunk, which judges such keys by
            // version like any stored row. One savepoint per apply, never
            // one per chunk: a transaction with more than 64
            // subtransactions slows every snapshot on the server.
            tx.batch_execute(ROLLBACK_TO_SAVEPOINT)
                .await
                .map_err(pg_error)?;
            counts = Counts::default();
            for chunk in Chunks::new(batch.records(), self.chunk_rows, self.chunk_bytes) {
                merge_records(&tx, &writes.merge, chunk, &mut counts).await?;
            }
        }
        tx.batch_execute(RELEASE_SAVEPOINT)
            .await
            .map_err(pg_error)?;

        if let Some(as_of) = batch.as_of() {
            // 3. The listing: the day's live rows it lacks become their own
            // tombstones, asked of the guard first.
            let live: i64 = tx
                .query_one(&self.sql.live, &[&batch.day()])
                .await
                .map_err(pg_error)?
                .get(0);
            let unlist = tx
                .prepare_cached(&self.sql.unlist)
                .await
                .map_err(pg_error)?;
            let mut unlisted = 0;
            for range in KeyRanges::new(batch.records(), self.chunk_bytes) {
                unlisted += tx
                    .execute(
                        &unlist,
                        &[&batch.day(), &as_of, &range.from, &range.to, &range.keys],
                    )
                    .await
                    .map_err(pg_error)?;
            }
            if let Err(refused) = batch.check_replace(unlisted, live as u64) {
                tx.rollback().await.map_err(pg_error)?;
                return Err(refused);
            }
            counts.deleted += unlisted;
            counts.unlisted = unlisted;
        }
        // 4. The day's ledger row, last: synced now, by this run, with these
        // counts, its failure cleared, and a listing's watermark raised to
        // its `as_of` if lower. One statement, committed with the rows.
        let synced = batch.synced(counts);
        let ledger = tx
            .prepare_cached(&self.sql.synced)
            .await
            .map_err(pg_error)?;
        let c = &synced.counts;
        tx.execute(
            &ledger,
            &[
                &batch.day(),
                &synced.as_of,
                &synced.at,
                &synced.run_id.as_ref().map(RunId::as_str),
                &mode_text(synced.mode)?,
                &synced.digest.to_string(),
                &count(c.inserted),
                &count(c.updated),
                &count(c.unchanged),
                &count(c.stale),
                &count(c.deleted),
                &count(c.unlisted),
                &count(c.collapsed),
            ],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(counts)
    }

    async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
        let client = self.client().await?;
        client
            .execute(&self.sql.purge, &[&before])
            .await
            .map_err(pg_error)
    }

    async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql.ledger)
            .await
            .map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[days.start(), days.end()])
            .await
            .map_err(pg_error)?;
        rows.iter().map(into_entry).collect()
    }

    async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
        // Postgres text cannot hold NUL; an error message rarely does.
        let error = failure.error.replace('\0', "\u{FFFD}");
        let attempts = i32::try_from(failure.attempts).unwrap_or(i32::MAX);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql.failed)
            .await
            .map_err(pg_error)?;
        client
            .execute(
                &stmt,
                &[
                    &day,
                    &failure.at,
                    &failure.run_id.as_ref().map(RunId::as_str),
                    &attempts,
                    &error,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }
}

/// A count as the ledger stores it (`bigint`).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A mode as the ledger stores it.
fn mode_text(mode: Mode) -> Result<&'static str> {
    match mode {
        Mode::Merge => Ok("merge"),
        Mode::Replace => Ok("replace"),
        other => Err(Error::backend(
            BACKEND,
            false,
            format!("no ledger text for mode {other:?}"),
        )),
    }
}

/// A ledger row, as [`Statements::ledger`](crate::sql::Statements) reads
/// it: `day, listing_watermark`, the success's columns, the failure's.
fn into_entry(row: &Row) -> Result<LedgerEntry> {
    let corrupt = |what: String| Error::backend(BACKEND, false, what);
    let day: NaiveDate = row.try_get(0).map_err(pg_error)?;
    let mut entry = LedgerEntry::new(day);
    entry.listing_watermark = row.try_get(1).map_err(pg_error)?;
    let synced_at: Option<DateTime<Utc>> = row.try_get(2).map_err(pg_error)?;
    if let Some(at) = synced_at {
        let mode: Option<String> = row.try_get(4).map_err(pg_error)?;
        let mode = match mode.as_deref() {
            Some("merge") => Mode::Merge,
            Some("replace") => Mode::Replace,
            other => return Err(corrupt(format!("ledger row of {day}: mode {other:?}"))),
        };
        let digest: Option<String> = row.try_get(6).map_err(pg_error)?;
        let digest = digest
            .as_deref()
            .and_then(Digest::from_hex)
            .ok_or_else(|| corrupt(format!("ledger row of {day}: digest {digest:?}")))?;
        let mut counts = Counts::default();
        for (i, field) in [
            &mut counts.inserted,
            &mut counts.updated,
            &mut counts.unchanged,
            &mut counts.stale,
            &mut counts.deleted,
            &mut counts.unlisted,
            &mut counts.collapsed,
        ]
        .into_iter()
        .enumerate()
        {
            let n: Option<i64> = row.try_get(7 + i).map_err(pg_error)?;
            let n = n.ok_or_else(|| corrupt(format!("ledger row of {day}: a count is NULL")))?;
            *field = u64::try_from(n).unwrap_or(0);
        }
        let run_id: Option<String> = row.try_get(3).map_err(pg_error)?;
        entry.synced = Some(SyncedDay::new(
            at,
            run_id.map(RunId::from),
            mode,
            row.try_get(5).map_err(pg_error)?,
            digest,
            counts,
        ));
    }
    let failed_at: Option<DateTime<Utc>> = row.try_get(14).map_err(pg_error)?;
    if let Some(at) = failed_at {
        let run_id: Option<String> = row.try_get(15).map_err(pg_error)?;
        let attempts: Option<i32> = row.try_get(16).map_err(pg_error)?;
        let error: Option<String> = row.try_get(17).map_err(pg_error)?;
        entry.failure = Some(DayFailure::new(
            at,
            run_id.map(RunId::from),
            attempts.and_then(|a| u32::try_from(a).ok()).unwrap_or(1),
            error.as_deref().unwrap_or(""),
        ));
    }
    Ok(entry)
}

/// How many times a chunk's raced rows are merged again before giving up.
/// The second pass cannot race (the first locked every raced row); more
/// are only a guard against a bug looping forever.
const MAX_MERGE_PASSES: u32 = 4;

/// The savepoint around an apply's writes.
const SAVEPOINT: &str = "SAVEPOINT backfill_apply";
/// Undoes an apply's writes after a lost race.
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT backfill_apply";
/// Ends the savepoint once the writes are done.
const RELEASE_SAVEPOINT: &str = "RELEASE SAVEPOINT backfill_apply";

/// How writing a chunk failed.
#[derive(Debug)]
enum Raced {
    /// A COPY met a `unique_violation`: another writer inserted a key of a
    /// chunk found absent (the primary key is the records table's only
    /// unique index).
    Yes,
    /// Any other error.
    No(Error),
}

/// Awaits three futures together, so that requests on one connection are
/// sent back to back (tokio-postgres pipelines the requests of futures
/// polled concurrently) and answered in one round trip.
async fn join3<A: Future, B: Future, C: Future>(
    a: A,
    b: B,
    c: C,
) -> (A::Output, B::Output, C::Output) {
    let (mut a, mut b, mut c) = (pin!(a), pin!(b), pin!(c));
    let (mut ra, mut rb, mut rc) = (None, None, None);
    poll_fn(|cx| {
        // In argument order: the first poll of each sends its request.
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if rc.is_none() {
            if let Poll::Ready(v) = c.as_mut().poll(cx) {
                rc = Some(v);
            }
        }
        match (ra.take(), rb.take(), rc.take()) {
            (Some(a), Some(b), Some(c)) => Poll::Ready((a, b, c)),
            (a, b, c) => {
                (ra, rb, rc) = (a, b, c);
                Poll::Pending
            }
        }
    })
    .await
}

/// The prepared statements that write an apply's chunks.
#[derive(Debug)]
struct Writes {
    /// `Statements::key_range_empty` and `Statements::copy_in`, unless a
    /// day of the batch has a listing watermark.
    copy: Option<(tokio_postgres::Statement, tokio_postgres::Statement)>,
    /// `Statements::merge`.
    merge: tokio_postgres::Statement,
}

impl Writes {
    /// Writes one chunk (sorted by key, not empty) and adds its counts.
    ///
    /// When no stored key lies between the chunk's first and last key (a
    /// day's first sync; a backfill of days the table does not hold yet),
    /// the chunk is copied in whole with binary `COPY`, in key order: the
    /// floor's own speed, where `INSERT … ON CONFLICT` pays a speculative
    /// insertion per row. No record of such a chunk has a stored version
    /// to be compared with, so none is; and the COPY cannot overwrite
    /// anything: the primary key refuses a key another writer inserted
    /// after the check (`unique_violation`: [`Raced::Yes`], which the
    /// caller answers by merging), after waiting for that writer if it has
    /// not committed yet. Any other chunk is merged.
    async fn apply(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        records: &[Record],
        counts: &mut Counts,
    ) -> std::result::Result<(), Raced> {
        if let (Some((empty, copy)), Some(first), Some(last)) =
            (&self.copy, records.first(), records.last())
        {
            let row = tx
                .query_one(empty, &[&first.key(), &last.key()])
                .await
                .map_err(|e| Raced::No(pg_error(e)))?;
            if row
                .try_get::<_, bool>(0)
                .map_err(|e| Raced::No(pg_error(e)))?
            {
                let copied = match copy_chunk(tx, copy, records).await {
                    Ok(copied) => copied,
                    Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                        return Err(Raced::Yes)
                    }
                    Err(e) => return Err(Raced::No(pg_error(e))),
                };
                if copied as usize != records.len() {
                    return Err(Raced::No(Error::backend(
                        BACKEND,
                        false,
                        format!("COPY wrote {copied} rows of {}", records.len()),
                    )));
                }
                let tombstones = records.iter().filter(|r| r.is_deleted()).count() as u64;
                counts.inserted += copied - tombstones;
                counts.deleted += tombstones;
                return Ok(());
            }
        }
        merge_records(tx, &self.merge, records, counts)
            .await
            .map_err(Raced::No)
    }
}

/// Copies `records` into the table in their order with binary `COPY`;
/// returns the number of rows copied.
async fn copy_chunk(
    tx: &deadpool_postgres::Transaction<'_>,
    copy: &tokio_postgres::Statement,
    records: &[Record],
) -> std::result::Result<u64, tokio_postgres::Error> {
    let sink = tx.copy_in(copy).await?;
    let writer = BinaryCopyInWriter::new(
        sink,
        &[
            Type::TEXT,
            Type::DATE,
            Type::TEXT,
            Type::TIMESTAMPTZ,
            Type::BOOL,
        ],
    );
    let mut writer = pin!(writer);
    for r in records {
        let (date, at, deleted) = (r.event_date(), r.updated_at(), r.is_deleted());
        writer
            .as_mut()
            .write(&[&r.key(), &date, &r.value(), &at, &deleted])
            .await?;
    }
    writer.finish().await
}

/// Merges `chunk` (sorted by key) with the conflict-handling merge and adds
/// its counts; merges the rows another writer raced past again, until none
/// is left.
async fn merge_records(
    tx: &deadpool_postgres::Transaction<'_>,
    merge: &tokio_postgres::Statement,
    chunk: &[Record],
    counts: &mut Counts,
) -> Result<()> {
    let mut pending: Vec<&Record> = chunk.iter().collect();
    let mut passes = 0;
    while !pending.is_empty() {
        passes += 1;
        if passes > MAX_MERGE_PASSES {
            return Err(Error::backend(
                BACKEND,
                true,
                format!(
                    "{} rows kept changing under {MAX_MERGE_PASSES} merges",
                    pending.len()
                ),
            ));
        }
        let raced = merge_chunk(tx, merge, &pending, counts).await?;
        // Rows another writer committed after this statement's snapshot:
        // the upsert locked them and left them alone, so merging them again
        // sees them as they now are, for good.
        pending = raced
            .iter()
            .map(|key| {
                chunk
                    .binary_search_by(|r| r.key().cmp(key.as_str()))
                    .map(|i| &chunk[i])
                    .map_err(|_| Error::backend(BACKEND, false, "raced key not in batch"))
            })
            .collect::<Result<_>>()?;
    }
    Ok(())
}

/// Runs the merge statement on `records` (sorted by key), adds its counts
/// and returns the keys a concurrent writer raced past.
async fn merge_chunk(
    tx: &deadpool_postgres::Transaction<'_>,
    merge: &tokio_postgres::Statement,
    records: &[&Record],
    counts: &mut Counts,
) -> Result<Vec<String>> {
    let keys: Vec<&str> = records.iter().map(|r| r.key()).collect();
    let dates: Vec<NaiveDate> = records.iter().map(|r| r.event_date()).collect();
    let values: Vec<&str> = records.iter().map(|r| r.value()).collect();
    let instants: Vec<DateTime<Utc>> = records.iter().map(|r| r.updated_at()).collect();
    let deleted: Vec<bool> = records.iter().map(|r| r.is_deleted()).collect();
    let row = tx
        .query_one(merge, &[&keys, &dates, &values, &instants, &deleted])
        .await
        .map_err(pg_error)?;
    let count = |name: &str| row.get::<_, i64>(name) as u64;
    counts.inserted += count("inserted");
    counts.updated += count("updated");
    counts.deleted += count("deleted");
    counts.unchanged += count("unchanged");
    counts.stale += count("stale");
    let mut raced: Vec<String> = row
        .get::<_, Option<Vec<String>>>("raced")
        .unwrap_or_default();
    raced.sort_unstable();
    Ok(raced)
}

/// The days a batch locks, in date order, and whether each is locked
/// exclusively: the days of its records shared, a listing's own day
/// exclusively.
fn days_to_lock(batch: &Batch) -> (Vec<NaiveDate>, Vec<bool>) {
    let mut days = batch.days();
    if batch.as_of().is_some() {
        if let Err(at) = days.binary_search(&batch.day()) {
            days.insert(at, batch.day());
        }
    }
    let exclusive = days
        .iter()
        .map(|d| batch.as_of().is_some() && *d == batch.day())
        .collect();
    (days, exclusive)
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

/// What a listing's key costs in a statement beyond its bytes.
const KEY_OVERHEAD: usize = 16;

/// A listing's keys cut into consecutive ranges, each sent in one statement
/// of at most `bytes` bytes of keys: `[from, to)` of the key space (`None`:
/// unbounded) and the listing's keys inside it. The ranges cover the whole
/// key space, in key order, so that every live row of the day is judged by
/// exactly one statement, and a day of millions of keys never builds one
/// message near Postgres' 1 GiB limit.
#[derive(Debug)]
struct KeyRanges<'a> {
    rest: &'a [Record],
    bytes: usize,
    started: bool,
}

/// One range of [`KeyRanges`].
#[derive(Debug, PartialEq)]
struct KeyRange<'a> {
    from: Option<&'a str>,
    to: Option<&'a str>,
    keys: Vec<&'a str>,
}

impl<'a> KeyRanges<'a> {
    fn new(records: &'a [Record], bytes: usize) -> Self {
        Self {
            rest: records,
            bytes,
            started: false,
        }
    }
}

impl<'a> Iterator for KeyRanges<'a> {
    type Item = KeyRange<'a>;

    fn next(&mut self) -> Option<KeyRange<'a>> {
        if self.started && self.rest.is_empty() {
            return None;
        }
        let from = match self.started {
            false => None,
            true => self.rest.first().map(Record::key),
        };
        self.started = true;
        let mut size = 0;
        let mut len = 0;
        for record in self.rest {
            size += record.key().len() + KEY_OVERHEAD;
            if len > 0 && size > self.bytes {
                break;
            }
            len += 1;
        }
        let (range, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(KeyRange {
            from,
            to: rest.first().map(Record::key),
            keys: range.iter().map(Record::key).collect(),
        })
    }
}

fn into_record(row: &Row) -> Result<Record> {
    let key: String = row.try_get(0).map_err(pg_error)?;
    let event_date: NaiveDate = row.try_get(1).map_err(pg_error)?;
    let value: String = row.try_get(2).map_err(pg_error)?;
    let updated_at: DateTime<Utc> = row.try_get(3).map_err(pg_error)?;
    let deleted: bool = row.try_get(4).map_err(pg_error)?;
    if deleted {
        // The table's CHECK keeps a tombstone's value empty.
        Record::tombstone(key, event_date, updated_at)
    } else {
        Record::new(key, event_date, value, updated_at)
    }
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

    fn ranges(records: &[Record], bytes: usize) -> Vec<(Option<&str>, Option<&str>, usize)> {
        KeyRanges::new(records, bytes)
            .map(|r| (r.from, r.to, r.keys.len()))
            .collect()
    }

    #[test]
    fn key_ranges_cover_the_key_space_in_order() {
        // Keys "0000".."0006": 4 bytes each, 20 with the overhead.
        let r = records(&[1; 7]);
        let per_key = 4 + KEY_OVERHEAD;
        assert_eq!(ranges(&r, 7 * per_key), [(None, None, 7)]);
        assert_eq!(
            ranges(&r, 3 * per_key),
            [
                (None, Some("0003"), 3),
                (Some("0003"), Some("0006"), 3),
                (Some("0006"), None, 1),
            ]
        );
        // A key larger than a range travels alone.
        assert_eq!(
            ranges(&r[..2], 1),
            [(None, Some("0001"), 1), (Some("0001"), None, 1)]
        );
        // An empty listing still covers the whole day.
        assert_eq!(ranges(&[], 100), [(None, None, 0)]);
        let keys: Vec<&str> = KeyRanges::new(&r, per_key).flat_map(|r| r.keys).collect();
        assert_eq!(keys, r.iter().map(Record::key).collect::<Vec<_>>());
    }

    #[test]
    fn a_record_larger_than_a_chunk_travels_alone() {
        let r = records(&[10, 1_000, 10, 10]);
        assert_eq!(lengths(&r, 100, 2 * cost(10)), [1, 1, 2]);
        let chunks: Vec<_> = Chunks::new(&r, 100, 1).collect();
        assert_eq!(chunks.concat(), r, "every record, in order, once");
    }
}
