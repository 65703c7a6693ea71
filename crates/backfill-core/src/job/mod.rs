//! The job engine: [`Job`], [`sync_day`] and [`backfill`], built on
//! [`upsert`](crate::upsert) alone.
//!
//! - `mod.rs`: the [`Job`] builder and its entry points;
//! - `clock.rs`: the clock and the time zone that say what "today" is;
//! - `retry.rs`: the [`Retry`] policy;
//! - `event.rs`: the [`Event`]s an observer sees;
//! - `day.rs`: running one day (attempts, timeout, panic capture);
//! - `report.rs`: [`DayReport`], [`FailedDay`], [`RunReport`];
//! - `select.rs`: choosing days by the ledger ([`Select`]) and where days
//!   stand ([`Status`]);
//! - `shard.rs`: splitting days between processes ([`Shard`]);
//! - `stop.rs`: winding a run down ([`StopHandle`]).

mod clock;
mod day;
mod event;
pub(crate) mod report;
mod retry;
mod select;
mod shard;
mod stop;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{NaiveDate, TimeZone};
use futures_util::StreamExt;
use tracing::Instrument;

use crate::check::Checks;
use crate::counts::Mode;
use crate::error::{Error, Result};
use crate::fetch::Fetch;
use crate::guard::ReplaceGuard;
use crate::ledger::{DayState, LedgerEntry, RunId};
use crate::record::EventDates;
use crate::store::Store;
use crate::write::WriteOptions;

use self::clock::Calendar;
use self::event::Observer;

pub use self::clock::{Clock, FixedClock, SystemClock};
pub use self::event::Event;
pub use self::report::{DayReport, FailedDay, RunReport};
pub use self::retry::Retry;
pub use self::select::{DayStatus, NotSelected, Select, Status};
pub use self::shard::{ParseShardError, Shard};
pub use self::stop::StopHandle;
pub use crate::error::BackfillError;

/// A configured job: the one object behind the daily sync and the backfill,
/// so both run with the same clock, time zone, write options, retries and
/// observer. The free functions [`sync_day`] and [`backfill`] use
/// `Job::default()`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
/// use std::time::Duration;
/// use backfill_core::{FixedClock, Job, MemoryStore, Record, Retry};
/// use chrono::{FixedOffset, NaiveDate, TimeZone, Utc};
///
/// // 20:00 UTC on 1 March is already 2 March in Tokyo.
/// let clock = FixedClock(Utc.with_ymd_and_hms(2026, 3, 1, 20, 0, 0).unwrap());
/// let tokyo = FixedOffset::east_opt(9 * 3600).unwrap();
/// let job = Job::new()
///     .clock(clock)
///     .time_zone(tokyo)
///     .concurrency(8)
///     .retry(Retry::default().max_attempts(5))
///     .day_timeout(Duration::from_secs(600));
/// assert_eq!(job.today(), NaiveDate::from_ymd_opt(2026, 3, 2).unwrap());
///
/// let fetch = |day: NaiveDate| async move {
///     let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc();
///     Ok::<_, std::io::Error>(vec![Record::new(format!("event:{day}"), day, "{}", at).unwrap()])
/// };
/// let store = MemoryStore::new();
/// let report = job.sync_today(&store, &fetch).await?;
/// assert_eq!((report.day, report.counts.inserted), (job.today(), 1));
///
/// // The daily job with a lookback: today and the 6 days before it.
/// let recent = job.sync_with_lookback(&store, &fetch, 6).await?;
/// assert_eq!((recent.days.len(), recent.totals().inserted), (7, 6));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Job {
    clock: Arc<dyn Clock>,
    calendar: Calendar,
    write: WriteOptions,
    concurrency: usize,
    retry: Retry,
    fail_fast: bool,
    day_timeout: Option<Duration>,
    dry_run: bool,
    observer: Option<Observer>,
    select: Select,
    shard: Option<Shard>,
    stop: StopHandle,
    run_id: Option<RunId>,
    checks: Checks,
}

impl Default for Job {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("clock", &self.clock)
            .field("time_zone", &self.calendar)
            .field("write", &self.write)
            .field("concurrency", &self.concurrency)
            .field("retry", &self.retry)
            .field("fail_fast", &self.fail_fast)
            .field("day_timeout", &self.day_timeout)
            .field("dry_run", &self.dry_run)
            .field("observer", &self.observer.is_some())
            .field("select", &self.select)
            .field("shard", &self.shard)
            .field("stopped", &self.stop.is_stopped())
            .field("run_id", &self.run_id)
            .field("checks", &self.checks)
            .finish()
    }
}

impl Job {
    /// A job on the system clock, in UTC, merging, with strict event dates,
    /// one day at a time, [`Retry::default`], attempting every day, each
    /// attempt at a day failing after
    /// [`DEFAULT_DAY_TIMEOUT`](crate::settings::DEFAULT_DAY_TIMEOUT) (1 h):
    /// the defaults of [`Settings`](crate::settings::Settings), the same
    /// for every entry point.
    pub fn new() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            calendar: Calendar::utc(),
            write: WriteOptions::default(),
            concurrency: 1,
            retry: Retry::default(),
            fail_fast: false,
            day_timeout: Some(crate::settings::DEFAULT_DAY_TIMEOUT),
            dry_run: false,
            observer: None,
            select: Select::All,
            shard: None,
            stop: StopHandle::new(),
            run_id: None,
            checks: Checks::default(),
        }
    }

    /// The per-day [checks](crate::check) of each day's fetched count
    /// against its neighbours' in the ledger (default [`Checks::default`]:
    /// both warn). [`Checks::off`] makes none.
    pub fn checks(mut self, checks: Checks) -> Self {
        self.checks = checks;
        self
    }

    /// Uses `clock` to know the current instant.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Computes "today" in `zone` (any chrono time zone, e.g. `chrono_tz::Tz`
    /// for daylight-saving rules) instead of UTC.
    pub fn time_zone<Tz>(mut self, zone: Tz) -> Self
    where
        Tz: TimeZone + fmt::Debug + Send + Sync + 'static,
    {
        self.calendar = Calendar::in_zone(zone);
        self
    }

    /// Merge (default) or replace: each day's fetch is a listing of the
    /// day, true as of when the fetch started (or the
    /// [`Fetched::as_of`](crate::Fetched::as_of) it returns).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.write.mode = mode;
        self
    }

    /// Which days of a range [`Job::backfill`] and [`Job::sync_with_lookback`]
    /// run, by the store's ledger (default [`Select::All`]). Choosing days
    /// never changes what a day's sync does; the run report lists the days
    /// not selected and why. [`Job::sync_day`] always runs its day.
    pub fn select(mut self, select: Select) -> Self {
        self.select = select;
        self
    }

    /// In merge mode, skips the write of a day whose fetched batch has the
    /// digest of that day's last successful apply: nothing is read from
    /// the table or written, the day is reported with its records counted
    /// `skipped` (default false). Never in replace mode. See
    /// [`WriteOptions::skip_unchanged`](crate::WriteOptions::skip_unchanged).
    pub fn skip_unchanged(mut self, skip: bool) -> Self {
        self.write.skip_unchanged = skip;
        self
    }

    /// How much of a streamed day ([`Fetched::stream`](crate::Fetched::stream))
    /// is held in memory before a sorted run goes to a temporary file
    /// (default [`DEFAULT_STREAM_MEMORY`](crate::DEFAULT_STREAM_MEMORY),
    /// 64 MiB per day in flight). Temporary files live in the system's
    /// temporary directory (`TMPDIR`) and are gone when the attempt ends.
    pub fn stream_memory(mut self, bytes: usize) -> Self {
        self.write.stream_memory = Some(bytes);
        self
    }

    /// Runs only this shard's days of every range [`Job::backfill`] and
    /// [`Job::sync_with_lookback`] plan (default: every day), so N
    /// processes with shards `0/N` … `N-1/N` cover a range exactly once.
    /// [`Job::sync_day`] always runs its day; [`Job::status`] shows every
    /// day.
    pub fn shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Winds the job down when `handle` is stopped: no new day, no new
    /// attempt; days in flight finish. See [`StopHandle`].
    pub fn stop_handle(mut self, handle: StopHandle) -> Self {
        self.stop = handle;
        self
    }

    /// Runs under this id (an orchestrator's own run id, say) instead of a
    /// new [`RunId`] per run.
    pub fn run_id(mut self, run_id: impl Into<RunId>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// What one replace may delete (default [`ReplaceGuard::default`]: an
    /// empty listing may not empty a day that has rows).
    pub fn replace_guard(mut self, guard: ReplaceGuard) -> Self {
        self.write.replace_guard = guard;
        self
    }

    /// Strict (default) or lenient `event_date` checking.
    pub fn event_dates(mut self, event_dates: EventDates) -> Self {
        self.write.event_dates = event_dates;
        self
    }

    /// How many days a backfill runs at once (default 1, at least 1).
    /// Results are still reported in day order; the convergence guarantee
    /// makes any interleaving safe.
    pub fn concurrency(mut self, days: usize) -> Self {
        self.concurrency = days.max(1);
        self
    }

    /// The retry policy for each day (default [`Retry::default`]).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Stop starting new days after the first failed day (default: attempt
    /// every day, then report all failures). Days already running finish.
    pub fn fail_fast(mut self, fail_fast: bool) -> Self {
        self.fail_fast = fail_fast;
        self
    }

    /// Fails an attempt at a day (fetch and write) that takes longer than
    /// `timeout`, as a retryable [`Error::Timeout`] (default 1 h,
    /// [`DEFAULT_DAY_TIMEOUT`](crate::settings::DEFAULT_DAY_TIMEOUT)).
    pub fn day_timeout(mut self, timeout: Duration) -> Self {
        self.day_timeout = Some(timeout);
        self
    }

    /// Lets an attempt at a day take as long as it takes (no
    /// [`Job::day_timeout`]).
    pub fn no_day_timeout(mut self) -> Self {
        self.day_timeout = None;
        self
    }

    /// Makes every entry point return what it would run without fetching or
    /// writing anything: [`Job::backfill`] and [`Job::sync_with_lookback`]
    /// their plan (the days, in order), [`Job::sync_day`] and
    /// [`Job::sync_today`] a [`DayReport`] with `dry_run` set and no attempt.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Calls `observer` with every [`Event`] (from whichever task runs the
    /// day; keep it quick). To feed a channel, send from the closure.
    pub fn observer(mut self, observer: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Today, in the job's time zone, by the job's clock.
    pub fn today(&self) -> NaiveDate {
        self.calendar.day_of(self.clock.now())
    }

    /// The days a backfill of `days` would consider, in order: every day
    /// of the range, or the job's [`Shard`] of them. (Which of those it
    /// then runs depends on [`Job::select`] and the store's ledger.)
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRange`] if the range is inverted.
    pub fn plan(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<NaiveDate>> {
        let mut days = every_day(days)?;
        if let Some(shard) = self.shard {
            days.retain(|day| shard.contains(*day));
        }
        Ok(days)
    }

    fn emit(&self, event: Event<'_>) {
        if let Some(observer) = &self.observer {
            observer(&event);
        }
    }

    /// Fetches `day` and upserts it, retrying retryable failures under the
    /// job's policy.
    ///
    /// The result depends only on what `fetch` returns for that day, never
    /// on what was synced before.
    ///
    /// # Errors
    ///
    /// [`Error::Fetch`], [`Error::Timeout`] or [`Error::Panicked`] for the
    /// fetch, or any error of [`upsert`](crate::upsert); in each case the
    /// failed attempt wrote nothing.
    pub async fn sync_day<S, F>(&self, store: &S, fetch: &F, day: NaiveDate) -> Result<DayReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        if self.dry_run {
            tracing::info!(%day, "dry run: nothing fetched or written");
            let mut report = DayReport::new(day, Default::default());
            report.attempts = 0;
            report.dry_run = true;
            return Ok(report);
        }
        let run_id = self.run_id.clone().unwrap_or_default();
        let neighbours = self.neighbours(store, day..=day).await?;
        self.run_day(store, fetch, day, &run_id, neighbours.as_ref())
            .await
            .map_err(|(error, _)| error)
    }

    /// [`Job::sync_day`] for today, in the job's time zone by the job's
    /// clock ([`Job::today`]).
    ///
    /// A daily job that syncs only today misses what arrives for yesterday
    /// after its last run; [`Job::sync_with_lookback`] with a lookback of 1
    /// or more is usually what a scheduled job wants.
    ///
    /// # Errors
    ///
    /// As [`Job::sync_day`].
    pub async fn sync_today<S, F>(&self, store: &S, fetch: &F) -> Result<DayReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        self.sync_day(store, fetch, self.today()).await
    }

    /// The daily job: syncs today and the `lookback` days before it, so
    /// data that arrives late for recent days is picked up
    /// (`lookback = 1`: yesterday and today), through [`Job::backfill`].
    ///
    /// # Errors
    ///
    /// As [`Job::backfill`]; [`Error::InvalidRange`] if the lookback reaches
    /// before the calendar's first day.
    pub async fn sync_with_lookback<S, F>(
        &self,
        store: &S,
        fetch: &F,
        lookback: u32,
    ) -> Result<RunReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let today = self.today();
        let start = today
            .checked_sub_signed(chrono::Duration::days(i64::from(lookback)))
            .ok_or(Error::InvalidRange {
                start: NaiveDate::MIN,
                end: today,
            })?;
        self.backfill(store, fetch, start..=today).await
    }

    /// Syncs every day of `days` (inclusive) through [`Job::sync_day`],
    /// up to [`Job::concurrency`] days at once, and reports each day in day
    /// order. It has no write logic of its own.
    ///
    /// Every day is attempted even when another fails (unless
    /// [`Job::fail_fast`], or the error is [`Fatal`](crate::Fatal): then no
    /// other day starts). Dropping the returned future starts no new day;
    /// a day in flight then commits whole or rolls back whole.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRange`] if the range is inverted (nothing fetched);
    /// [`Error::Backfill`] listing every failed day with its error, after
    /// the other days were attempted.
    pub async fn backfill<S, F>(
        &self,
        store: &S,
        fetch: &F,
        days: RangeInclusive<NaiveDate>,
    ) -> Result<RunReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let (start, end) = (*days.start(), *days.end());
        let planned = self.plan(days)?;
        let range = start..=end;
        let run_id = self.run_id.clone().unwrap_or_default();
        let span = tracing::info_span!(
            "backfill",
            run_id = %run_id,
            start = %start,
            end = %end,
            days = planned.len(),
            shard = self.shard.map(tracing::field::display),
            concurrency = self.concurrency,
            dry_run = self.dry_run,
        );
        async {
            let (planned, not_selected) = self.selection(store, planned).await?;
            self.run(store, fetch, run_id, &range, planned, not_selected)
                .await
        }
        .instrument(span)
        .await
    }

    /// The days of `planned` the job's [`Select`] picks, by the store's
    /// ledger, and the others with why.
    async fn selection<S>(
        &self,
        store: &S,
        planned: Vec<NaiveDate>,
    ) -> Result<(Vec<NaiveDate>, Vec<NotSelected>)>
    where
        S: Store + ?Sized,
    {
        if self.select == Select::All || planned.is_empty() {
            return Ok((planned, Vec::new()));
        }
        let range = planned[0]..=planned[planned.len() - 1];
        let ledger: std::collections::HashMap<NaiveDate, LedgerEntry> = store
            .ledger(range)
            .await?
            .into_iter()
            .map(|entry| (entry.day, entry))
            .collect();
        let (mut chosen, mut left) = (Vec::new(), Vec::new());
        for day in planned {
            let entry = ledger.get(&day);
            if self.select.picks(entry) {
                chosen.push(day);
            } else {
                left.push(NotSelected {
                    day,
                    state: entry.map_or(DayState::Missing, LedgerEntry::state),
                    synced_at: entry.and_then(|e| e.synced.as_ref()).map(|s| s.at),
                });
            }
        }
        Ok((chosen, left))
    }

    /// Where every day of `days` stands, by the store's ledger.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRange`] if the range is inverted; the store's error
    /// if its ledger cannot be read.
    pub async fn status<S>(&self, store: &S, days: RangeInclusive<NaiveDate>) -> Result<Status>
    where
        S: Store + ?Sized,
    {
        let planned = every_day(days)?;
        let range = planned[0]..=planned[planned.len() - 1];
        let read = match self.checks.any() {
            true => self.checks.neighbourhood(range),
            false => range,
        };
        let entries = store.ledger(read).await?;
        let counts = crate::check::synced_counts(&entries);
        let mut ledger = entries.iter().peekable();
        let today = self.today();
        let mut status = Status::default();
        for day in planned {
            while ledger.next_if(|e| e.day < day).is_some() {}
            let entry = ledger.next_if(|e| e.day == day).cloned();
            let state = entry.as_ref().map_or(DayState::Missing, LedgerEntry::state);
            // A synced day's count, judged as a run would judge it now.
            let flag = entry
                .as_ref()
                .filter(|e| state == DayState::Synced && e.accepted.is_none() && day < today)
                .and_then(|e| e.synced.as_ref())
                .and_then(|synced| self.checks.judge(day, synced.counts.fetched(), &counts));
            status.days.push(DayStatus {
                day,
                state,
                entry,
                flag,
            });
        }
        Ok(status)
    }

    async fn run<S, F>(
        &self,
        store: &S,
        fetch: &F,
        run_id: RunId,
        range: &RangeInclusive<NaiveDate>,
        planned: Vec<NaiveDate>,
        not_selected: Vec<NotSelected>,
    ) -> Result<RunReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let started = Instant::now();
        self.emit(Event::RunStarted {
            run_id: &run_id,
            days: &planned,
            range,
        });
        let mut report = RunReport::new(planned);
        report.run_id = Some(run_id.clone());
        report.not_selected = not_selected;
        report.dry_run = self.dry_run;
        let run_id = &run_id;
        if self.dry_run {
            tracing::info!(
                days = report.planned.len(),
                "dry run: nothing fetched or written"
            );
            self.emit(Event::RunFinished { report: &report });
            return Ok(report);
        }

        let neighbours = match report.planned.first().zip(report.planned.last()) {
            Some((first, last)) => self.neighbours(store, *first..=*last).await?,
            None => None,
        };
        let neighbours = neighbours.as_ref();
        let stop = AtomicBool::new(false);
        let stop = &stop;
        let mut outcomes: Vec<Outcome> = futures_util::stream::iter(report.planned.clone())
            .map(|day| async move {
                if stop.load(Ordering::SeqCst) || self.stop.is_stopped() {
                    return Outcome::Skipped(day);
                }
                match self.run_day(store, fetch, day, run_id, neighbours).await {
                    Ok(day_report) => Outcome::Done(day_report),
                    Err((error, attempts)) => {
                        if self.fail_fast || error.is_fatal() {
                            stop.store(true, Ordering::SeqCst);
                        }
                        Outcome::Failed(day, attempts, error)
                    }
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        outcomes.sort_by_key(Outcome::day);

        let mut failed = Vec::new();
        for outcome in outcomes {
            match outcome {
                Outcome::Done(day_report) => report.days.push(day_report),
                Outcome::Skipped(day) => report.skipped.push(day),
                Outcome::Failed(day, attempts, error) => {
                    report.failed.push(FailedDay::new(day, attempts, &error));
                    failed.push((day, error));
                }
            }
        }
        report.elapsed = started.elapsed();
        report.stopped = self.stop.is_stopped();
        let totals = report.totals();
        tracing::info!(
            synced = report.days.len(),
            failed = failed.len(),
            skipped = report.skipped.len(),
            inserted = totals.inserted,
            updated = totals.updated,
            unchanged = totals.unchanged,
            stale = totals.stale,
            deleted = totals.deleted,
            "backfill finished"
        );
        self.emit(Event::RunFinished { report: &report });
        if failed.is_empty() {
            Ok(report)
        } else {
            Err(Error::Backfill(Box::new(BackfillError::new(
                failed, report,
            ))))
        }
    }
}

impl Job {
    /// What the per-day checks of `days` judge by: the ledger around them,
    /// read once (`None` when no check is on).
    async fn neighbours<S>(
        &self,
        store: &S,
        days: RangeInclusive<NaiveDate>,
    ) -> Result<Option<Neighbours>>
    where
        S: Store + ?Sized,
    {
        if !self.checks.any() {
            return Ok(None);
        }
        let entries = store.ledger(self.checks.neighbourhood(days)).await?;
        Ok(Some(Neighbours {
            counts: Mutex::new(crate::check::synced_counts(&entries).into_iter().collect()),
            accepted: entries
                .iter()
                .filter(|e| e.accepted.is_some())
                .map(|e| e.day)
                .collect(),
        }))
    }
}

/// The fetched counts a run's checks judge each day by: the ledger's when
/// the run started, and each day's own as the run syncs it.
pub(super) struct Neighbours {
    counts: Mutex<BTreeMap<NaiveDate, u64>>,
    accepted: BTreeSet<NaiveDate>,
}

impl Neighbours {
    /// `day`'s flag, if it has one, by `checks`.
    pub(super) fn judge(
        &self,
        checks: &Checks,
        day: NaiveDate,
        fetched: u64,
    ) -> Option<crate::Flag> {
        if self.accepted.contains(&day) {
            return None;
        }
        let around: Vec<(NaiveDate, u64)> = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .range(checks.neighbourhood(day..=day))
            .map(|(d, n)| (*d, *n))
            .collect();
        checks.judge(day, fetched, &around)
    }

    /// Records that `day` synced with `fetched` records.
    pub(super) fn synced(&self, day: NaiveDate, fetched: u64) {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(day, fetched);
    }
}

/// Every day of an inclusive range, in order.
fn every_day(days: RangeInclusive<NaiveDate>) -> Result<Vec<NaiveDate>> {
    let (start, end) = days.into_inner();
    if start > end {
        return Err(Error::InvalidRange { start, end });
    }
    Ok(start.iter_days().take_while(|day| *day <= end).collect())
}

enum Outcome {
    Done(DayReport),
    Failed(NaiveDate, u32, Error),
    Skipped(NaiveDate),
}

impl Outcome {
    fn day(&self) -> NaiveDate {
        match self {
            Outcome::Done(report) => report.day,
            Outcome::Failed(day, ..) | Outcome::Skipped(day) => *day,
        }
    }
}

/// Fetches `day` and upserts it, with the default [`Job`].
///
/// # Errors
///
/// See [`Job::sync_day`].
pub async fn sync_day<S, F>(store: &S, fetch: &F, day: NaiveDate) -> Result<DayReport>
where
    S: Store + ?Sized,
    F: Fetch + ?Sized,
{
    Job::default().sync_day(store, fetch, day).await
}

/// Syncs every day of an inclusive range with the default [`Job`] (one day
/// at a time, retrying transient failures, attempting every day).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
/// use backfill_core::{backfill, MemoryStore, Record};
/// use chrono::NaiveDate;
///
/// let fetch = |day: NaiveDate| async move {
///     let at = day.and_hms_opt(12, 0, 0).unwrap().and_utc();
///     Ok::<_, std::io::Error>(vec![Record::new(format!("event:{day}"), day, "{}", at).unwrap()])
/// };
/// let store = MemoryStore::new();
/// let start = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
/// let end = NaiveDate::from_ymd_opt(2026, 1, 7).unwrap();
///
/// let first = backfill(&store, &fetch, start..=end).await?;
/// assert_eq!(first.totals().inserted, 7);
/// let rerun = backfill(&store, &fetch, start..=end).await?;
/// assert_eq!(rerun.totals().written(), 0);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// See [`Job::backfill`].
pub async fn backfill<S, F>(
    store: &S,
    fetch: &F,
    days: RangeInclusive<NaiveDate>,
) -> Result<RunReport>
where
    S: Store + ?Sized,
    F: Fetch + ?Sized,
{
    Job::default().backfill(store, fetch, days).await
}

#[cfg(test)]
mod tests;
