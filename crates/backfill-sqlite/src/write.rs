//! The one write, [`apply_day`]: a day's pages (a batch is one page) in
//! one `BEGIN IMMEDIATE` transaction, in four steps: read the watermarks,
//! merge the pages (each version new to history kept as it is merged,
//! when the table keeps history), tombstone what a listing lacks (and mark
//! what it lacked in history), write the ledger row.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use backfill_core::adapter::check_value_sizes;
use backfill_core::columns::Columns;
use backfill_core::{Counts, DayWrite, Error, Record, Result, RunId, SyncedDay};
use chrono::{DateTime, NaiveDate, Utc};
use rusqlite::types::Value;
use rusqlite::{
    params, params_from_iter, Connection, OptionalExtension, ToSql, TransactionBehavior,
};

use crate::error::backend;
use crate::sql::{Statements, LISTED_ADD, LISTED_CLEAR, LISTED_CREATE};
use crate::typed::{format_date, format_instant, sql_value};
use crate::BACKEND;

/// What [`apply_day`] writes with: the connection's statements and the
/// store's limits.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    pub(crate) sql: &'a Statements,
    pub(crate) max_value_bytes: usize,
    pub(crate) page: PageSize,
    /// Rows a listing's staging inserted and deleted (in `temp`, committed
    /// or not), which SQLite's `total_changes()` counts and
    /// [`SqliteStore::total_changes`](crate::SqliteStore::total_changes)
    /// does not.
    pub(crate) staged: &'a AtomicU64,
    /// Set once the caller stopped waiting (its future was dropped): the
    /// write rolls back at its next page or before committing.
    pub(crate) abandoned: &'a AtomicBool,
    /// The store's typed columns, each record's read from its value.
    pub(crate) columns: &'a Columns,
}

/// The write: one IMMEDIATE transaction (the write lock is taken up front,
/// so two writers never deadlock upgrading a read lock, and no watermark
/// can move under the day: SQLite has one writer at a time), rows in key
/// order, one page at a time.
///
/// 1. The watermark of each of the day's `event_date`s is read once (under
///    the write lock it cannot move; a subquery in every write cost 3× the
///    whole write).
/// 2. Each page ([`merge_page`]): its values are checked against the
///    length limit, then each record is merged and counted, and (when
///    the table keeps history) every record but one identical to its
///    stored row offered to history. A day of one page (a batch) that is
///    not a listing first finds its records equal to their stored rows, in
///    one ordered read of the day's rows ([`without_stored`]), and only
///    counts them. A listing merges every record and also stages the
///    page's keys and versions in [`LISTED`](crate::sql::LISTED).
///    Keys are unique across the day's pages, so a page's counts are exact
///    on their own and no page changes what another finds.
/// 3. A listing ([`unlist`]): the day's live rows, as every
///    page left them, are counted with those the whole listing lacks, the
///    guard asked, and the unlisted ones turned into their own tombstones
///    in one statement; history marks the day's versions the listing
///    lacked ([`keep_listing`]). SQLite has one writer at a time, so
///    history needs no order of its own.
/// 4. Last, the day's ledger row ([`DayWrite::synced`]): one upsert that
///    records the success, clears the failure and raises a listing's
///    watermark (only if higher). Last, so that of two concurrent applies
///    of a day the row ends as the last committer wrote it.
///
/// Any error, the guard's refusal included, drops the transaction
/// uncommitted: rusqlite rolls it back, and nothing of the day is written.
///
/// `first` is the day's first page, [`next_page`] read before the
/// connection was locked (for a batch, the whole day): its checks and typed
/// columns cost no time under the write lock.
pub(crate) fn apply_day(
    conn: &mut Connection,
    w: &Writer<'_>,
    day: &mut DayWrite,
    first: Option<Page>,
) -> Result<Counts> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    // 1.
    let watermarks = read_watermarks(&tx, w.sql, day.days())?;
    let listings = match &w.sql.history {
        Some(history) => read_listings(&tx, history, day.days())?,
        None => HashMap::new(),
    };
    let listing = day.as_of();
    let clear_listed = || -> Result<()> {
        let cleared = tx.execute(LISTED_CLEAR, []).map_err(backend)?;
        w.staged.fetch_add(cleared as u64, Relaxed);
        Ok(())
    };
    if listing.is_some() {
        tx.execute(LISTED_CREATE, []).map_err(backend)?;
        clear_listed()?;
    }
    // A day that is one page (a batch) is compared with its stored rows
    // before the merge; a streamed day's pages are not: each read would
    // pass over every row its earlier pages wrote.
    let one_page = day.is_done();
    let mut counts = Counts::default();
    let mut page = first;
    while let Some(this) = page {
        // 2. A day fetched again (a batch applied again, or a lookback) is
        // mostly its stored rows: those are found in one ordered read of
        // the day's rows and not merged. A listing stages every record's
        // key, and merges them all.
        let this = match listing.is_none() && one_page {
            true => without_stored(&tx, w.sql, day.day(), this, &mut counts)?,
            false => this,
        };
        merge_page(&tx, w, (&watermarks, &listings), &this, &mut counts)?;
        if listing.is_some() {
            stage_keys(&tx, w, &this.records)?;
        }
        page = next_page(w, day)?;
    }
    // 3.
    if let Some(as_of) = listing {
        let unlisted = unlist(&tx, w.sql, day, as_of)?;
        counts.deleted += unlisted;
        counts.unlisted = unlisted;
        if let Some(history) = &w.sql.history {
            keep_listing(&tx, history, day.day(), as_of)?;
        }
        clear_listed()?;
    }
    // 4.
    write_ledger(&tx, w.sql, day.day(), &day.synced(counts))?;
    if w.abandoned.load(Relaxed) {
        return Err(abandoned());
    }
    tx.commit().map_err(backend)?;
    Ok(counts)
}

/// How much of a streamed day the store writes at a time: at most `rows`
/// records and about `bytes` of keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageSize {
    pub(crate) rows: usize,
    pub(crate) bytes: usize,
}

impl Default for PageSize {
    fn default() -> Self {
        Self {
            rows: crate::DEFAULT_PAGE_ROWS,
            bytes: crate::DEFAULT_PAGE_BYTES,
        }
    }
}

/// A page of the day's records, checked against the length limit, with
/// each record's typed columns read from its value, one record after
/// another (empty when the store declares none).
#[derive(Debug)]
pub(crate) struct Page {
    records: Vec<Record>,
    typed: Vec<Value>,
    /// How many typed columns each record has in `typed`.
    columns: usize,
}

/// The day's next page, unless the caller stopped waiting: a value past
/// the length limit, or one that does not fit a typed column, refuses it
/// (and the whole day rolls back).
pub(crate) fn next_page(w: &Writer<'_>, day: &mut DayWrite) -> Result<Option<Page>> {
    if w.abandoned.load(Relaxed) {
        return Err(abandoned());
    }
    let Some(records) = day.next_page(w.page.rows, w.page.bytes)? else {
        return Ok(None);
    };
    check_value_sizes(&records, w.max_value_bytes)?;
    let n = w.columns.len();
    let mut typed = Vec::with_capacity(records.len() * n);
    if n > 0 {
        let mut values = Vec::with_capacity(n);
        for r in &records {
            w.columns.extract_into(r, &mut values)?;
            typed.extend(values.drain(..).map(sql_value));
        }
    }
    Ok(Some(Page {
        records,
        typed,
        columns: n,
    }))
}

/// The caller's future was dropped mid-write: the write rolls back.
fn abandoned() -> Error {
    Error::backend(
        BACKEND,
        false,
        "the call was dropped before the day was written; nothing of it was written",
    )
}

/// Stages a listing's page of keys in [`LISTED`](crate::sql::LISTED).
fn stage_keys(conn: &Connection, w: &Writer<'_>, page: &[Record]) -> Result<()> {
    let mut stage = conn.prepare_cached(LISTED_ADD).map_err(backend)?;
    for record in page {
        let instant = format_instant(record.updated_at());
        let added = stage
            .execute(params![record.key(), instant])
            .map_err(backend)?;
        w.staged.fetch_add(added as u64, Relaxed);
    }
    Ok(())
}

/// Every listing instant (as text, in order) of each day history was
/// read for.
type Listings = HashMap<NaiveDate, Vec<String>>;

/// The listing instants of each of `days`, read once under the write lock.
fn read_listings(
    conn: &Connection,
    sql: &crate::sql::HistoryStatements,
    days: &[NaiveDate],
) -> Result<Listings> {
    let mut read = conn.prepare_cached(&sql.listings_of_day).map_err(backend)?;
    let mut listings = HashMap::with_capacity(days.len());
    for &day in days {
        let instants = read
            .query_map([format_date(day)], |row| row.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
            .map_err(backend)?;
        if !instants.is_empty() {
            listings.insert(day, instants);
        }
    }
    Ok(listings)
}

/// The listing watermark of each day, as it is before this apply (which
/// raises its own day's last), read once per day under the write lock.
fn read_watermarks(
    conn: &Connection,
    sql: &Statements,
    days: &[NaiveDate],
) -> Result<HashMap<NaiveDate, Option<String>>> {
    let mut watermark = conn.prepare_cached(&sql.watermark).map_err(backend)?;
    let mut watermarks = HashMap::with_capacity(days.len());
    for &day in days {
        let mark: Option<Option<String>> = watermark
            .query_row([format_date(day)], |row| row.get(0))
            .optional()
            .map_err(backend)?;
        watermarks.insert(day, mark.flatten());
    }
    Ok(watermarks)
}

/// Whether `record` is `row` of [`Statements::day_range`] of `day` in
/// everything the merge reads: key, day, value, instant and flag.
fn is_its_row(record: &Record, day: NaiveDate, row: &rusqlite::Row<'_>) -> Result<bool> {
    let text =
        |i: usize| -> Result<Option<&str>> { Ok(row.get_ref(i).map_err(backend)?.as_str().ok()) };
    Ok(record.event_date() == day
        && text(0)? == Some(record.key())
        && text(1)? == Some(record.value())
        && text(2)? == Some(format_instant(record.updated_at()).as_str())
        && row.get_ref(3).map_err(backend)?.as_i64().ok() == Some(i64::from(record.is_deleted())))
}

/// How many of a page's first records [`without_stored`] compares before
/// it gives up on a page none of them equals.
const PROBE_RECORDS: usize = 256;

/// `page` without its records that equal their stored rows of `day`
/// (key, day, value, instant and flag), each counted unchanged: what the
/// merge would make of them, without a statement each. The day's rows in
/// the page's key range are read once, in key order, beside the page's
/// records, in key order too; in the write's transaction, so no other
/// writer changes them meanwhile.
fn without_stored(
    conn: &Connection,
    sql: &Statements,
    day: NaiveDate,
    page: Page,
    counts: &mut Counts,
) -> Result<Page> {
    let (Some(first), Some(last)) = (page.records.first(), page.records.last()) else {
        return Ok(page);
    };
    let mut read = conn.prepare_cached(&sql.day_range).map_err(backend)?;
    let mut rows = read
        .query(params![format_date(day), first.key(), last.key()])
        .map_err(backend)?;
    let mut row = rows.next().map_err(backend)?;
    let mut stored = vec![false; page.records.len()];
    let mut found = 0;
    for (i, record) in page.records.iter().enumerate() {
        // A page whose first records all differ from their rows (a day
        // rewritten upstream, a new day) is merged whole, read no further.
        if i == PROBE_RECORDS && found == 0 {
            return Ok(page);
        }
        // The rows before this record's key are of keys the page lacks.
        while let Some(r) = row {
            match r.get_ref(0).map_err(backend)?.as_str() {
                Ok(key) if key < record.key() => row = rows.next().map_err(backend)?,
                _ => break,
            }
        }
        let Some(r) = row else {
            break;
        };
        stored[i] = is_its_row(record, day, r)?;
        found += usize::from(stored[i]);
    }
    drop(rows);
    if found == 0 {
        return Ok(page);
    }
    counts.unchanged += found as u64;
    let n = page.columns;
    let mut typed = page.typed.into_iter();
    let mut kept = Page {
        records: Vec::with_capacity(page.records.len() - found),
        typed: Vec::with_capacity((page.records.len() - found) * n),
        columns: n,
    };
    for (record, stored) in page.records.into_iter().zip(stored) {
        let values = typed.by_ref().take(n);
        if stored {
            values.for_each(drop);
        } else {
            kept.records.push(record);
            kept.typed.extend(values);
        }
    }
    Ok(kept)
}

/// Merges one page's records, in key order, and counts what happens to
/// each. Each record is first offered to [`Statements::insert_absent`]: an
/// absent key is inserted — as itself, or as its own tombstone under the
/// watermark rule — in one statement, as fast as a bulk load. A stored
/// key's version is read to count what happens; a newer record goes to
/// [`Statements::update_older`], whose own WHERE compares the versions
/// again, and the two must agree. Identical and older records are not
/// written.
fn merge_page(
    conn: &Connection,
    w: &Writer<'_>,
    (watermarks, listings): (&HashMap<NaiveDate, Option<String>>, &Listings),
    page: &Page,
    counts: &mut Counts,
) -> Result<()> {
    let sql = w.sql;
    let mut insert = conn.prepare_cached(&sql.insert_absent).map_err(backend)?;
    let mut stored = conn.prepare_cached(&sql.get_version).map_err(backend)?;
    let mut update = conn.prepare_cached(&sql.update_older).map_err(backend)?;
    let mut history = match &sql.history {
        Some(h) => Some(conn.prepare_cached(&h.insert).map_err(backend)?),
        None => None,
    };
    let n = page.columns;
    for (i, record) in page.records.iter().enumerate() {
        let typed = &page.typed[i * n..(i + 1) * n];
        let date = format_date(record.event_date());
        let instant = format_instant(record.updated_at());
        let deleted = i64::from(record.is_deleted());
        let mark = watermarks
            .get(&record.event_date())
            .and_then(Option::as_deref);
        let own: [&dyn ToSql; 6] = [
            &record.key(),
            &date,
            &record.value(),
            &instant,
            &deleted,
            &mark,
        ];
        let values = || {
            params_from_iter(
                own.iter()
                    .copied()
                    .chain(typed.iter().map(|v| v as &dyn ToSql)),
            )
        };
        // What the statements' CASE makes of the record when they write it
        // (the same comparison, on the same text, for counting only).
        let tombstone = deleted == 1 || mark.is_some_and(|m| instant.as_str() <= m);
        // History keeps every version as delivered: all but one identical
        // to the stored row, which history holds already.
        let keep = |history: &mut Option<rusqlite::CachedStatement<'_>>| -> Result<()> {
            if let Some(history) = history {
                // The first listing of its day at or after it: every
                // listing applied so far lacked it (one that held it would
                // have delivered it), and none can be applied meanwhile.
                let absent_from = listings.get(&record.event_date()).and_then(|instants| {
                    let at = instants.partition_point(|l| l.as_str() < instant.as_str());
                    instants.get(at)
                });
                let own: [&dyn ToSql; 6] = [
                    &record.key(),
                    &date,
                    &record.value(),
                    &instant,
                    &deleted,
                    &absent_from,
                ];
                let params = own
                    .iter()
                    .copied()
                    .chain(typed.iter().map(|v| v as &dyn ToSql));
                history.execute(params_from_iter(params)).map_err(backend)?;
            }
            Ok(())
        };
        // An absent key: one plain insert, as fast as a bulk load.
        if insert.execute(values()).map_err(backend)? == 1 {
            keep(&mut history)?;
            if tombstone {
                counts.deleted += 1;
            } else {
                counts.inserted += 1;
            }
            continue;
        }
        // A stored key: its version is read to count what happens, and
        // only a newer record goes to the update, whose own WHERE compares
        // the versions again; the two must agree.
        let (s_instant, s_deleted, s_value, s_date): (String, i64, String, String) = stored
            .query_row([record.key()], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .map_err(backend)?;
        let incoming = (instant.as_str(), deleted, record.value(), date.as_str());
        let stored_version = (
            s_instant.as_str(),
            s_deleted,
            s_value.as_str(),
            s_date.as_str(),
        );
        match incoming.cmp(&stored_version) {
            Ordering::Equal => counts.unchanged += 1,
            Ordering::Less => {
                counts.stale += 1;
                keep(&mut history)?;
            }
            Ordering::Greater => {
                keep(&mut history)?;
                if update.execute(values()).map_err(backend)? != 1 {
                    return Err(Error::backend(
                        BACKEND,
                        false,
                        format!(
                            "version order disagreement on key {:?}: SQLite did not \
                             write a newer version; is the table's collation BINARY?",
                            record.key()
                        ),
                    ));
                }
                match (tombstone, s_deleted == 0) {
                    (true, _) => counts.deleted += 1,
                    (false, true) => counts.updated += 1,
                    (false, false) => counts.inserted += 1,
                }
            }
        }
    }
    Ok(())
}

/// A listing, after every page was merged and its keys staged: the day's
/// live rows as the merge left them, and how many of them the listing
/// lacks, go to the guard; then the unlisted ones become their own
/// tombstones. Returns how many.
fn unlist(
    conn: &Connection,
    sql: &Statements,
    write: &DayWrite,
    as_of: DateTime<Utc>,
) -> Result<u64> {
    let day = format_date(write.day());
    let as_of = format_instant(as_of);
    let (live, would_delete): (i64, i64) = conn
        .prepare_cached(&sql.count_unlisted)
        .and_then(|mut stmt| {
            stmt.query_row(params![day, as_of], |row| Ok((row.get(0)?, row.get(1)?)))
        })
        .map_err(backend)?;
    let (live, would_delete) = (live as u64, would_delete as u64);
    // On a refusal the caller's transaction rolls back when dropped.
    write.check_replace(would_delete, live)?;
    let tombstoned = conn
        .prepare_cached(&sql.unlist)
        .and_then(|mut stmt| stmt.execute(params![day, as_of]))
        .map_err(backend)? as u64;
    if tombstoned != would_delete {
        return Err(Error::backend(
            BACKEND,
            false,
            format!(
                "replace of {day}: counted {would_delete} rows to delete, \
                 SQLite turned {tombstoned} into tombstones"
            ),
        ));
    }
    Ok(tombstoned)
}

/// A listing in history: the day's versions it lacks are absent from its
/// instant on (unless an earlier listing lacked them first), and the
/// instant is kept for versions that arrive later.
fn keep_listing(
    conn: &Connection,
    sql: &crate::sql::HistoryStatements,
    day: NaiveDate,
    as_of: DateTime<Utc>,
) -> Result<()> {
    let (day, as_of) = (format_date(day), format_instant(as_of));
    for statement in [&sql.lacked, &sql.listing] {
        conn.prepare_cached(statement)
            .and_then(|mut stmt| stmt.execute(params![day, as_of]))
            .map_err(backend)?;
    }
    Ok(())
}

/// The day's ledger row: its success, its failure cleared, a listing's
/// watermark raised.
fn write_ledger(
    conn: &Connection,
    sql: &Statements,
    day: NaiveDate,
    synced: &SyncedDay,
) -> Result<()> {
    let c = synced.counts;
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    conn.prepare_cached(&sql.synced)
        .and_then(|mut stmt| {
            stmt.execute(params![
                format_date(day),
                format_instant(synced.at),
                synced.run_id.as_ref().map(RunId::as_str),
                synced.mode.as_str(),
                synced.as_of.map(format_instant),
                synced.digest.to_string(),
                count(c.inserted),
                count(c.updated),
                count(c.unchanged),
                count(c.stale),
                count(c.deleted),
                count(c.unlisted),
                count(c.collapsed),
            ])
        })
        .map_err(backend)?;
    if let Some(timing) = synced.timing {
        // A no-op once the table is there.
        conn.prepare_cached(&crate::sql::create_timings())
            .and_then(|mut stmt| stmt.execute([]))
            .map_err(backend)?;
        let (fetch, write) = timing.as_millis();
        conn.prepare_cached(&sql.timing)
            .and_then(|mut stmt| {
                stmt.execute(params![
                    format_date(day),
                    format_instant(synced.at),
                    fetch,
                    write
                ])
            })
            .map_err(backend)?;
    }
    Ok(())
}
