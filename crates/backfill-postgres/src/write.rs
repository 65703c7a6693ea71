//! The one write path, [`apply_day`]: a day's pages (a batch is one page)
//! in one transaction, in five steps: lock the days and read whether they
//! have watermarks, merge the pages, tombstone what a listing lacks, keep
//! history (when the table does), write the ledger row.

use std::cmp::Ordering;
use std::future::{poll_fn, Future};
use std::ops::Range;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::Poll;

use backfill_core::adapter::check_value_sizes;
use backfill_core::columns::{ColumnValue, Columns};
use backfill_core::{Counts, DayWrite, Error, Record, Result, RunId, SyncedDay};
use chrono::{DateTime, NaiveDate, Utc};
use futures_util::{SinkExt as _, StreamExt};
use sha2::{Digest as _, Sha256};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::private::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::{Row, Statement};

use crate::error::{pg_error, pool_error};
use crate::slices::{KeyRanges, Slice, Slices};
use crate::sql::Statements;
use crate::typed::{self, Param};
use crate::{BACKEND, MAX_VALUE_BYTES};

type Transaction<'a> = deadpool_postgres::Transaction<'a>;

/// How many subtransactions with a transaction id an apply may open: those
/// of the savepoints around its COPYs ([`write_page`]). A backend caches
/// the ids of its open subtransactions in shared memory, 64 of them
/// (`PGPROC_MAX_CACHED_SUBXIDS`); a RELEASEd savepoint's id stays there
/// until the top transaction ends (only an aborted one leaves). Past 64 the
/// cache overflows and, while the apply's transaction is open, every other
/// session's snapshot is marked overflowed: each visibility check of a
/// recent row then reads `pg_subtrans` (measured on PostgreSQL 15: 64
/// released savepoints cost another session's scan no `pg_subtrans`
/// access, 65 cost two per row it meets).
pub(crate) const MAX_SUBTRANSACTIONS: usize = 64;

/// Applies a day in one transaction, page by page, in key order (a batch
/// is one page).
///
/// 1. [`lock_days`]: the days whose watermark the records read (shared) or
///    the listing raises (exclusive) are locked in date order before
///    anything is read or written, and whether any of them has a watermark
///    (and whether the day was ever synced) is read once they are held.
/// 2. Each page ([`Writes::page`]): its values are checked against
///    [`MAX_VALUE_BYTES`], then it is written slice by slice, COPY or
///    merge. Keys are unique across the day's pages, so each page's counts
///    are exact on their own and no page changes what another finds.
/// 3. A listing ([`Unlisted`]) of a day with live rows tombstones the
///    rows it lacks in the same statements as it writes its records: each
///    page first reads, without a lock, the keys of the day's live rows it
///    lacks in the key range it closes (after the previous page's last key
///    up to and including its own last key; after the last page, the rest
///    of the key space), and each slice of the page writes its records and
///    those keys of its range as their own tombstones in one upsert, in key
///    order. So a listing takes its rows in one ordered pass, as a merge
///    does, and no two writers can wait for each other crosswise. The
///    guard is asked last, with the rows tombstoned and the day's live rows
///    before that (those counted now plus those tombstoned): the very
///    numbers a batch had when it tombstoned after its one page.
/// 4. [`keep_history`], when the table keeps history: the day's versions
///    the table does not hold (stale, buried, or of an instant history
///    holds), and what a listing lacked, after every row of the records
///    table is written. (The rows a page's writes replaced went to history
///    right after that page, [`keep_moved`].)
/// 5. [`write_ledger`]: the day's ledger row, last, in the same
///    transaction.
///
/// Any error, the guard's refusal included, returns with the transaction
/// uncommitted: dropping it rolls back, and nothing of the day is written.
/// So does dropping the future.
pub(crate) async fn apply_day(store: Writer<'_>, mut day: DayWrite) -> Result<Counts> {
    let PageSize { rows, bytes } = store.pages;
    // Each page's values are checked as it is read; the first page before a
    // connection is even taken, so a batch's bad value sends nothing.
    let mut page = next_page(&mut day, rows, bytes)?;
    let sql = store.sql;
    let mut client = store
        .pool
        .get()
        .await
        .map_err(|e| pool_error(e, store.server))?;
    let tx = client.transaction().await.map_err(pg_error)?;

    // 1. A batch of one statement's records, not a listing, has its stored
    // rows digested in the same round trip (if the ledger says it was
    // applied before).
    let digested = page.as_deref().filter(|records| {
        day.as_of().is_none() && Slices::new(records, &[], rows, bytes).nth(1).is_none()
    });
    // The plan setting is sent first: the statements after it are planned
    // under it, without waiting for its answer.
    let (planned, locked) = join2(
        tx.batch_execute(CUSTOM_PLANS),
        lock_days(&tx, sql, &day, digested),
    )
    .await;
    planned.map_err(pg_error)?;
    let Locked {
        marked,
        synced,
        same_batch,
        same_rows,
    } = locked?;
    // A listing of a day with live rows: rows only leave the day while its
    // lock is held (a record of the day needs its lock), so one without any
    // has nothing to tombstone, now or later in the transaction.
    let mut unlisted = match day.as_of() {
        Some(as_of) => Unlisted::new(&tx, sql, day.day(), as_of, bytes).await?,
        None => None,
    };
    let mut writes = Writes {
        // A day with a listing watermark may bury a record, and a listing's
        // tombstones go with its records, both of which only the merge
        // does: no COPY then.
        copy: match marked || unlisted.is_some() {
            true => None,
            false => Some((
                CopyChecks {
                    range_empty: tx
                        .prepare_cached(&sql.key_range_empty)
                        .await
                        .map_err(pg_error)?,
                    keys_absent: tx
                        .prepare_cached(&sql.keys_absent)
                        .await
                        .map_err(pg_error)?,
                },
                tx.prepare_cached(&sql.copy_in).await.map_err(pg_error)?,
            )),
        },
        merge: tx.prepare_cached(&sql.merge).await.map_err(pg_error)?,
        day_digest: match same_batch && same_rows.is_none() {
            true => Some(tx.prepare_cached(&sql.day_digest).await.map_err(pg_error)?),
            false => None,
        },
        same_page: same_rows,
        // A day synced before, re-fetched: most of its records are
        // usually its stored rows. Not where a watermark may bury a record
        // or a listing tombstones, nor when the table keeps history: the
        // merge decides those.
        in_place: match synced && !marked && unlisted.is_none() && sql.history.is_none() {
            true => Some(InPlace {
                rows: sql.day_rows.clone(),
                update: tx.prepare_cached(&sql.in_place).await.map_err(pg_error)?,
            }),
            false => None,
        },
        list: match &unlisted {
            Some(u) => Some(Listing {
                list: tx.prepare_cached(&sql.list).await.map_err(pg_error)?,
                unlist: tx.prepare_cached(&sql.unlist).await.map_err(pg_error)?,
                replaced: match &sql.history {
                    Some(h) => Some(tx.prepare_cached(&h.unlisting).await.map_err(pg_error)?),
                    None => None,
                },
                day: day.day(),
                as_of: u.as_of,
            }),
            None => None,
        },
        copy_first: !synced,
        rows,
        bytes,
        subtransactions: 0,
        columns: Arc::clone(store.columns),
        displaced: Displaced::default(),
    };

    // 2. and 3. The pages, in key order, each with its share of a
    // listing's tombstones.
    let mut counts = Counts::default();
    let mut first = true;
    // A day of one page (a batch) kept for history, which reads the pages
    // of a longer day again, and what each page's write found.
    let mut only_page = None;
    let mut kinds = Vec::new();
    while let Some(records) = page {
        // The day's only page (a batch's): all of the day's records.
        let whole_day = (std::mem::take(&mut first) && day.is_done()).then(|| day.day());
        // The next page is read (a streamed day's: merged from its
        // temporary files) on the blocking pool while the server writes
        // this one. A batch is one page: its "next" is at once `None`.
        // Whether this page is the day's last (every page read), so that
        // its ranges run to the end of the key space.
        let last = day.is_done();
        let reading = match last {
            true => Err(day),
            false => Ok(tokio::task::spawn_blocking(move || {
                let next = next_page(&mut day, rows, bytes);
                (day, next)
            })),
        };
        let lacked = match &mut unlisted {
            Some(unlisted) => unlisted.page(&tx, &records, last).await?,
            None => Vec::new(),
        };
        let before = counts;
        let copied = writes
            .page(&tx, &records, &lacked, whole_day, &mut counts)
            .await?;
        if let Some(history) = &sql.history {
            keep_moved(&tx, history, &mut writes).await?;
            let unchanged = counts.unchanged - before.unchanged == records.len() as u64;
            kinds.push(match (copied, unchanged) {
                (true, _) => PageKind::Copied,
                (false, true) => PageKind::Unchanged,
                (false, false) => PageKind::Other,
            });
        }
        match (&sql.history, whole_day) {
            (Some(_), Some(_)) => only_page = Some(records),
            _ => free_apart(records),
        }
        let (back, next) = match reading {
            Err(day) => (day, None),
            Ok(reading) => {
                let (day, next) = reading.await.map_err(|e| {
                    Error::backend(BACKEND, false, format!("reading the next page: {e}"))
                })?;
                (day, next?)
            }
        };
        day = back;
        page = next;
    }
    if let Some(unlisted) = unlisted {
        // The rest of the key space, after the last listed key.
        let lacked = unlisted.rest(&tx).await?;
        writes.page(&tx, &[], &lacked, None, &mut counts).await?;
        if let Some(history) = &sql.history {
            keep_moved(&tx, history, &mut writes).await?;
        }
        let live_now: i64 = tx
            .query_one(&sql.live, &[&day.day()])
            .await
            .map_err(pg_error)?
            .get(0);
        // The day's live rows before the tombstones: each tombstoned row
        // was one of them, and nothing else of the day changed since.
        day.check_replace(counts.unlisted, live_now as u64 + counts.unlisted)?;
    }

    // 4.
    if let Some(history) = &sql.history {
        let pages = HistoryPages {
            only: only_page,
            kinds,
            rows,
            bytes,
        };
        let mut buried = std::mem::take(&mut writes.displaced.buried);
        buried.sort_unstable();
        day = keep_history(&tx, history, day, &pages, (store.columns, &buried)).await?;
    }

    // 5.
    write_ledger(&tx, sql, day.day(), &day.synced(counts)).await?;
    tx.commit().await.map_err(pg_error)?;
    Ok(counts)
}

/// Records from which a page is freed on the blocking pool.
const FREED_APART: usize = 1024;

/// Drops a written page: from [`FREED_APART`] records, on the runtime's
/// blocking pool, since freeing a day's records (two allocations each) is
/// work the task that drives the job's other days need not wait for.
fn free_apart(records: Vec<Record>) {
    if records.len() >= FREED_APART {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn_blocking(move || drop(records));
        }
    }
}

/// What a page's write found, for history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageKind {
    /// Every record copied in: none of its keys was stored, so history
    /// holds none of its instants unless a purge moved a key's row there.
    Copied,
    /// Every record identical to its stored row: history needs nothing of
    /// it, but for a tombstone whose row a listing made (history holds the
    /// live version of that instant, which a delivered tombstone
    /// supersedes).
    Unchanged,
    /// Anything else: each version judged against history.
    Other,
}

/// The day's pages as history reads them again: a day of one page kept
/// (`only`), else read again from the day; what each page's write found;
/// the store's page bounds.
struct HistoryPages {
    only: Option<Vec<Record>>,
    kinds: Vec<PageKind>,
    rows: usize,
    bytes: usize,
}

/// The rows a page's writes replaced, into history (unless it holds their
/// instants), right after the page: the page's rows are locked by this
/// transaction, so no other writer moves the same row.
async fn keep_moved(
    tx: &Transaction<'_>,
    sql: &crate::history::HistoryStatements,
    writes: &mut Writes,
) -> Result<()> {
    if writes.displaced.moved.is_empty() {
        return Ok(());
    }
    let mut moved = std::mem::take(&mut writes.displaced.moved);
    moved.sort_unstable_by(|a, b| a.key().cmp(b.key()));
    let statement = tx.prepare_cached(&sql.moved).await.map_err(pg_error)?;
    let flat = typed_rows_lenient(&writes.columns, &moved);
    let fields = RecordArrays::new(moved.iter());
    let arrays = typed::arrays(writes.columns.len(), &flat);
    let mut params = fields.params();
    params.extend(arrays.iter().map(|a| a as &(dyn ToSql + Sync)));
    tx.execute(&statement, &params).await.map_err(pg_error)?;
    Ok(())
}

/// History's share of an apply, after every record of the day is merged
/// (and the rows it replaced kept): the day's pages read again, and the
/// versions of each that history must hold written in key order
/// (`HistoryStatements::insert`): nothing for a page copied in unless
/// history holds one of its instants, only the tombstones of a page
/// whose records were all unchanged; and, for a listing, the day's
/// versions of the page's key range that the listing lacks marked absent
/// from its instant; then the listing's instant kept. Each version's first
/// lacking listing is found from its day's listings, read once (the day
/// locks keep them as they are).
///
/// After the merge, so that an apply takes every lock on the records
/// table (in key order, page after page) before any of these on history
/// (in key order again). A version history holds already is not even
/// locked, so a re-run waits on no one here. A listing's marks touch only
/// its own day's versions, which no other writer changes while the
/// listing holds the day's lock.
async fn keep_history(
    tx: &Transaction<'_>,
    sql: &crate::history::HistoryStatements,
    mut day: DayWrite,
    pages: &HistoryPages,
    (columns, buried): (&Columns, &[String]),
) -> Result<DayWrite> {
    let (rows, bytes) = (pages.rows, pages.bytes);
    let insert = tx.prepare_cached(&sql.insert).await.map_err(pg_error)?;
    let listings = read_listings(tx, sql, day.days()).await?;
    let lacked = match day.as_of() {
        Some(as_of) => Some((
            tx.prepare_cached(&sql.lacked).await.map_err(pg_error)?,
            tx.prepare_cached(&sql.lacked_live)
                .await
                .map_err(pg_error)?,
            day.day(),
            as_of,
        )),
        None => None,
    };
    let held = match pages.kinds.contains(&PageKind::Copied) {
        true => Some(tx.prepare_cached(&sql.held).await.map_err(pg_error)?),
        false => None,
    };
    let mut page = match &pages.only {
        Some(page) => Some(page.clone()),
        None => {
            let (back, first) = blocking(day, rows, bytes, true).await?;
            day = back;
            first
        }
    };
    let mut after: Option<String> = None;
    let mut to_the_end = false;
    let mut kinds = pages.kinds.iter();
    while let Some(records) = page {
        let keys: Vec<&str> = records.iter().map(Record::key).collect();
        let instants: Vec<DateTime<Utc>> = records.iter().map(Record::updated_at).collect();
        let judged: Vec<&Record> = match (kinds.next(), &held) {
            (Some(PageKind::Unchanged), _) => records.iter().filter(|r| r.is_deleted()).collect(),
            (Some(PageKind::Copied), Some(held)) => {
                let any: bool = tx
                    .query_one(held, &[&keys, &instants])
                    .await
                    .map_err(pg_error)?
                    .get(0);
                match any {
                    true => records.iter().collect(),
                    false => Vec::new(),
                }
            }
            _ => records.iter().collect(),
        };
        if !judged.is_empty() {
            insert_versions(tx, &insert, &judged, (&listings, buried), columns).await?;
        }
        let last = day.is_done() || pages.only.is_some();
        if let Some((lacked, lacked_live, listed, as_of)) = &lacked {
            let upto = (!last).then(|| keys.last().copied()).flatten();
            let params: [&(dyn ToSql + Sync); 6] = [listed, as_of, &after, &upto, &keys, &instants];
            tx.execute(lacked, &params).await.map_err(pg_error)?;
            tx.execute(lacked_live, &params).await.map_err(pg_error)?;
            after = keys.last().map(|k| (*k).to_owned());
            to_the_end |= last;
        }
        page = match last {
            true => None,
            false => {
                let (back, next) = blocking(day, rows, bytes, false).await?;
                day = back;
                next
            }
        };
    }
    if let Some((lacked, lacked_live, listed, as_of)) = &lacked {
        if !to_the_end {
            // A listing of no records, or the key space after its last.
            let none: &[&str] = &[];
            let no_instants: &[DateTime<Utc>] = &[];
            let params: [&(dyn ToSql + Sync); 6] =
                [listed, as_of, &after, &None::<&str>, &none, &no_instants];
            tx.execute(lacked, &params).await.map_err(pg_error)?;
            tx.execute(lacked_live, &params).await.map_err(pg_error)?;
        }
        let listing = tx.prepare_cached(&sql.listing).await.map_err(pg_error)?;
        tx.execute(&listing, &[listed, as_of])
            .await
            .map_err(pg_error)?;
    }
    Ok(day)
}

/// `HistoryStatements::insert` of `records` (in key order), each with its
/// first lacking listing from `listings`, and whether its key is among
/// the `buried` (sorted).
async fn insert_versions(
    tx: &Transaction<'_>,
    insert: &Statement,
    records: &[&Record],
    (listings, buried): (&Listings, &[String]),
    columns: &Columns,
) -> Result<()> {
    let was_buried: Vec<bool> = records
        .iter()
        .map(|r| buried.binary_search_by(|k| k.as_str().cmp(r.key())).is_ok())
        .collect();
    let absent_from: Vec<Option<DateTime<Utc>>> = records
        .iter()
        .map(|r| {
            let instants = listings.get(&r.event_date())?;
            let at = instants.partition_point(|l| *l < r.updated_at());
            instants.get(at).copied()
        })
        .collect();
    let flat = typed_rows(columns, records.iter().copied())?;
    let fields = RecordArrays::new(records.iter().copied());
    let arrays = typed::arrays(columns.len(), &flat);
    let mut params = fields.params();
    params.extend([&absent_from as &(dyn ToSql + Sync), &was_buried]);
    params.extend(arrays.iter().map(|a| a as &(dyn ToSql + Sync)));
    tx.execute(insert, &params).await.map_err(pg_error)?;
    Ok(())
}

/// Each day's listing instants, in order.
type Listings = std::collections::HashMap<NaiveDate, Vec<DateTime<Utc>>>;

/// The listing instants of each of `days`, in order.
async fn read_listings(
    tx: &Transaction<'_>,
    sql: &crate::history::HistoryStatements,
    days: &[NaiveDate],
) -> Result<Listings> {
    let mut listings: std::collections::HashMap<NaiveDate, Vec<DateTime<Utc>>> =
        std::collections::HashMap::new();
    if days.is_empty() {
        return Ok(listings);
    }
    let read = tx
        .prepare_cached(&sql.listings_of_days)
        .await
        .map_err(pg_error)?;
    for row in tx.query(&read, &[&days]).await.map_err(pg_error)? {
        listings
            .entry(row.get::<_, NaiveDate>(0))
            .or_default()
            .push(row.get(1));
    }
    Ok(listings)
}

/// The day's next page, or (`rewind`) its first again, read on the
/// blocking pool (a streamed day's pages come from temporary files).
async fn blocking(
    mut day: DayWrite,
    rows: usize,
    bytes: usize,
    rewind: bool,
) -> Result<(DayWrite, Option<Vec<Record>>)> {
    let (day, page) = tokio::task::spawn_blocking(move || {
        let page = match rewind {
            true => day.rewind().and_then(|_| next_page(&mut day, rows, bytes)),
            false => next_page(&mut day, rows, bytes),
        };
        (day, page)
    })
    .await
    .map_err(|e| Error::backend(BACKEND, false, format!("reading a page again: {e}")))?;
    Ok((day, page?))
}

/// What the write path needs of its store, and nothing else.
pub(crate) struct Writer<'a> {
    /// The store's pool, and where it connects (`host:port`) for messages.
    pub(crate) pool: &'a deadpool_postgres::Pool,
    pub(crate) server: Option<&'a str>,
    /// The table's statements.
    pub(crate) sql: &'a Statements,
    /// The table's typed columns.
    pub(crate) columns: &'a Arc<Columns>,
    /// The store's page and slice bounds.
    pub(crate) pages: PageSize,
}

/// How much of a streamed day the store writes at a time, and how large a
/// statement's slice of it is: at most `rows` records and about `bytes` of
/// keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageSize {
    pub(crate) rows: usize,
    pub(crate) bytes: usize,
}

/// What step 1 read once the days were locked.
#[derive(Debug, Clone, Copy, Default)]
struct Locked {
    /// Whether any locked day has a listing watermark.
    marked: bool,
    /// Whether the apply's own day was synced before (its ledger holds a
    /// success).
    synced: bool,
    /// Whether the day's ledger holds the digest of this very batch: the
    /// same records were applied before, so its rows are likely as they
    /// are ([`Writes::page`] checks that first).
    same_batch: bool,
    /// For a batch digested with the ledger read (one statement's records
    /// of its own day, no listing): whether its stored rows are exactly
    /// its records, as [`same_rows`] tells (`false` where the ledger
    /// holds another digest). `None`: not asked.
    same_rows: Option<bool>,
}

/// The day's next page, its values checked against [`MAX_VALUE_BYTES`]
/// (reading may block on the local disk: the job's temporary files, as
/// `DayWrite` documents).
fn next_page(day: &mut DayWrite, rows: usize, bytes: usize) -> Result<Option<Vec<Record>>> {
    let page = day.next_page(rows, bytes)?;
    if let Some(page) = &page {
        check_value_sizes(page, MAX_VALUE_BYTES)?;
    }
    Ok(page)
}

/// Step 1: locks the days an apply reads or raises the watermark of, and
/// reads whether any of them has a watermark and whether the day was
/// synced before, in one round trip; with `digested` (the batch, when it is
/// one statement's records and not a listing's), also whether its stored
/// rows are exactly its records, if the ledger holds its digest.
async fn lock_days(
    tx: &Transaction<'_>,
    sql: &Statements,
    day: &DayWrite,
    digested: Option<&[Record]>,
) -> Result<Locked> {
    let (days, exclusive) = days_to_lock(day.days().to_vec(), day.day(), day.as_of().is_some());
    if days.is_empty() {
        return Ok(Locked::default());
    }
    let lock = tx.prepare_cached(&sql.lock_days).await.map_err(pg_error)?;
    let watermarked = tx
        .prepare_cached(&sql.watermarked)
        .await
        .map_err(pg_error)?;
    // A batch of the day's own records only, whole from the start: its
    // digest is known, and its records are all the day's.
    let batch = (day.is_done() && day.days() == [day.day()]).then(|| day.digest().to_string());
    let digested = match (&batch, digested) {
        (Some(_), Some(records)) => match (records.first(), records.last()) {
            (Some(first), Some(last)) => Some((
                records,
                (first.key(), last.key()),
                tx.prepare_cached(&sql.batch_digest)
                    .await
                    .map_err(pg_error)?,
            )),
            _ => None,
        },
        _ => None,
    };
    // Whether the ledger read found the batch's digest, once answered: the
    // batch is hashed here only then (a new day's is not).
    let same_batch = OnceLock::new();
    let (locked, (read, same_rows)) = join2(
        tx.execute(&lock, &[&days, &exclusive]),
        // Statements of their own, after the locks: their snapshots are
        // taken once they are held.
        join2(
            async {
                let row = tx
                    .query_one(&watermarked, &[&days, &day.day(), &batch])
                    .await?;
                let read = Locked {
                    marked: row.try_get(0)?,
                    synced: row.try_get(1)?,
                    same_batch: row.try_get(2)?,
                    same_rows: None,
                };
                let _ = same_batch.set(read.same_batch);
                Ok::<_, tokio_postgres::Error>(read)
            },
            async {
                let Some((records, (first, last), statement)) = &digested else {
                    return Ok(None);
                };
                let on = day.day();
                let params: [&(dyn ToSql + Sync); 4] = [&on, first, last, &batch];
                let digested = tx.query_one(statement, &params);
                Ok(Some(
                    same_as_digested(digested, on, records, &same_batch).await?,
                ))
            },
        ),
    )
    .await;
    // The errors in the order the statements ran: a failed one fails
    // those after it.
    locked.map_err(pg_error)?;
    let read = read.map_err(pg_error)?;
    Ok(Locked {
        same_rows: same_rows?,
        ..read
    })
}

/// Step 3: which of the listed day's live rows a listing lacks, range by
/// range as the pages are written ([`Writes`] tombstones them).
struct Unlisted {
    /// `Statements::unlisted`.
    read: Statement,
    day: NaiveDate,
    as_of: DateTime<Utc>,
    /// The store's page bound in bytes, for a range's keys.
    bytes: usize,
    /// The last key of the ranges so far; `None` before the first.
    after: Option<String>,
    /// Whether a page's ranges reached the end of the key space.
    to_the_end: bool,
}

impl Unlisted {
    /// `None` when the day has no live row: a listing of it has nothing
    /// to tombstone.
    async fn new(
        tx: &Transaction<'_>,
        sql: &Statements,
        day: NaiveDate,
        as_of: DateTime<Utc>,
        bytes: usize,
    ) -> Result<Option<Self>> {
        let any: bool = tx
            .query_one(&sql.any_live, &[&day])
            .await
            .map_err(pg_error)?
            .get(0);
        if !any {
            return Ok(None);
        }
        Ok(Some(Self {
            read: tx.prepare_cached(&sql.unlisted).await.map_err(pg_error)?,
            day,
            as_of,
            bytes,
            after: None,
            to_the_end: false,
        }))
    }

    /// The keys, in order, of the day's live rows (not newer than `as_of`)
    /// the listing lacks in the key range `page` closes (to the end of the
    /// key space for the `last` page). Read without a lock: the write that
    /// tombstones them judges each again.
    async fn page(
        &mut self,
        tx: &Transaction<'_>,
        page: &[Record],
        last: bool,
    ) -> Result<Vec<String>> {
        let mut lacked = Vec::new();
        for range in KeyRanges::new(page, self.bytes, self.after.as_deref(), last) {
            lacked.extend(self.read(tx, range.after, range.upto, &range.keys).await?);
        }
        if let Some(key) = page.last() {
            self.after = Some(key.key().to_owned());
        }
        self.to_the_end |= last && !page.is_empty();
        Ok(lacked)
    }

    /// After the last page: the keys lacked that no page's ranges reached
    /// (a listing of no records: the whole day).
    async fn rest(&self, tx: &Transaction<'_>) -> Result<Vec<String>> {
        match self.to_the_end {
            true => Ok(Vec::new()),
            false => self.read(tx, self.after.as_deref(), None, &[]).await,
        }
    }

    async fn read(
        &self,
        tx: &Transaction<'_>,
        after: Option<&str>,
        upto: Option<&str>,
        keys: &[&str],
    ) -> Result<Vec<String>> {
        let rows = tx
            .query(&self.read, &[&self.day, &self.as_of, &after, &upto, &keys])
            .await
            .map_err(pg_error)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}

/// A listing's statements for [`Writes`]: `Statements::list` and
/// `Statements::unlist`, with the listed day and its `as_of`.
#[derive(Debug)]
struct Listing {
    list: Statement,
    unlist: Statement,
    /// With history: the rows `unlist` is about to turn into tombstones,
    /// as they are (`HistoryStatements::unlisting`).
    replaced: Option<Statement>,
    day: NaiveDate,
    as_of: DateTime<Utc>,
}

/// Step 4: the day's ledger row, last: synced now, by this run, with these
/// counts, its failure cleared, and a listing's watermark raised to its
/// `as_of` if lower. One statement, committed with the rows.
async fn write_ledger(
    tx: &Transaction<'_>,
    sql: &Statements,
    date: NaiveDate,
    synced: &SyncedDay,
) -> Result<()> {
    let ledger = tx.prepare_cached(&sql.synced).await.map_err(pg_error)?;
    let c = &synced.counts;
    let (fetch_ms, write_ms) = synced.timing.map(|t| t.as_millis()).unzip();
    let params: &[&(dyn ToSql + Sync)] = &[
        &date,
        &synced.as_of,
        &synced.at,
        &synced.run_id.as_ref().map(RunId::as_str),
        &synced.mode.as_str(),
        &synced.digest.to_string(),
        &count(c.inserted),
        &count(c.updated),
        &count(c.unchanged),
        &count(c.stale),
        &count(c.deleted),
        &count(c.unlisted),
        &count(c.collapsed),
        &fetch_ms,
        &write_ms,
    ];
    // The timing's parameters only where the statement writes it.
    let params = if sql.timings { params } else { &params[..13] };
    tx.execute(&ledger, params).await.map_err(pg_error)?;
    Ok(())
}

/// A count as the ledger stores it (`bigint`).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How many times a slice's raced rows are merged again before giving up.
/// The second pass cannot race (the first locked every raced row); more
/// are only a guard against a bug looping forever.
const MAX_MERGE_PASSES: u32 = 4;

/// Every statement of an apply planned for its own arguments: the merge's
/// best plan depends on how many records a slice holds and how many rows
/// its day has stored, which a plan cached for any arguments cannot know.
const CUSTOM_PLANS: &str = "SET LOCAL plan_cache_mode = force_custom_plan";

/// The most statements a page may take and still be merged against its
/// day's stored rows read whole (by the index on `event_date`) rather than
/// probed key by key: each statement reads the whole day again.
const DAY_SCAN_SLICES: usize = 2;

/// The savepoint before a page's first COPY.
const SAVEPOINT: &str = "SAVEPOINT backfill_page";
/// Undoes a page's writes since its first COPY after a lost race.
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT backfill_page";
/// Ends the savepoint once the page is written.
const RELEASE_SAVEPOINT: &str = "RELEASE SAVEPOINT backfill_page";

/// Awaits two futures together, so that requests on one connection are
/// sent back to back (tokio-postgres pipelines the requests of futures
/// polled concurrently) and answered in one round trip.
async fn join2<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
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
        match (ra.take(), rb.take()) {
            (Some(a), Some(b)) => Poll::Ready((a, b)),
            (a, b) => {
                (ra, rb) = (a, b);
                Poll::Pending
            }
        }
    })
    .await
}

/// The prepared statements that write an apply's pages, and the
/// subtransactions it opened so far.
#[derive(Debug)]
struct Writes {
    /// What tells a slice may be copied, and `Statements::copy_in`, unless
    /// a day of the apply has a listing watermark.
    copy: Option<(CopyChecks, Statement)>,
    /// `Statements::merge`.
    merge: Statement,
    /// `Statements::day_digest`, when the day's ledger holds the batch's
    /// digest: a slice is then first compared with the day's stored rows
    /// as one digest ([`same_rows`]).
    day_digest: Option<Statement>,
    /// Whether the batch, one slice, is its stored rows, as step 1 read it
    /// ([`Locked::same_rows`]); taken by its slice.
    same_page: Option<bool>,
    /// `Statements::day_rows` and `Statements::in_place`, for a day synced
    /// before, with no watermark, no listing and no history: a slice is
    /// first compared with the day's stored rows, record by record
    /// ([`Writes::in_place`]).
    in_place: Option<InPlace>,
    /// A listing's statements, when it has rows to tombstone.
    list: Option<Listing>,
    /// Whether a slice is copied without first checking that none of its
    /// keys is stored: while the day was never synced before and no COPY
    /// of the apply has met a stored key.
    copy_first: bool,
    /// The store's slice bounds.
    rows: usize,
    bytes: usize,
    /// Savepoints taken so far (see [`MAX_SUBTRANSACTIONS`]).
    subtransactions: usize,
    /// The store's typed columns, each record's read from its value.
    columns: Arc<Columns>,
    /// With history: what the page's writes displaced so far; else
    /// always empty.
    displaced: Displaced,
}

/// What an apply's writes displaced from the table, for history.
#[derive(Debug, Default)]
struct Displaced {
    /// The rows the writes replaced, as they were, since history last
    /// took them ([`keep_moved`]).
    moved: Vec<Record>,
    /// The keys of the apply's records the table took as tombstones (a
    /// listing's watermark buried them): history keeps the live version.
    buried: Vec<String>,
}

impl Displaced {
    /// How much of each there is, to go back to.
    fn lengths(&self) -> (usize, usize) {
        (self.moved.len(), self.buried.len())
    }

    /// Back to `lengths`.
    fn truncate(&mut self, (moved, buried): (usize, usize)) {
        self.moved.truncate(moved);
        self.buried.truncate(buried);
    }
}

impl Writes {
    /// Writes one page (sorted by key, keys above every earlier page's),
    /// slice by slice in key order, and adds its counts.
    ///
    /// A slice none of whose keys is stored ([`CopyChecks::none_stored`]:
    /// a day's first sync, a backfill of days the table does not hold yet,
    /// whether the keys are laid out by day or spread like UUIDs) is
    /// copied in whole with binary `COPY`, in key order: the floor's own
    /// speed, where `INSERT … ON CONFLICT` pays a speculative insertion per
    /// row. No record of such a slice has a stored version to be compared
    /// with, and the COPY cannot overwrite anything: the primary key
    /// refuses a key another writer inserted after the check, with
    /// `unique_violation`, after waiting for that writer if it has not
    /// committed yet. Every other slice is merged.
    ///
    /// A day never synced before holds no rows of its own, so its slices
    /// are copied without the check (which costs a probe per key when the
    /// keys interleave with the table's): a stored key the COPY meets
    /// after all — another writer's, or a record first stored under
    /// another date — is handled exactly as a lost race, below, and the
    /// apply's later pages check first.
    ///
    /// That `unique_violation` aborts the statement, so the page's first
    /// COPY is preceded by a savepoint: on a lost race the page rolls back
    /// to it, its counts go back to what they were there, and every slice
    /// of the page from there on is merged instead, which judges the other
    /// writer's keys by version like any stored row. Only the page's own
    /// writes since the savepoint are undone, and they are all in memory:
    /// a streamed day's earlier pages, never to be read again, stay as
    /// written. Their counts stay exact too: a key they copied was absent
    /// when the COPY inserted it (the primary key saw to that), and a
    /// writer that inserts it after waits for this transaction and then
    /// finds it stored. A batch is one page: one savepoint per apply.
    ///
    /// A listing's `lacked` keys (sorted, none of them the page's, all in
    /// the key range the page closes) are written with the records as
    /// their own tombstones, each slice holding those of its key range
    /// (a page of no records: tombstones alone).
    ///
    /// Each savepoint costs one subtransaction id, and the apply's
    /// transaction keeps them all until it ends: past
    /// [`MAX_SUBTRANSACTIONS`] (a streamed day's 65th page with a COPY), the
    /// pages are still copied, without a savepoint, rather than slow every
    /// other session's snapshots. A race lost there fails the apply with a
    /// retryable error: the whole day rolls back, and its retry (a job
    /// retries it) finds the other writer's keys stored and merges them.
    ///
    /// Returns whether every record of the page was copied in: none of
    /// its keys was stored.
    async fn page(
        &mut self,
        tx: &Transaction<'_>,
        page: &[Record],
        lacked: &[String],
        whole_day: Option<NaiveDate>,
        counts: &mut Counts,
    ) -> Result<bool> {
        let slices: Vec<Slice<'_>> = Slices::new(page, lacked, self.rows, self.bytes).collect();
        let mut all_copied = !page.is_empty();
        // A day written in a few statements is merged against its stored
        // rows read by one scan each; a longer one probes key by key, so
        // no statement reads the whole day again.
        let day_scan = whole_day.filter(|_| slices.len() <= DAY_SCAN_SLICES);
        // Since the page's savepoint: the slice it was taken before, and
        // the counts then.
        let mut saved: Option<(usize, Counts, (usize, usize))> = None;
        // A re-fetched day's stored rows, read at its first slice (`None`
        // inside: too many to read).
        let mut day_rows: Option<Option<DayRows>> = None;
        for (
            i,
            &Slice {
                records: slice,
                lacked,
            },
        ) in slices.iter().enumerate()
        {
            if let Some(listing) = &self.list {
                let tombstones = (slice, lacked);
                list_records(
                    tx,
                    listing,
                    &self.merge,
                    tombstones,
                    day_scan,
                    &self.columns,
                    (counts, &mut self.displaced),
                )
                .await?;
                all_copied = false;
                continue;
            }
            // The batch applied before: every record may be its stored
            // row, which one digest of the slice's range of the day shows
            // without sending a value.
            let same = match (self.same_page.take(), &self.day_digest, day_scan) {
                // The batch, one slice, digested with the ledger read.
                (Some(same), _, Some(_)) => same,
                (None, Some(digest), Some(day)) => same_rows(tx, digest, day, slice).await?,
                _ => false,
            };
            if same {
                counts.unchanged += slice.len() as u64;
                all_copied = false;
                continue;
            }
            // A day re-fetched: only what changed is written.
            if let (Some(in_place), Some(day)) = (self.in_place.clone(), day_scan) {
                if self.subtransactions < MAX_SUBTRANSACTIONS {
                    if day_rows.is_none() {
                        day_rows = Some(DayRows::read(tx, &in_place.rows, day, page).await?);
                    }
                    if let Some(Some(stored)) = &day_rows {
                        let stored = (day, stored);
                        if self
                            .in_place(tx, &in_place.update, stored, slice, counts)
                            .await?
                        {
                            all_copied = false;
                            continue;
                        }
                    }
                }
            }
            // Copied unchecked only where a stored key costs no more than
            // a lost race: under a savepoint this page holds or may take.
            let unchecked =
                self.copy_first && (saved.is_some() || self.subtransactions < MAX_SUBTRANSACTIONS);
            let copy = match &self.copy {
                Some((checks, copy)) => {
                    (unchecked || checks.none_stored(tx, slice).await?).then_some(copy)
                }
                None => None,
            };
            let Some(copy) = copy else {
                let out = (&mut *counts, &mut self.displaced);
                merge_records(tx, &self.merge, slice, day_scan, &self.columns, out).await?;
                all_copied = false;
                continue;
            };
            if saved.is_none() && self.subtransactions < MAX_SUBTRANSACTIONS {
                tx.batch_execute(SAVEPOINT).await.map_err(pg_error)?;
                self.subtransactions += 1;
                saved = Some((i, *counts, self.displaced.lengths()));
            }
            match copy_slice(tx, copy, slice, &self.columns).await {
                Ok(copied) => count_copied(slice, copied, counts)?,
                // A value that does not fit its columns refuses the record:
                // the COPY is abandoned, and the whole day rolls back.
                Err(CopyFailure::Refused(e)) => return Err(e),
                Err(CopyFailure::Failed(e)) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                    // Past the savepoints an apply may take, a lost race
                    // aborts the whole transaction: the day is rolled back
                    // and, being retryable, tried again, when the check
                    // sees the other writer's keys and merges them.
                    let Some((from, before, moved)) = saved.take() else {
                        return Err(Error::backend(
                            BACKEND,
                            true,
                            format!(
                                "another writer inserted keys of this day while they were \
                                 copied in (past the first {MAX_SUBTRANSACTIONS} pages, which \
                                 recover in place); the day was rolled back whole and may be \
                                 retried: {e}"
                            ),
                        ));
                    };
                    // The aborted subtransaction leaves the id cache; the
                    // savepoint, still there, holds the merges instead.
                    tx.batch_execute(ROLLBACK_TO_SAVEPOINT)
                        .await
                        .map_err(pg_error)?;
                    // Stored keys (another writer's, or the day's own under
                    // another date): the apply's later pages check first.
                    self.copy_first = false;
                    *counts = before;
                    self.displaced.truncate(moved);
                    all_copied = false;
                    for slice in &slices[from..] {
                        let slice = slice.records;
                        let out = (&mut *counts, &mut self.displaced);
                        merge_records(tx, &self.merge, slice, day_scan, &self.columns, out).await?;
                    }
                    saved = Some((from, *counts, self.displaced.lengths()));
                    break;
                }
                Err(CopyFailure::Failed(e)) => return Err(pg_error(e)),
            }
        }
        if saved.is_some() {
            tx.batch_execute(RELEASE_SAVEPOINT)
                .await
                .map_err(pg_error)?;
        }
        Ok(all_copied)
    }
}

impl Writes {
    /// Writes `slice` (sorted by key) of a day synced before by what its
    /// records are against the day's stored rows (`stored`, read once for
    /// the page): each record equal to its stored row is counted unchanged
    /// and each older one stale, with nothing sent or written for either.
    /// If the rest all replace stored rows of the day, they are updated in
    /// place (`Statements::in_place`), each row found by its `ctid`, only
    /// if it is still the version read; else, or if another writer changed
    /// one of those rows since it was read, the rest are merged as any
    /// slice is.
    ///
    /// Deciding on rows read before the write is exact: a row's version
    /// only ever grows, so a record that is not newer than the row read is
    /// not newer than the row at any later instant either. The update
    /// runs under a savepoint: when it misses a row, it is undone (its row
    /// locks with it) before the merge, which then takes the slice's locks
    /// in key order, in one pass, as every write does.
    ///
    /// Returns `false` (nothing done) when the day has no stored row in
    /// the slice's key range: records of keys the day never held, for the
    /// COPY or the merge.
    async fn in_place(
        &mut self,
        tx: &Transaction<'_>,
        update: &Statement,
        (day, stored): (NaiveDate, &DayRows),
        slice: &[Record],
        counts: &mut Counts,
    ) -> Result<bool> {
        let (Some(first), Some(last)) = (slice.first(), slice.last()) else {
            return Ok(false);
        };
        let rows = stored.range(first.key(), last.key());
        if rows.is_empty() {
            return Ok(false);
        }
        // The records to write, in key order; those of them replacing a
        // row of the day, with it; and whether any has no row of the day.
        let mut to_write: Vec<&Record> = Vec::new();
        let mut replacing: Vec<(&Record, &StoredRow)> = Vec::new();
        let mut elsewhere = false;
        let mut rows = rows.iter().peekable();
        for r in slice {
            let key = r.key().as_bytes();
            while rows.next_if(|s| stored.key(s) < key).is_some() {}
            let row = rows
                .peek()
                .filter(|s| stored.key(s) == key && r.event_date() == day);
            let Some(&row) = row else {
                elsewhere = true;
                to_write.push(r);
                continue;
            };
            match stored.cmp_version(row, r) {
                Ordering::Less => {
                    to_write.push(r);
                    replacing.push((r, row));
                }
                Ordering::Equal => counts.unchanged += 1,
                Ordering::Greater => counts.stale += 1,
            }
        }
        if to_write.is_empty() {
            return Ok(true);
        }
        if !elsewhere {
            self.subtransactions += 1;
            // Sent together: the update is planned after the settings.
            let (begun, written) = join2(
                tx.batch_execute(IN_PLACE_BEGIN),
                update_in_place(tx, update, (day, &replacing), &self.columns),
            )
            .await;
            begun.map_err(pg_error)?;
            let written = written?;
            if written == replacing.len() as u64 {
                tx.batch_execute(IN_PLACE_END).await.map_err(pg_error)?;
                for (r, row) in &replacing {
                    match (r.is_deleted(), row.deleted) {
                        (true, _) => counts.deleted += 1,
                        (false, true) => counts.inserted += 1,
                        (false, false) => counts.updated += 1,
                    }
                }
                return Ok(true);
            }
            tx.batch_execute(IN_PLACE_UNDONE).await.map_err(pg_error)?;
        }
        let out = (&mut *counts, &mut self.displaced);
        merge_until_settled(
            tx,
            &self.merge,
            slice,
            to_write,
            Some(day),
            &self.columns,
            out,
        )
        .await?;
        Ok(true)
    }
}

/// The statements of [`Writes::in_place`].
#[derive(Debug, Clone)]
struct InPlace {
    /// `Statements::day_rows`.
    rows: [String; 3],
    /// `Statements::in_place`.
    update: Statement,
}

/// A day's stored rows as `Statements::day_rows` sends them, sorted by
/// key: each row's fields are ranges of the bytes received.
#[derive(Debug, Default)]
struct DayRows {
    bytes: Vec<u8>,
    rows: Vec<StoredRow>,
}

/// A stored row of [`DayRows`].
#[derive(Debug)]
struct StoredRow {
    key: Range<usize>,
    value: Range<usize>,
    /// Microseconds since 2000-01-01, as Postgres sends a `timestamptz`.
    updated_at: i64,
    deleted: bool,
    /// Where it lies (`ctid`) and the transaction that wrote it (`xmin`),
    /// as Postgres sends them.
    at: Tid,
    seen: Xid,
}

impl DayRows {
    /// Day `day`'s stored rows (`Statements::day_rows`, its text), to
    /// compare `page` with: `None` when they are too many or too large to
    /// hold at once (more than twice the page's records and a hundred, or
    /// more than [`DAY_ROWS_BYTES`]), for the merge to compare.
    async fn read(
        tx: &Transaction<'_>,
        text: &[String; 3],
        day: NaiveDate,
        page: &[Record],
    ) -> Result<Option<Self>> {
        let limit = 2 * page.len() + 100;
        let copy = format!(
            "{}{}{} LIMIT {}{}",
            text[0],
            day.format("%Y-%m-%d"),
            text[1],
            limit + 1,
            text[2]
        );
        let Some(bytes) = copy_bytes(tx, &copy).await? else {
            return Ok(None);
        };
        let mut day = Self::parse(bytes).map_err(|e| {
            Error::backend(
                BACKEND,
                false,
                format!("reading the day's stored rows: {e}"),
            )
        })?;
        if day.rows.len() > limit {
            return Ok(None);
        }
        let Self { bytes, rows } = &mut day;
        // By bytes, as the primary key's "C" collation orders keys.
        rows.sort_unstable_by(|a, b| bytes[a.key.clone()].cmp(&bytes[b.key.clone()]));
        Ok(Some(day))
    }

    /// The rows of binary `COPY` output of `Statements::day_rows`' six
    /// columns, in the order received.
    fn parse(bytes: Vec<u8>) -> std::result::Result<Self, String> {
        const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
        if bytes.get(..SIGNATURE.len()) != Some(SIGNATURE) {
            return Err("not binary COPY output".into());
        }
        let mut read = Cursor {
            bytes: &bytes,
            at: SIGNATURE.len(),
        };
        // Flags, then the header extension's length and the extension.
        read.int(4)?;
        let extension = read.int(4)?;
        read.take(extension as usize)?;
        let mut rows = Vec::new();
        loop {
            match read.int(2)? {
                // The trailer: -1 in 16 bits.
                0xffff => break,
                6 => {}
                n => return Err(format!("a row of {n} fields")),
            }
            let key = read.field(None)?;
            let value = read.field(None)?;
            let updated_at = read.field(Some(8))?;
            let deleted = read.field(Some(1))?;
            let tid = read.field(Some(6))?;
            let xid = read.field(Some(4))?;
            rows.push(StoredRow {
                key,
                value,
                updated_at: i64::from_be_bytes(bytes[updated_at].try_into().expect("8 bytes")),
                deleted: bytes[deleted.start] != 0,
                at: Tid(bytes[tid].try_into().expect("6 bytes")),
                seen: Xid(bytes[xid].try_into().expect("4 bytes")),
            });
        }
        Ok(Self { bytes, rows })
    }

    /// The rows with keys from `first` to `last`.
    fn range(&self, first: &str, last: &str) -> &[StoredRow] {
        let from = self
            .rows
            .partition_point(|r| self.key(r) < first.as_bytes());
        let to = self
            .rows
            .partition_point(|r| self.key(r) <= last.as_bytes());
        &self.rows[from..to.max(from)]
    }

    fn key(&self, row: &StoredRow) -> &[u8] {
        &self.bytes[row.key.clone()]
    }

    /// `row`'s version against `record`'s, of the same key and day, as
    /// [`Record::cmp_version`] orders them.
    fn cmp_version(&self, row: &StoredRow, record: &Record) -> Ordering {
        row.updated_at
            .cmp(&micros_since_2000(record.updated_at()))
            .then_with(|| row.deleted.cmp(&record.is_deleted()))
            .then_with(|| self.bytes[row.value.clone()].cmp(record.value().as_bytes()))
    }
}

/// A reader of binary `COPY` output.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// The next `n` bytes' range.
    fn take(&mut self, n: usize) -> std::result::Result<Range<usize>, String> {
        let range = self.at..self.at.saturating_add(n);
        match self.bytes.get(range.clone()) {
            Some(_) => {
                self.at = range.end;
                Ok(range)
            }
            None => Err("cut short".into()),
        }
    }

    /// The next `n` bytes (at most 4) as a big-endian integer.
    fn int(&mut self, n: usize) -> std::result::Result<u32, String> {
        let range = self.take(n)?;
        Ok(self.bytes[range]
            .iter()
            .fold(0, |acc, &b| acc << 8 | u32::from(b)))
    }

    /// The next field's bytes, which must be `width` long if given (a
    /// `NULL`, length -1, is never sent: every column is `NOT NULL`).
    fn field(&mut self, width: Option<usize>) -> std::result::Result<Range<usize>, String> {
        let n = self.int(4)? as usize;
        if n > i32::MAX as usize || width.is_some_and(|w| n != w) {
            return Err(format!("a field of {n} bytes"));
        }
        self.take(n)
    }
}

/// All that the `COPY … TO STDOUT` statement `copy` sends; `None` past
/// [`DAY_ROWS_BYTES`] (the rest is read and dropped by the connection).
async fn copy_bytes(tx: &Transaction<'_>, copy: &str) -> Result<Option<Vec<u8>>> {
    let stream = tx.copy_out(copy).await.map_err(pg_error)?;
    let mut stream = pin!(stream);
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.map_err(pg_error)?);
        if bytes.len() > DAY_ROWS_BYTES {
            return Ok(None);
        }
    }
    Ok(Some(bytes))
}

/// The most bytes of stored rows [`DayRows::read`] holds at once.
const DAY_ROWS_BYTES: usize = 128 << 20;

/// `at` as Postgres sends a `timestamptz`: microseconds since 2000-01-01
/// UTC (a record's instant is whole microseconds, years 1 to 9999).
fn micros_since_2000(at: DateTime<Utc>) -> i64 {
    const EPOCH_2000: i64 = 946_684_800_000_000;
    at.timestamp_micros() - EPOCH_2000
}

/// A row's `ctid` as Postgres sends it: its block and its offset.
#[derive(Debug, Clone, Copy)]
struct Tid([u8; 6]);

/// A transaction id (`xid`) as Postgres sends it.
#[derive(Debug, Clone, Copy)]
struct Xid([u8; 4]);

/// Sends a system column's value as the bytes Postgres sent for it.
macro_rules! sent_as_received {
    ($name:ident, $ty:expr) => {
        impl ToSql for $name {
            fn to_sql(
                &self,
                _: &Type,
                out: &mut BytesMut,
            ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
                out.extend_from_slice(&self.0);
                Ok(IsNull::No)
            }

            fn accepts(ty: &Type) -> bool {
                *ty == $ty
            }

            tokio_postgres::types::to_sql_checked!();
        }
    };
}

sent_as_received!(Tid, Type::TID);
sent_as_received!(Xid, Type::XID);

/// Runs `Statements::in_place` on `replacing`, in key order; returns the
/// rows it updated.
async fn update_in_place(
    tx: &Transaction<'_>,
    update: &Statement,
    (day, replacing): (NaiveDate, &[(&Record, &StoredRow)]),
    columns: &Columns,
) -> Result<u64> {
    let records = replacing.iter().map(|(r, _)| *r);
    let fields = RecordArrays::new(records.clone());
    let at: Vec<Tid> = replacing.iter().map(|(_, s)| s.at).collect();
    let seen: Vec<Xid> = replacing.iter().map(|(_, s)| s.seen).collect();
    let flat = typed_rows(columns, records)?;
    let arrays = typed::arrays(columns.len(), &flat);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &at,
        &fields.keys,
        &fields.values,
        &fields.instants,
        &fields.deleted,
        &day,
        &seen,
    ];
    params.extend(arrays.iter().map(|a| a as &(dyn ToSql + Sync)));
    tx.execute(update, &params).await.map_err(pg_error)
}

/// Before `Statements::in_place`: a savepoint to undo it to, and no plan
/// but a nested loop from the arrays, in their (key) order, to each row
/// by its `ctid`, whatever the table's size or the session's settings
/// (undone with the savepoint, or by [`IN_PLACE_END`]).
const IN_PLACE_BEGIN: &str = "SAVEPOINT backfill_in_place; \
    SET LOCAL enable_nestloop = on; SET LOCAL enable_tidscan = on; \
    SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; \
    SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off; \
    SET LOCAL enable_indexonlyscan = off; SET LOCAL enable_bitmapscan = off";

/// After `Statements::in_place` wrote every row: the planner's settings
/// back to the session's defaults.
const IN_PLACE_END: &str = "SET LOCAL enable_nestloop TO DEFAULT; \
    SET LOCAL enable_tidscan TO DEFAULT; SET LOCAL enable_hashjoin TO DEFAULT; \
    SET LOCAL enable_mergejoin TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT; \
    SET LOCAL enable_indexscan TO DEFAULT; SET LOCAL enable_indexonlyscan TO DEFAULT; \
    SET LOCAL enable_bitmapscan TO DEFAULT; RELEASE SAVEPOINT backfill_in_place";

/// After `Statements::in_place` missed a row another writer changed: its
/// writes, row locks and settings undone.
const IN_PLACE_UNDONE: &str =
    "ROLLBACK TO SAVEPOINT backfill_in_place; RELEASE SAVEPOINT backfill_in_place";

/// The statements that tell whether a slice's keys are all absent:
/// `Statements::key_range_empty` and `Statements::keys_absent`.
#[derive(Debug)]
struct CopyChecks {
    range_empty: Statement,
    keys_absent: Statement,
}

impl CopyChecks {
    /// Whether no key of `records` (sorted) is stored: first whether their
    /// key range holds no stored row (one index descent: keys laid out by
    /// day), else key by key (keys that interleave with the table's), which
    /// stops at the first stored key.
    async fn none_stored(&self, tx: &Transaction<'_>, records: &[Record]) -> Result<bool> {
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return Ok(false);
        };
        let empty: bool = tx
            .query_one(&self.range_empty, &[&first.key(), &last.key()])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)?;
        if empty {
            return Ok(true);
        }
        // A few keys first: a slice of a day synced before usually finds
        // one of them stored, without sending every key.
        let keys: Vec<&str> = records.iter().map(Record::key).collect();
        if keys.len() > SAMPLE_KEYS && !self.absent(tx, &keys[..SAMPLE_KEYS]).await? {
            return Ok(false);
        }
        self.absent(tx, &keys).await
    }

    /// Whether none of `keys` is stored.
    async fn absent(&self, tx: &Transaction<'_>, keys: &[&str]) -> Result<bool> {
        tx.query_one(&self.keys_absent, &[&keys])
            .await
            .map_err(pg_error)?
            .try_get(0)
            .map_err(pg_error)
    }
}

/// Whether every record of `slice` (sorted by key, all of `day`) is its
/// stored row: whether the rows of `day` in the slice's key range are
/// exactly the slice, by their count and the SHA-256 `Statements::day_digest`
/// computes, here of the records. Equal digests of the same bytes mean the
/// same rows (SHA-256 has no known collision), so such a slice needs no
/// write: each record is unchanged, as the merge would find it. Anything
/// else — a changed record, a key stored under another day, a row of the
/// range the slice lacks — differs, and the slice is merged as usual.
async fn same_rows(
    tx: &Transaction<'_>,
    statement: &Statement,
    day: NaiveDate,
    slice: &[Record],
) -> Result<bool> {
    let (Some(first), Some(last)) = (slice.first(), slice.last()) else {
        return Ok(false);
    };
    same_as_digested(
        tx.query_one(statement, &[&day, &first.key(), &last.key()]),
        day,
        slice,
        &OnceLock::from(true),
    )
    .await
}

/// Whether the rows `digested` counts and hashes (a row of
/// `Statements::day_digest` or `batch_digest`) are exactly `records`
/// (sorted by key, all of `day`). The statement is sent first; the records
/// are hashed here while the server reads and hashes its rows, a buffer at
/// a time, given up as soon as its answer counts other than the records (a
/// day whose ledger holds another digest answers at once, counting none).
/// `worth` says whether they are worth hashing at all (unset: not known
/// yet, asked again when woken; `false`: never, the answer cannot match).
async fn same_as_digested<F>(
    digested: F,
    day: NaiveDate,
    records: &[Record],
    worth: &OnceLock<bool>,
) -> Result<bool>
where
    F: Future<Output = std::result::Result<Row, tokio_postgres::Error>>,
{
    let mut digested = pin!(digested);
    // The server's digest, once its count is the records'.
    let mut stored: Option<Vec<u8>> = None;
    let mut hashing = SliceDigest::new(day, records);
    let mut digest: Option<Option<[u8; 32]>> = None;
    poll_fn(|cx| loop {
        if stored.is_none() {
            if let Poll::Ready(row) = digested.as_mut().poll(cx) {
                let row = row.map_err(pg_error)?;
                let count: i64 = row.try_get(0).map_err(pg_error)?;
                if count as usize != records.len() {
                    return Poll::Ready(Ok(false));
                }
                stored = Some(row.try_get(1).map_err(pg_error)?);
            }
        }
        match (&stored, digest) {
            (Some(stored), Some(digest)) => {
                return Poll::Ready(Ok(digest.is_some_and(|d| stored[..] == d[..])));
            }
            // Hashed: the answer's waker is registered.
            (None, Some(_)) => return Poll::Pending,
            (stored, None) => match (worth.get(), stored) {
                (Some(false), _) => digest = Some(None),
                // Not known yet: woken by whatever tells.
                (None, None) => return Poll::Pending,
                _ => {
                    if let Hashing::Done(done) = hashing.step() {
                        digest = Some(done);
                    }
                }
            },
        }
    })
    .await
}

/// The SHA-256 `Statements::day_digest` computes of stored rows, of
/// records (sorted by key), a buffer at a time ([`SliceDigest::step`]).
struct SliceDigest<'a> {
    day: NaiveDate,
    records: std::slice::Iter<'a, Record>,
    hash: Sha256,
    /// The records' bytes gathered, hashed a buffer at a time: the same
    /// bytes in the same order, without a call into the hash for each of
    /// a record's five pieces.
    bytes: Vec<u8>,
    /// Whether a record was gathered: the next is preceded by a zero byte.
    started: bool,
}

/// How far a [`SliceDigest`] is.
enum Hashing {
    More,
    /// The digest; `None` if a record is not of the day or its
    /// `updated_at` cannot be sent.
    Done(Option<[u8; 32]>),
}

impl<'a> SliceDigest<'a> {
    /// Bytes gathered before they are hashed: one step's.
    const BUFFER: usize = 64 << 10;

    fn new(day: NaiveDate, records: &'a [Record]) -> Self {
        Self {
            day,
            records: records.iter(),
            hash: Sha256::new(),
            bytes: Vec::with_capacity(Self::BUFFER),
            started: false,
        }
    }

    /// Hashes the next buffer of records.
    fn step(&mut self) -> Hashing {
        // Postgres' epoch (2000-01-01) in Unix microseconds: `updated_at`
        // as tokio-postgres sends it, microseconds since then.
        const EPOCH_MICROS: i64 = 946_684_800_000_000;
        for r in self.records.by_ref() {
            if r.event_date() != self.day {
                return Hashing::Done(None);
            }
            let Some(micros) = r.updated_at().timestamp_micros().checked_sub(EPOCH_MICROS) else {
                return Hashing::Done(None);
            };
            let bytes = &mut self.bytes;
            if std::mem::replace(&mut self.started, true) {
                bytes.push(0);
            }
            bytes.extend_from_slice(r.key().as_bytes());
            bytes.push(0);
            bytes.extend_from_slice(&micros.to_be_bytes());
            bytes.push(u8::from(r.is_deleted()));
            bytes.extend_from_slice(r.value().as_bytes());
            if bytes.len() >= Self::BUFFER {
                self.hash.update(&*bytes);
                bytes.clear();
                return Hashing::More;
            }
        }
        self.hash.update(&self.bytes);
        self.bytes.clear();
        Hashing::Done(Some(std::mem::take(&mut self.hash).finalize().into()))
    }
}

/// The keys [`CopyChecks::none_stored`] looks up before all of a slice's.
const SAMPLE_KEYS: usize = 64;

/// Adds a copied slice's counts: every record inserted, as itself.
fn count_copied(records: &[Record], copied: u64, counts: &mut Counts) -> Result<()> {
    if copied as usize != records.len() {
        return Err(Error::backend(
            BACKEND,
            false,
            format!("COPY wrote {copied} rows of {}", records.len()),
        ));
    }
    let tombstones = records.iter().filter(|r| r.is_deleted()).count() as u64;
    counts.inserted += copied - tombstones;
    counts.deleted += tombstones;
    Ok(())
}

/// The days an apply locks, in date order, and whether each is locked
/// exclusively: the days of its records shared, a listing's own day
/// exclusively.
fn days_to_lock(
    mut days: Vec<NaiveDate>,
    day: NaiveDate,
    listing: bool,
) -> (Vec<NaiveDate>, Vec<bool>) {
    if listing {
        if let Err(at) = days.binary_search(&day) {
            days.insert(at, day);
        }
    }
    let exclusive = days.iter().map(|d| listing && *d == day).collect();
    (days, exclusive)
}

/// How [`copy_slice`] failed.
enum CopyFailure {
    /// A record's value does not fit the table's typed columns: the COPY
    /// was abandoned before its end.
    Refused(Error),
    /// The server refused the COPY (a stored key among others).
    Failed(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for CopyFailure {
    fn from(e: tokio_postgres::Error) -> Self {
        CopyFailure::Failed(e)
    }
}

/// Copies `records` into the table in their order with binary `COPY`;
/// returns the number of rows copied.
///
/// Each record's typed columns are read just before its row is written,
/// while the server takes in the rows before it: reading them costs no
/// round trip of its own. A record whose value does not fit them drops
/// the COPY unfinished, which the server then abandons.
async fn copy_slice(
    tx: &Transaction<'_>,
    copy: &Statement,
    records: &[Record],
    columns: &Columns,
) -> std::result::Result<u64, CopyFailure> {
    let sink = tx.copy_in(copy).await?;
    let mut sink = pin!(sink);
    let mut types = vec![
        Type::TEXT,
        Type::DATE,
        Type::TEXT,
        Type::TIMESTAMPTZ,
        Type::BOOL,
    ];
    types.extend(columns.iter().map(|c| typed::pg_type(c.column_type())));
    let fields = i16::try_from(types.len()).map_err(|_| {
        CopyFailure::Refused(Error::backend(BACKEND, false, "too many columns to copy"))
    })?;
    let mut buf = BytesMut::with_capacity(COPY_CHUNK + (COPY_CHUNK >> 2));
    buf.extend_from_slice(COPY_HEADER);
    let mut typed = Vec::with_capacity(columns.len());
    for r in records {
        typed.clear();
        columns
            .extract_into(r, &mut typed)
            .map_err(CopyFailure::Refused)?;
        let (key, value) = (r.key(), r.value());
        let (date, at, deleted) = (r.event_date(), r.updated_at(), r.is_deleted());
        let own: [&(dyn ToSql + Sync); 5] = [&key, &date, &value, &at, &deleted];
        let cells = own
            .iter()
            .map(|&v| Cell::Own(v))
            .chain(typed.iter().map(|v| Cell::Typed(Param(v))));
        buf.extend_from_slice(&fields.to_be_bytes());
        for (cell, ty) in cells.zip(&types) {
            // The cell's length, written once its bytes are.
            let start = buf.len();
            buf.extend_from_slice(&[0; 4]);
            let len = match cell.to_sql_checked(ty, &mut buf).map_err(copy_refused)? {
                IsNull::Yes => -1,
                IsNull::No => i32::try_from(buf.len() - start - 4).map_err(copy_refused)?,
            };
            buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }
        if buf.len() >= COPY_CHUNK {
            sink.as_mut().send(buf.split().freeze()).await?;
        }
    }
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    sink.as_mut().send(buf.split().freeze()).await?;
    Ok(sink.finish().await?)
}

/// The bytes of a slice's binary `COPY` sent at a time: the server takes
/// each as one message, and the connection writes it in one go (the
/// driver's own writer sends every 4 KiB, a message and a wake-up of the
/// connection's task each).
const COPY_CHUNK: usize = 64 << 10;

/// Binary `COPY`'s header: its signature, no flags, no extension.
const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// A row's cell the driver could not encode: the record is refused.
fn copy_refused(e: impl std::fmt::Display) -> CopyFailure {
    CopyFailure::Refused(Error::backend(
        BACKEND,
        false,
        format!("encoding a row for COPY: {e}"),
    ))
}

/// A cell of a copied row: one of the table's own columns, or a typed
/// column's value (a row is written without being collected first).
#[derive(Debug)]
enum Cell<'a> {
    Own(&'a (dyn ToSql + Sync)),
    Typed(Param<'a>),
}

impl ToSql for Cell<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.to_sql_checked(ty, out)
    }

    /// Each cell's own value checks its type.
    fn accepts(_: &Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Cell::Own(v) => v.to_sql_checked(ty, out),
            Cell::Typed(v) => v.to_sql_checked(ty, out),
        }
    }
}

/// Records as the arrays the statements take first (`$1`–`$5`: keys,
/// dates, values, instants, tombstone flags).
struct RecordArrays<'r> {
    keys: Vec<&'r str>,
    dates: Vec<NaiveDate>,
    values: Vec<&'r str>,
    instants: Vec<DateTime<Utc>>,
    deleted: Vec<bool>,
}

impl<'r> RecordArrays<'r> {
    fn new(records: impl ExactSizeIterator<Item = &'r Record>) -> Self {
        let n = records.len();
        let mut arrays = Self {
            keys: Vec::with_capacity(n),
            dates: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
            instants: Vec::with_capacity(n),
            deleted: Vec::with_capacity(n),
        };
        for r in records {
            arrays.keys.push(r.key());
            arrays.dates.push(r.event_date());
            arrays.values.push(r.value());
            arrays.instants.push(r.updated_at());
            arrays.deleted.push(r.is_deleted());
        }
        arrays
    }

    /// `$1`–`$5`, for more to follow.
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.keys,
            &self.dates,
            &self.values,
            &self.instants,
            &self.deleted,
        ]
    }
}

/// Each record's typed columns, in the column order, one record after
/// another (empty when the store has none).
fn typed_rows<'r, I>(columns: &Columns, records: I) -> Result<Vec<ColumnValue>>
where
    I: IntoIterator<Item = &'r Record>,
    I::IntoIter: ExactSizeIterator,
{
    let records = records.into_iter();
    let mut typed = Vec::with_capacity(records.len() * columns.len());
    if !columns.is_empty() {
        for r in records {
            columns.extract_into(r, &mut typed)?;
        }
    }
    Ok(typed)
}

/// Each record's typed columns as [`typed_rows`] reads them, but `NULL`
/// for a record whose value does not fit them: a row the table held,
/// which may have been stored before its columns were declared.
fn typed_rows_lenient(columns: &Columns, records: &[Record]) -> Vec<ColumnValue> {
    let mut typed = Vec::with_capacity(records.len() * columns.len());
    if !columns.is_empty() {
        for r in records {
            match columns.extract(r) {
                Ok(values) => typed.extend(values),
                Err(_) => typed.extend(std::iter::repeat_n(ColumnValue::Null, columns.len())),
            }
        }
    }
    typed
}

/// Merges `slice` (sorted by key) with the conflict-handling merge and adds
/// its counts; merges the rows another writer raced past again, until none
/// is left.
async fn merge_records(
    tx: &Transaction<'_>,
    merge: &Statement,
    slice: &[Record],
    day_scan: Option<NaiveDate>,
    columns: &Columns,
    out: (&mut Counts, &mut Displaced),
) -> Result<()> {
    let pending: Vec<&Record> = slice.iter().collect();
    merge_until_settled(tx, merge, slice, pending, day_scan, columns, out).await
}

/// A listing's slice: its records and its `lacked` keys written together
/// by `Statements::list`, in key order, the tombstones counted as deleted
/// and unlisted. Rows another writer raced past were locked by that
/// statement and are judged again: records by the merge, tombstones by
/// `Statements::unlist` (a row that left the day meanwhile stays as the
/// other writer left it).
async fn list_records(
    tx: &Transaction<'_>,
    listing: &Listing,
    merge: &Statement,
    (slice, lacked): (&[Record], &[String]),
    day_scan: Option<NaiveDate>,
    columns: &Columns,
    (counts, displaced): (&mut Counts, &mut Displaced),
) -> Result<()> {
    let records: Vec<&Record> = slice.iter().collect();
    let keys: Vec<&str> = lacked.iter().map(String::as_str).collect();
    let tombstones = Tombstones {
        keys: &keys,
        day: listing.day,
        as_of: listing.as_of,
    };
    let statement = (&listing.list, Some(tombstones));
    let out = (&mut *counts, &mut *displaced);
    let raced = merge_slice(tx, statement, &records, day_scan, columns, out).await?;
    let (mut pending, mut unlisted) = (Vec::new(), Vec::new());
    for key in raced {
        match slice.binary_search_by(|r| r.key().cmp(key.as_str())) {
            Ok(i) => pending.push(&slice[i]),
            Err(_) => unlisted.push(key),
        }
    }
    if !unlisted.is_empty() {
        if let Some(replaced) = &listing.replaced {
            // Locked by the statement above: as they are until the
            // transaction ends.
            for row in tx
                .query(replaced, &[&unlisted, &listing.day, &listing.as_of])
                .await
                .map_err(pg_error)?
            {
                displaced.moved.push(Record::new(
                    row.get::<_, String>(0),
                    row.get::<_, NaiveDate>(1),
                    row.get::<_, String>(2),
                    row.get::<_, DateTime<Utc>>(3),
                )?);
            }
        }
        let n = tx
            .execute(&listing.unlist, &[&unlisted, &listing.day, &listing.as_of])
            .await
            .map_err(pg_error)?;
        counts.deleted += n;
        counts.unlisted += n;
    }
    merge_until_settled(
        tx,
        merge,
        slice,
        pending,
        day_scan,
        columns,
        (counts, displaced),
    )
    .await
}

/// Merges `pending` (records of `slice`, sorted by key) until no row is
/// left that another writer raced past.
async fn merge_until_settled<'r>(
    tx: &Transaction<'_>,
    merge: &Statement,
    slice: &'r [Record],
    mut pending: Vec<&'r Record>,
    day_scan: Option<NaiveDate>,
    columns: &Columns,
    (counts, displaced): (&mut Counts, &mut Displaced),
) -> Result<()> {
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
        let out = (&mut *counts, &mut *displaced);
        let raced = merge_slice(tx, (merge, None), &pending, day_scan, columns, out).await?;
        // Rows another writer committed after this statement's snapshot:
        // the upsert locked them and left them alone, so merging them again
        // sees them as they now are, for good.
        pending = raced
            .iter()
            .map(|key| {
                slice
                    .binary_search_by(|r| r.key().cmp(key.as_str()))
                    .map(|i| &slice[i])
                    .map_err(|_| Error::backend(BACKEND, false, "raced key not in batch"))
            })
            .collect::<Result<_>>()?;
    }
    Ok(())
}

/// A listing's lacked keys for `Statements::list`, with the listed day
/// and its `as_of`.
#[derive(Debug, Clone, Copy)]
struct Tombstones<'a> {
    keys: &'a [&'a str],
    day: NaiveDate,
    as_of: DateTime<Utc>,
}

/// Runs the merge statement (or a listing's, with its tombstones) on
/// `records` (sorted by key), adds its counts (and, with history, the rows
/// it replaced to `moved`) and returns the keys a concurrent writer raced
/// past, sorted.
async fn merge_slice(
    tx: &Transaction<'_>,
    (merge, tombstones): (&Statement, Option<Tombstones<'_>>),
    records: &[&Record],
    day_scan: Option<NaiveDate>,
    columns: &Columns,
    (counts, displaced): (&mut Counts, &mut Displaced),
) -> Result<Vec<String>> {
    let fields = RecordArrays::new(records.iter().copied());
    // One array per typed column, after the day scan's `$6`.
    let flat = typed_rows(columns, records.iter().copied())?;
    let arrays = typed::arrays(columns.len(), &flat);
    let mut params = fields.params();
    params.push(&day_scan);
    params.extend(arrays.iter().map(|a| a as &(dyn ToSql + Sync)));
    if let Some(t) = &tombstones {
        params.extend([&t.keys as &(dyn ToSql + Sync), &t.day, &t.as_of]);
    }
    let row = tx.query_one(merge, &params).await.map_err(pg_error)?;
    let count = |name: &str| row.get::<_, i64>(name) as u64;
    let unlisted = count("unlisted");
    counts.inserted += count("inserted");
    counts.updated += count("updated");
    counts.deleted += count("deleted") + unlisted;
    counts.unlisted += unlisted;
    counts.unchanged += count("unchanged");
    counts.stale += count("stale");
    // With history, the statement returns what it displaced.
    if row.columns().iter().any(|c| c.name() == "moved_keys") {
        let keys: Option<Vec<String>> = row.get("moved_keys");
        let dates: Option<Vec<NaiveDate>> = row.get("moved_dates");
        let values: Option<Vec<String>> = row.get("moved_values");
        let instants: Option<Vec<DateTime<Utc>>> = row.get("moved_instants");
        let deleted: Option<Vec<bool>> = row.get("moved_deleted");
        let moved = keys.into_iter().flatten().zip(values.into_iter().flatten());
        let stamps = dates
            .into_iter()
            .flatten()
            .zip(instants.into_iter().flatten());
        for (((key, value), (date, at)), deleted) in
            moved.zip(stamps).zip(deleted.into_iter().flatten())
        {
            displaced.moved.push(match deleted {
                true => Record::tombstone(key, date, at)?,
                false => Record::new(key, date, value, at)?,
            });
        }
        let buried: Option<Vec<String>> = row.get("buried_keys");
        displaced.buried.extend(buried.into_iter().flatten());
    }
    let mut raced: Vec<String> = row
        .get::<_, Option<Vec<String>>>("raced")
        .unwrap_or_default();
    raced.sort_unstable();
    Ok(raced)
}
