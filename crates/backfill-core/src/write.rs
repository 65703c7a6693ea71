//! The one write path. Every row any job writes goes through it.
//!
//! Two entry points, by how a day's records arrive: [`upsert`] for a `Vec`
//! in memory, [`upsert_stream`] for a stream of chunks too large to hold.
//! A [`Job`](crate::Job) takes either from its [`Fetch`](crate::Fetch) and
//! adds retries, the ledger's run id and its clock; inside the crate, both
//! become a [`DayWrite`] ([`whole_day`], [`streamed_day`]) that
//! [`write_day`] hands to the store.

use chrono::{DateTime, NaiveDate, Utc};
use futures_util::{Stream, StreamExt};

use crate::counts::{Counts, Mode};
use crate::error::{fetch_error, BoxError, Error, Result};
use crate::guard::ReplaceGuard;
use crate::ledger::SyncStamp;
use crate::record::{EventDates, Record};
use crate::store::Store;
use crate::stream::{sort_and_collapse, DayWrite, Header, Ingest, Tally, DEFAULT_STREAM_MEMORY};

/// How [`upsert`] applies a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct WriteOptions {
    /// Merge (default) or replace: the batch is a listing of the day.
    pub mode: Mode,
    /// Strict (default) or lenient `event_date` checking.
    pub event_dates: EventDates,
    /// For a replace, the instant the listing is true as of: when the fetch
    /// that produced it started, or the upstream's own snapshot time. `None`
    /// takes the moment `upsert` is called, which is only right when
    /// nothing can have changed upstream since the listing was read; a
    /// [`Job`](crate::Job) always sets it. Re-applying a listing with the
    /// same `as_of` writes nothing; the same records with a later `as_of`
    /// are a newer listing, which raises the day's watermark.
    pub as_of: Option<DateTime<Utc>>,
    /// What a replace may delete (default [`ReplaceGuard::default`]: an
    /// empty listing may not empty a day).
    pub replace_guard: ReplaceGuard,
    /// In merge mode, skip the write of a batch whose digest is that of
    /// its day's last successful apply (default false): nothing is read
    /// from the table or written, and the records are counted `skipped`.
    /// Sound because versions only move forward, so re-applying that batch
    /// would write nothing; never in replace mode, where a merge since may
    /// have added rows the listing would delete.
    pub skip_unchanged: bool,
    /// For a streamed day ([`upsert_stream`]), how many bytes of records
    /// are held in memory before a sorted run goes to a temporary file
    /// (`None`: [`DEFAULT_STREAM_MEMORY`], 64 MiB).
    pub stream_memory: Option<usize>,
}

impl WriteOptions {
    /// Sets the mode.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the `event_date` check.
    pub fn event_dates(mut self, event_dates: EventDates) -> Self {
        self.event_dates = event_dates;
        self
    }

    /// Sets the instant a replace's listing is true as of.
    pub fn as_of(mut self, as_of: DateTime<Utc>) -> Self {
        self.as_of = Some(as_of);
        self
    }

    /// Sets what a replace may delete.
    pub fn replace_guard(mut self, guard: ReplaceGuard) -> Self {
        self.replace_guard = guard;
        self
    }

    /// Sets whether an unchanged merge batch is skipped by its digest.
    pub fn skip_unchanged(mut self, skip: bool) -> Self {
        self.skip_unchanged = skip;
        self
    }

    /// Sets how much of a streamed day is held in memory.
    pub fn stream_memory(mut self, bytes: usize) -> Self {
        self.stream_memory = Some(bytes);
        self
    }
}

/// Applies one day's records to a store: the only code that writes.
///
/// 1. **Validates** every record (the record rules, and in strict mode that
///    its `event_date` is `day`). A single bad record rejects the batch
///    before anything is written.
/// 2. **Collapses** duplicate keys to their winning version, so the result
///    does not depend on the order the fetch returned them in.
/// 3. **Applies** the batch in one transaction through [`Store::apply`]:
///    absent keys are inserted, superseded versions replaced (tombstones
///    included), identical rows left untouched (no write at all), older
///    re-deliveries skipped; in [`Mode::Replace`] the day's live rows the
///    listing lacks, and that are not newer than its `as_of`, become
///    tombstones, under the [`ReplaceGuard`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
/// use backfill_core::{upsert, MemoryStore, Record, WriteOptions};
/// use chrono::{NaiveDate, TimeZone, Utc};
///
/// let store = MemoryStore::new();
/// let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
/// let at = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
/// let records = vec![Record::new("a", day, "1", at)?, Record::new("b", day, "2", at)?];
///
/// let first = upsert(&store, day, records.clone(), WriteOptions::default()).await?;
/// assert_eq!(first.inserted, 2);
/// let again = upsert(&store, day, records, WriteOptions::default()).await?;
/// assert_eq!((again.unchanged, again.written()), (2, 0));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::InvalidRecord`] or [`Error::WrongDay`] for a bad batch,
/// [`Error::ReplaceRefused`] for a replace the guard refuses, or the store's
/// own error if applying failed; in each case nothing was written.
pub async fn upsert<S>(
    store: &S,
    day: NaiveDate,
    records: Vec<Record>,
    options: WriteOptions,
) -> Result<Counts>
where
    S: Store + ?Sized,
{
    let stamp = SyncStamp {
        at: Utc::now(),
        run_id: None,
    };
    let write = whole_day_apart(day, records, options, stamp).await?;
    write_day(store, write, options).await
}

/// [`upsert`] for a day that arrives as a stream of chunks, in memory
/// bounded by [`WriteOptions::stream_memory`] whatever the day's size.
///
/// The same write as [`upsert`] of all the chunks' records at once: the
/// same rows, counts (duplicates across chunks collapsed to their winner)
/// and ledger row, one transaction. Chunks are validated as they arrive
/// and nothing is written until the stream has ended without error: an
/// error from the stream is returned as [`Error::Fetch`], a bad record as
/// [`Error::InvalidRecord`] or [`Error::WrongDay`] naming its key, and the
/// day is left as it was. The records are then applied page by page
/// through [`Store::apply`].
///
/// With [`WriteOptions::skip_unchanged`], the day's digest is found once
/// the stream has ended, before anything is written (one more pass over
/// its sorted runs), and a day whose digest is that of its last successful
/// apply is skipped exactly as a batch is.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
/// use backfill_core::{upsert_stream, MemoryStore, Record, WriteOptions};
/// use chrono::NaiveDate;
/// use futures_util::stream;
///
/// let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
/// let at = day.and_hms_opt(9, 0, 0).unwrap().and_utc();
/// let chunks = (0..4).map(move |c| {
///     let records = (0..250).map(|i| Record::new(format!("k:{}", c * 250 + i), day, "v", at));
///     records.collect::<backfill_core::Result<Vec<_>>>()
/// });
/// let store = MemoryStore::new();
/// let counts = upsert_stream(&store, day, stream::iter(chunks), WriteOptions::default()).await?;
/// assert_eq!(counts.inserted, 1000);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`upsert`], plus [`Error::Fetch`] for the stream's own error.
pub async fn upsert_stream<S, St, E>(
    store: &S,
    day: NaiveDate,
    chunks: St,
    options: WriteOptions,
) -> Result<Counts>
where
    S: Store + ?Sized,
    St: Stream<Item = std::result::Result<Vec<Record>, E>> + Send,
    E: Into<BoxError>,
{
    let chunks = chunks.map(|chunk| chunk.map_err(Into::into));
    let stamp = || SyncStamp {
        at: Utc::now(),
        run_id: None,
    };
    let write = streamed_day(day, Box::pin(chunks), options, stamp).await?;
    write_day(store, write, options).await
}

/// Applies a day's write to the store, the one hop every write takes:
/// skipped by its digest when the options say so and the digest is that of
/// the day's last successful apply, else handed to [`Store::apply`], whose
/// counts are checked against the records it was given.
pub(crate) async fn write_day<S>(store: &S, day: DayWrite, options: WriteOptions) -> Result<Counts>
where
    S: Store + ?Sized,
{
    let date = day.day();
    if let Some(ahead) = day.ahead().filter(|_| options.skips_unchanged()) {
        let last = store.ledger(date..=date).await?;
        let applied = last.first().and_then(|entry| entry.synced.as_ref());
        // `day.digest()`: the ahead digest with its mark, as the ledger has it.
        if applied.is_some_and(|synced| synced.digest == day.digest()) {
            return Ok(Counts {
                skipped: ahead.records,
                collapsed: ahead.collapsed,
                ..Counts::default()
            });
        }
    }
    let tally = day.tally();
    let counts = store.apply(day).await?;
    Ok(Counts {
        collapsed: tally.collapsed(),
        ..accounted(store, counts, &tally)?
    })
}

impl WriteOptions {
    /// Whether an unchanged day may be skipped: asked, and in merge mode.
    fn skips_unchanged(&self) -> bool {
        self.skip_unchanged && self.mode == Mode::Merge
    }

    /// The header of a day written with these options; `now` gives a
    /// replace its `as_of` when the options have none.
    fn header(
        &self,
        day: NaiveDate,
        stamp: SyncStamp,
        now: impl FnOnce() -> DateTime<Utc>,
    ) -> Header {
        Header {
            day,
            mode: self.mode,
            as_of: self.as_of.unwrap_or_else(now),
            guard: self.replace_guard,
            stamp,
        }
    }
}

/// A day fetched whole: validated, collapsed to each key's winner, sorted
/// by key.
pub(crate) fn whole_day(
    day: NaiveDate,
    mut records: Vec<Record>,
    options: WriteOptions,
    stamp: SyncStamp,
) -> Result<DayWrite> {
    for record in &records {
        record.validate()?;
        if options.event_dates == EventDates::Strict && record.event_date() != day {
            return Err(Error::WrongDay {
                key: record.key().to_owned(),
                expected: day,
                found: record.event_date(),
            });
        }
    }
    // Key order (the order stores write in), each key's winner kept.
    let collapsed = sort_and_collapse(&mut records);
    let at = stamp.at;
    let header = options.header(day, stamp, || at);
    Ok(DayWrite::whole(header, records, collapsed))
}

/// Records from which a batch is prepared on the runtime's blocking pool:
/// below it, the work is shorter than handing it over.
const PREPARED_APART: usize = 1024;

/// [`whole_day`] on the runtime's blocking pool, for a batch of
/// [`PREPARED_APART`] records or more: checking, sorting and hashing a day
/// of records is work for a thread of its own, so that a job with several
/// days in flight prepares them side by side and the task that drives the
/// days' writes keeps answering their servers. Outside a Tokio runtime,
/// or for a smaller batch, it runs where it is called.
pub(crate) async fn whole_day_apart(
    day: NaiveDate,
    records: Vec<Record>,
    options: WriteOptions,
    stamp: SyncStamp,
) -> Result<DayWrite> {
    let handle = match tokio::runtime::Handle::try_current() {
        Ok(handle) if records.len() >= PREPARED_APART => handle,
        _ => return whole_day(day, records, options, stamp),
    };
    match handle
        .spawn_blocking(move || whole_day(day, records, options, stamp))
        .await
    {
        Ok(write) => write,
        // A panic is the caller's, as if the work had run in place.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::Backend {
            backend: "tokio",
            retryable: true,
            source: format!("preparing the batch of {day}: {e}").into(),
        }),
    }
}

/// A streamed day, once its stream has ended without error: every chunk
/// validated as it arrived, kept in memory up to the options' budget and
/// beyond it in temporary files. `stamp` is taken then: the apply begins.
pub(crate) async fn streamed_day(
    day: NaiveDate,
    mut chunks: std::pin::Pin<
        Box<dyn Stream<Item = std::result::Result<Vec<Record>, BoxError>> + Send + '_>,
    >,
    options: WriteOptions,
    stamp: impl FnOnce() -> SyncStamp,
) -> Result<DayWrite> {
    let budget = options.stream_memory.unwrap_or(DEFAULT_STREAM_MEMORY);
    let mut ingest = Ingest::new(day, options.event_dates, budget);
    while let Some(chunk) = chunks.next().await {
        ingest.push(chunk.map_err(|source| fetch_error(day, source))?)?;
    }
    drop(chunks);
    let stamp = stamp();
    let at = stamp.at;
    ingest.finish(options.header(day, stamp, || at), options.skips_unchanged())
}

/// [`upsert`] with a given stamp, as a job's run writes it: for the
/// conformance cases that check the ledger row's stamp.
#[cfg(any(feature = "conformance", test))]
pub(crate) async fn upsert_stamped<S>(
    store: &S,
    day: NaiveDate,
    records: Vec<Record>,
    options: WriteOptions,
    stamp: SyncStamp,
) -> Result<Counts>
where
    S: Store + ?Sized,
{
    write_day(store, whole_day(day, records, options, stamp)?, options).await
}

/// [`upsert_stream`] with a given stamp, as [`upsert_stamped`].
#[cfg(any(feature = "conformance", test))]
pub(crate) async fn upsert_stream_stamped<S>(
    store: &S,
    day: NaiveDate,
    chunks: std::pin::Pin<
        Box<dyn Stream<Item = std::result::Result<Vec<Record>, BoxError>> + Send + '_>,
    >,
    options: WriteOptions,
    stamp: impl FnOnce() -> SyncStamp,
) -> Result<Counts>
where
    S: Store + ?Sized,
{
    let write = streamed_day(day, chunks, options, stamp).await?;
    write_day(store, write, options).await
}

/// `counts` if the store read every page and accounted for every record it
/// was given, else an error naming the store: a store that loses records
/// must not be trusted with the ledger.
fn accounted<S>(store: &S, counts: Counts, tally: &Tally) -> Result<Counts>
where
    S: Store + ?Sized,
{
    let expected = tally.read();
    if tally.done() && counts.applied() == expected {
        return Ok(counts);
    }
    Err(Error::BrokenContract {
        store: format!("{store:?}"),
        reason: format!(
            "reported {} records applied of {expected}{}",
            counts.applied(),
            if tally.done() {
                ""
            } else {
                " (and did not read the whole day)"
            }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// A batch large enough to be prepared on the blocking pool is the
    /// batch prepared in place, inside a runtime and outside any (where
    /// it runs in place), and a bad record in it is refused the same way.
    #[test]
    fn a_batch_prepared_apart_is_the_batch_prepared_in_place() {
        let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let stamp = SyncStamp { at, run_id: None };
        let mut records: Vec<Record> = (0..PREPARED_APART * 2)
            .map(|i| Record::new(format!("k{}", (i * 7919) % 1500), day, format!("{i}"), at))
            .collect::<Result<_>>()
            .unwrap();
        let mut expected =
            whole_day(day, records.clone(), WriteOptions::default(), stamp.clone()).unwrap();
        let pages = |write: &mut DayWrite| {
            let mut all = Vec::new();
            while let Some(page) = write.next_page(usize::MAX, usize::MAX).unwrap() {
                all.extend(page);
            }
            (all, write.digest(), write.fetched())
        };
        let expected = pages(&mut expected);
        assert_eq!(expected.0.len(), 1500);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut apart = runtime
            .block_on(whole_day_apart(
                day,
                records.clone(),
                WriteOptions::default(),
                stamp.clone(),
            ))
            .unwrap();
        assert_eq!(pages(&mut apart), expected);
        let mut outside = futures_util::FutureExt::now_or_never(whole_day_apart(
            day,
            records.clone(),
            WriteOptions::default(),
            stamp.clone(),
        ))
        .expect("runs in place outside a runtime")
        .unwrap();
        assert_eq!(pages(&mut outside), expected);

        let other = day.succ_opt().unwrap();
        records[1800] = Record::new("wrong", other, "x", at).unwrap();
        let refused = runtime.block_on(whole_day_apart(
            day,
            records,
            WriteOptions::default(),
            stamp,
        ));
        assert!(matches!(refused, Err(Error::WrongDay { key, .. }) if key == "wrong"));
    }

    #[test]
    fn collapse_keeps_the_winner_whatever_the_order() {
        let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let versions = [
            Record::new("k", day, "a", at).unwrap(),
            Record::new("k", day, "c", at).unwrap(),
            Record::new("k", day, "b", at).unwrap(),
            Record::new("j", day, "x", at).unwrap(),
        ];
        for rotation in 0..versions.len() {
            let mut records = versions.to_vec();
            records.rotate_left(rotation);
            let stamp = SyncStamp {
                at: Utc::now(),
                run_id: None,
            };
            let mut write = whole_day(day, records, WriteOptions::default(), stamp).unwrap();
            assert_eq!(write.collapsed(), 2);
            let records = write.read_all().unwrap();
            let kept: Vec<_> = records.iter().map(|r| (r.key(), r.value())).collect();
            assert_eq!(kept, [("j", "x"), ("k", "c")]);
        }
    }
}
