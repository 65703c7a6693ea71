//! The jobs: [`sync_one_day`] and [`backfill`], both built on
//! [`upsert`](crate::upsert) alone.

use std::any::Any;
use std::fmt;
use std::ops::RangeInclusive;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use futures_util::{FutureExt, StreamExt};
use tracing::Instrument;

use crate::error::{BackfillError, Error, Result};
use crate::fetch::Fetch;
use crate::store::{Counts, Mode, Store};
use crate::write::{upsert, EventDates, WriteOptions};

/// A source of the current instant, so that "today" can be pinned in tests.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock stopped at one instant.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

type Calendar = Arc<dyn Fn(DateTime<Utc>) -> NaiveDate + Send + Sync>;
type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// How often, and how patiently, a failing day is tried again.
///
/// Only errors that say so are retried ([`Error::is_retryable`]): a store's
/// lost connection, deadlock or lock timeout, a fetch error marked
/// [`Transient`](crate::Transient), a per-day timeout. A bad record or a
/// fetch bug fails at once.
///
/// The delay before retry `n` is `initial · 2ⁿ⁻¹`, capped at `max`; with
/// jitter (the default) it is drawn uniformly from its upper half, so
/// concurrent days do not retry in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    attempts: u32,
    initial: Duration,
    max: Duration,
    jitter: bool,
}

impl Default for Retry {
    /// 3 attempts, backoff from 500 ms up to 30 s, with jitter.
    fn default() -> Self {
        Self {
            attempts: 3,
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            jitter: true,
        }
    }
}

impl Retry {
    /// One attempt: no retry at all.
    pub fn none() -> Self {
        Self::default().attempts(1)
    }

    /// Attempts in all, the first included (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The first delay and the longest one.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial = initial;
        self.max = max.max(initial);
        self
    }

    /// Whether delays are randomised (default true).
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// The number of attempts.
    pub fn max_attempts(&self) -> u32 {
        self.attempts
    }

    /// The delay before retry number `retry` (1 for the first retry).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        let full = self.initial.saturating_mul(factor).min(self.max);
        if self.jitter {
            full.mul_f64(0.5 + fastrand::f64() / 2.0)
        } else {
            full
        }
    }
}

/// What a job reports while it runs, to the observer given to
/// [`Job::observer`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A backfill is about to run these days, in this order.
    RunStarted {
        /// The planned days.
        days: &'a [NaiveDate],
    },
    /// An attempt at a day begins.
    DayStarted {
        /// The day.
        day: NaiveDate,
        /// 1 for the first attempt.
        attempt: u32,
    },
    /// An attempt failed with a retryable error; the day is tried again
    /// after `delay`.
    DayRetrying {
        /// The day.
        day: NaiveDate,
        /// The attempt that failed.
        attempt: u32,
        /// Why it failed.
        error: &'a Error,
        /// The wait before the next attempt.
        delay: Duration,
    },
    /// A day was synced.
    DayFinished {
        /// What it did.
        report: &'a DayReport,
    },
    /// A day failed for good.
    DayFailed {
        /// The day.
        day: NaiveDate,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        error: &'a Error,
    },
    /// A backfill ended (successfully or not).
    RunFinished {
        /// Everything it did.
        report: &'a RunReport,
    },
}

/// A configured job: the one object behind the daily sync and the backfill,
/// so both run with the same clock, time zone, write options, retries and
/// observer. The free functions [`sync_one_day`] and [`backfill`] use
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
///     .retry(Retry::default().attempts(5))
///     .day_timeout(Duration::from_secs(600));
/// assert_eq!(job.today(), NaiveDate::from_ymd_opt(2026, 3, 2).unwrap());
///
/// let fetch = |day: NaiveDate| async move {
///     let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc();
///     Ok::<_, std::io::Error>(vec![Record::new(format!("event:{day}"), day, "{}", at).unwrap()])
/// };
/// let store = MemoryStore::new();
/// let report = job.sync_one_day(&store, &fetch, None).await?;
/// assert_eq!((report.day, report.counts.inserted), (job.today(), 1));
///
/// // The daily job with a lookback: today and the 6 days before it.
/// let recent = job.sync_recent(&store, &fetch, 6).await?;
/// assert_eq!((recent.days.len(), recent.totals().inserted), (7, 6));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Job {
    clock: Arc<dyn Clock>,
    calendar: Calendar,
    zone: String,
    write: WriteOptions,
    concurrency: usize,
    retry: Retry,
    fail_fast: bool,
    day_timeout: Option<Duration>,
    dry_run: bool,
    observer: Option<Observer>,
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
            .field("time_zone", &self.zone)
            .field("write", &self.write)
            .field("concurrency", &self.concurrency)
            .field("retry", &self.retry)
            .field("fail_fast", &self.fail_fast)
            .field("day_timeout", &self.day_timeout)
            .field("dry_run", &self.dry_run)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Job {
    /// A job on the system clock, in UTC, merging, with strict event dates,
    /// one day at a time, [`Retry::default`], attempting every day, no
    /// timeout.
    pub fn new() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            calendar: Arc::new(|now| now.date_naive()),
            zone: "UTC".to_owned(),
            write: WriteOptions::default(),
            concurrency: 1,
            retry: Retry::default(),
            fail_fast: false,
            day_timeout: None,
            dry_run: false,
            observer: None,
        }
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
        self.zone = format!("{zone:?}");
        self.calendar = Arc::new(move |now: DateTime<Utc>| now.with_timezone(&zone).date_naive());
        self
    }

    /// Merge (default) or replace each day's partition.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.write.mode = mode;
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
    /// `timeout`, as a retryable [`Error::Timeout`].
    pub fn day_timeout(mut self, timeout: Duration) -> Self {
        self.day_timeout = Some(timeout);
        self
    }

    /// Makes [`Job::backfill`] return its plan (the days, in order) without
    /// fetching or writing anything.
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
        (self.calendar)(self.clock.now())
    }

    /// The days a backfill of `days` would sync, in order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRange`] if the range is inverted.
    pub fn plan(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<NaiveDate>> {
        let (start, end) = days.into_inner();
        if start > end {
            return Err(Error::InvalidRange { start, end });
        }
        Ok(start.iter_days().take_while(|day| *day <= end).collect())
    }

    fn emit(&self, event: Event<'_>) {
        if let Some(observer) = &self.observer {
            observer(&event);
        }
    }

    /// Fetches one day (`None`: today in the job's time zone) and upserts it,
    /// retrying retryable failures under the job's policy.
    ///
    /// The result depends only on what `fetch` returns for that day, never
    /// on what was synced before.
    ///
    /// # Errors
    ///
    /// [`Error::Fetch`], [`Error::Timeout`] or [`Error::Panicked`] for the
    /// fetch, or any error of [`upsert`](crate::upsert); in each case the
    /// failed attempt wrote nothing.
    pub async fn sync_one_day<S, F>(
        &self,
        store: &S,
        fetch: &F,
        day: Option<NaiveDate>,
    ) -> Result<DayReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let day = day.unwrap_or_else(|| self.today());
        self.run_day(store, fetch, day)
            .await
            .map_err(|(error, _)| error)
    }

    /// The daily job with a lookback: syncs today and the `days` before it
    /// (late-arriving data), through [`Job::backfill`].
    ///
    /// # Errors
    ///
    /// As [`Job::backfill`]; [`Error::InvalidRange`] if the lookback reaches
    /// before the calendar's first day.
    pub async fn sync_recent<S, F>(&self, store: &S, fetch: &F, days: u32) -> Result<RunReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let today = self.today();
        let start = today
            .checked_sub_signed(chrono::Duration::days(i64::from(days)))
            .ok_or(Error::InvalidRange {
                start: NaiveDate::MIN,
                end: today,
            })?;
        self.backfill(store, fetch, start..=today).await
    }

    /// Syncs every day of `days` (inclusive) through [`Job::sync_one_day`],
    /// up to [`Job::concurrency`] days at once, and reports each day in day
    /// order. It has no write logic of its own.
    ///
    /// Every day is attempted even when another fails (unless
    /// [`Job::fail_fast`]). Dropping the returned future starts no new day;
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
        let planned = self.plan(days)?;
        let span = tracing::info_span!(
            "backfill",
            start = %planned[0],
            end = %planned[planned.len() - 1],
            days = planned.len(),
            concurrency = self.concurrency,
            dry_run = self.dry_run,
        );
        self.run(store, fetch, planned).instrument(span).await
    }

    async fn run<S, F>(&self, store: &S, fetch: &F, planned: Vec<NaiveDate>) -> Result<RunReport>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let started = Instant::now();
        self.emit(Event::RunStarted { days: &planned });
        let mut report = RunReport {
            planned,
            dry_run: self.dry_run,
            ..RunReport::default()
        };
        if self.dry_run {
            tracing::info!(
                days = report.planned.len(),
                "dry run: nothing fetched or written"
            );
            self.emit(Event::RunFinished { report: &report });
            return Ok(report);
        }

        let stop = AtomicBool::new(false);
        let stop = &stop;
        let mut outcomes: Vec<Outcome> = futures_util::stream::iter(report.planned.clone())
            .map(|day| async move {
                if stop.load(Ordering::SeqCst) {
                    return Outcome::Skipped(day);
                }
                match self.run_day(store, fetch, day).await {
                    Ok(day_report) => Outcome::Done(day_report),
                    Err((error, attempts)) => {
                        if self.fail_fast {
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
                    report.failed.push(FailedDay {
                        day,
                        attempts,
                        error: error.to_string(),
                    });
                    failed.push((day, error));
                }
            }
        }
        report.elapsed = started.elapsed();
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
            Err(Error::Backfill(Box::new(BackfillError { failed, report })))
        }
    }

    /// One day, with retries; on failure, the last error and the attempts.
    async fn run_day<S, F>(
        &self,
        store: &S,
        fetch: &F,
        day: NaiveDate,
    ) -> Result<DayReport, (Error, u32)>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let span = tracing::info_span!(
            "day",
            day = %day,
            attempts = tracing::field::Empty,
            inserted = tracing::field::Empty,
            updated = tracing::field::Empty,
            unchanged = tracing::field::Empty,
            stale = tracing::field::Empty,
            deleted = tracing::field::Empty,
        );
        let started = Instant::now();
        let mut attempt = 0;
        async {
            loop {
                attempt += 1;
                self.emit(Event::DayStarted { day, attempt });
                match self.attempt(store, fetch, day).await {
                    Ok(counts) => {
                        let span = tracing::Span::current();
                        span.record("attempts", attempt);
                        span.record("inserted", counts.inserted);
                        span.record("updated", counts.updated);
                        span.record("unchanged", counts.unchanged);
                        span.record("stale", counts.stale);
                        span.record("deleted", counts.deleted);
                        tracing::info!("day synced");
                        let report = DayReport {
                            day,
                            counts,
                            attempts: attempt,
                            elapsed: started.elapsed(),
                        };
                        self.emit(Event::DayFinished { report: &report });
                        return Ok(report);
                    }
                    Err(error) if error.is_retryable() && attempt < self.retry.attempts => {
                        let delay = self.retry.delay(attempt);
                        tracing::warn!(attempt, ?delay, %error, "day failed, retrying");
                        self.emit(Event::DayRetrying {
                            day,
                            attempt,
                            error: &error,
                            delay,
                        });
                        tokio::time::sleep(delay).await;
                    }
                    Err(error) => {
                        tracing::Span::current().record("attempts", attempt);
                        tracing::error!(attempt, %error, "day failed");
                        self.emit(Event::DayFailed {
                            day,
                            attempts: attempt,
                            error: &error,
                        });
                        return Err((error, attempt));
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt: fetch, then the one write path. A panic in either is
    /// caught and becomes this day's error.
    async fn attempt<S, F>(&self, store: &S, fetch: &F, day: NaiveDate) -> Result<Counts>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let work = async {
            let records = fetch
                .fetch(day)
                .await
                .map_err(|source| fetch_error(day, source))?;
            upsert(store, day, records, self.write).await
        };
        let work = AssertUnwindSafe(work).catch_unwind();
        let outcome = match self.day_timeout {
            Some(after) => tokio::time::timeout(after, work)
                .await
                .map_err(|_| Error::Timeout { day, after })?,
            None => work.await,
        };
        outcome.unwrap_or_else(|panic| {
            Err(Error::Panicked {
                day,
                message: panic_message(&*panic),
            })
        })
    }
}

/// A fetch's error as the job reports it. A record rule broken while the
/// fetch built its records (`Record::new(..)?`) is reported as the typed
/// record error itself, not hidden inside `Error::Fetch`.
fn fetch_error(day: NaiveDate, source: crate::BoxError) -> Error {
    match source.downcast::<Error>() {
        Ok(error) if matches!(*error, Error::InvalidRecord { .. } | Error::WrongDay { .. }) => {
            *error
        }
        Ok(error) => Error::Fetch { day, source: error },
        Err(source) => Error::Fetch { day, source },
    }
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

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Fetches one day (`None`: today in UTC) and upserts it, with the default
/// [`Job`].
///
/// # Errors
///
/// See [`Job::sync_one_day`].
pub async fn sync_one_day<S, F>(store: &S, fetch: &F, day: Option<NaiveDate>) -> Result<DayReport>
where
    S: Store + ?Sized,
    F: Fetch + ?Sized,
{
    Job::default().sync_one_day(store, fetch, day).await
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

#[cfg(feature = "serde")]
fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// What syncing one day did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct DayReport {
    /// The day synced.
    pub day: NaiveDate,
    /// What the write did.
    pub counts: Counts,
    /// How many attempts it took.
    pub attempts: u32,
    /// Wall time of all attempts, retry delays included.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "elapsed_ms", serialize_with = "as_millis")
    )]
    pub elapsed: Duration,
}

/// A day that failed for good.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FailedDay {
    /// The day.
    pub day: NaiveDate,
    /// Attempts made.
    pub attempts: u32,
    /// The last error, as text (the typed error is in
    /// [`BackfillError::failed`]).
    pub error: String,
}

impl fmt::Display for FailedDay {
    /// One line of the run report's table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<10}  FAILED after {} attempts: {}",
            self.day, self.attempts, self.error
        )
    }
}

/// What a backfill did, day by day, in day order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RunReport {
    /// Every day of the range, in order.
    pub planned: Vec<NaiveDate>,
    /// One report per synced day, in day order.
    pub days: Vec<DayReport>,
    /// The days that failed, in day order.
    pub failed: Vec<FailedDay>,
    /// Days never started because of [`Job::fail_fast`].
    pub skipped: Vec<NaiveDate>,
    /// Whether this was a dry run (nothing fetched or written).
    pub dry_run: bool,
    /// Wall time of the whole run.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "elapsed_ms", serialize_with = "as_millis")
    )]
    pub elapsed: Duration,
}

impl RunReport {
    /// The counts of all synced days added up.
    pub fn totals(&self) -> Counts {
        let mut total = Counts::default();
        for day in &self.days {
            total += day.counts;
        }
        total
    }
}

impl fmt::Display for RunReport {
    /// A table: one line per day, then the totals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dry_run {
            write!(f, "dry run: would sync {} days:", self.planned.len())?;
            for day in &self.planned {
                write!(f, " {day}")?;
            }
            return Ok(());
        }
        writeln!(
            f,
            "{:<10}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}  {:>9}  {:>8}  {:>8}",
            "day",
            "inserted",
            "updated",
            "unchanged",
            "stale",
            "deleted",
            "collapsed",
            "attempts",
            "ms"
        )?;
        let line = |f: &mut fmt::Formatter<'_>,
                    label: &str,
                    c: &Counts,
                    attempts: u32,
                    elapsed: Duration| {
            writeln!(
                f,
                "{:<10}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}  {:>9}  {:>8}  {:>8.1}",
                label,
                c.inserted,
                c.updated,
                c.unchanged,
                c.stale,
                c.deleted,
                c.collapsed,
                attempts,
                elapsed.as_secs_f64() * 1000.0
            )
        };
        let mut failed = self.failed.iter().peekable();
        for day in &self.days {
            while let Some(failure) = failed.next_if(|x| x.day < day.day) {
                writeln!(f, "{failure}")?;
            }
            line(
                f,
                &day.day.to_string(),
                &day.counts,
                day.attempts,
                day.elapsed,
            )?;
        }
        for failure in failed {
            writeln!(f, "{failure}")?;
        }
        for day in &self.skipped {
            writeln!(f, "{day:<10}  not started (fail-fast)")?;
        }
        let attempts = self.days.iter().map(|d| d.attempts).sum();
        line(f, "total", &self.totals(), attempts, self.elapsed)?;
        write!(
            f,
            "{} of {} days synced, rows written: {}",
            self.days.len(),
            self.planned.len(),
            self.totals().written()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, Record, Transient};
    use chrono_tz::Tz;
    use std::sync::Mutex;

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    fn today_in(zone: Tz, now: DateTime<Utc>) -> NaiveDate {
        Job::new().clock(FixedClock(now)).time_zone(zone).today()
    }

    #[test]
    fn today_follows_the_zone_across_dst_changes() {
        let ny = chrono_tz::America::New_York;
        // Spring forward, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
        assert_eq!(today_in(ny, utc(2026, 3, 8, 4, 59)), date(2026, 3, 7)); // 23:59 EST
        assert_eq!(today_in(ny, utc(2026, 3, 8, 5, 0)), date(2026, 3, 8)); // 00:00 EST
        assert_eq!(today_in(ny, utc(2026, 3, 9, 3, 59)), date(2026, 3, 8)); // 23:59 EDT
        assert_eq!(today_in(ny, utc(2026, 3, 9, 4, 0)), date(2026, 3, 9)); // 00:00 EDT
                                                                           // Fall back, 2026-11-01: the day is 25 hours long.
        assert_eq!(today_in(ny, utc(2026, 11, 1, 4, 0)), date(2026, 11, 1)); // 00:00 EDT
        assert_eq!(today_in(ny, utc(2026, 11, 2, 4, 59)), date(2026, 11, 1)); // 23:59 EST
        assert_eq!(today_in(ny, utc(2026, 11, 2, 5, 0)), date(2026, 11, 2));
    }

    #[test]
    fn today_far_from_utc() {
        let kiritimati = chrono_tz::Pacific::Kiritimati; // UTC+14
        let pago_pago = chrono_tz::Pacific::Pago_Pago; // UTC-11
        let now = utc(2026, 6, 30, 12, 0);
        assert_eq!(today_in(kiritimati, now), date(2026, 7, 1));
        assert_eq!(today_in(pago_pago, now), date(2026, 6, 30));
        assert_eq!(
            today_in(pago_pago, utc(2026, 7, 1, 10, 59)),
            date(2026, 6, 30)
        );
        assert_eq!(Job::new().clock(FixedClock(now)).today(), date(2026, 6, 30));
    }

    #[test]
    fn retry_delays_grow_and_are_capped() {
        let retry = Retry::default()
            .backoff(Duration::from_millis(100), Duration::from_millis(500))
            .jitter(false);
        let delays: Vec<_> = (1..=5).map(|n| retry.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        let jittered = retry.jitter(true);
        for n in 1..=5 {
            let d = jittered.delay(n);
            assert!(d >= retry.delay(n) / 2 && d <= retry.delay(n), "{d:?}");
        }
        assert_eq!(Retry::none().max_attempts(), 1);
        assert_eq!(Retry::default().attempts(0).max_attempts(), 1);
    }

    fn fetch_ok(day: NaiveDate) -> std::future::Ready<Result<Vec<Record>, Transient>> {
        let at = day.and_hms_opt(1, 0, 0).unwrap().and_utc();
        std::future::ready(Ok(vec![
            Record::new(format!("k:{day}"), day, "v", at).unwrap()
        ]))
    }

    #[tokio::test]
    async fn observer_sees_every_event_in_order_for_a_day() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let fetch = |day: NaiveDate| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::ready(Err(Transient::new("503")))
            } else {
                fetch_ok(day)
            }
        };
        let job = Job::new()
            .retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO))
            .observer(move |event| {
                let line = match event {
                    Event::RunStarted { days } => format!("run {}", days.len()),
                    Event::DayStarted { day, attempt } => format!("start {day} #{attempt}"),
                    Event::DayRetrying { day, attempt, .. } => format!("retry {day} #{attempt}"),
                    Event::DayFinished { report } => {
                        format!("done {} {}", report.day, report.counts.inserted)
                    }
                    Event::DayFailed { day, .. } => format!("failed {day}"),
                    Event::RunFinished { report } => format!("end {}", report.days.len()),
                };
                sink.lock().unwrap().push(line);
            });
        let store = MemoryStore::new();
        job.backfill(&store, &fetch, date(2026, 1, 1)..=date(2026, 1, 2))
            .await
            .unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "run 2",
                "start 2026-01-01 #1",
                "retry 2026-01-01 #1",
                "start 2026-01-01 #2",
                "done 2026-01-01 1",
                "start 2026-01-02 #1",
                "done 2026-01-02 1",
                "end 2",
            ]
        );
    }

    #[tokio::test]
    async fn fail_fast_stops_starting_days() {
        let fetch = |day: NaiveDate| {
            if day == date(2026, 1, 2) {
                std::future::ready(Err(Transient::new("down")))
            } else {
                fetch_ok(day)
            }
        };
        let store = MemoryStore::new();
        let job = Job::new().retry(Retry::none()).fail_fast(true);
        let Err(Error::Backfill(e)) = job
            .backfill(&store, &fetch, date(2026, 1, 1)..=date(2026, 1, 5))
            .await
        else {
            panic!("expected a failed backfill");
        };
        assert_eq!(e.report.days.len(), 1);
        assert_eq!(
            e.report.skipped,
            [date(2026, 1, 3), date(2026, 1, 4), date(2026, 1, 5)]
        );
        assert_eq!(e.failed.len(), 1);
        let text = e.to_string();
        assert!(
            text.contains("1 of 5 days") && text.contains("2026-01-02"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn report_renders_as_a_table_and_json() {
        let store = MemoryStore::new();
        let report = Job::new()
            .backfill(&store, &fetch_ok, date(2026, 1, 1)..=date(2026, 1, 3))
            .await
            .unwrap();
        let table = report.to_string();
        let lines: Vec<_> = table.lines().collect();
        assert!(
            lines[0].starts_with("day") && lines[0].contains("unchanged"),
            "{table}"
        );
        assert!(lines[1].starts_with("2026-01-01"), "{table}");
        assert!(lines[4].starts_with("total"), "{table}");
        assert!(
            table.ends_with("3 of 3 days synced, rows written: 3"),
            "{table}"
        );
        let dry = Job::new().dry_run(true);
        let plan = dry.backfill(&store, &fetch_ok, date(2026, 1, 1)..=date(2026, 1, 2));
        assert_eq!(
            plan.await.unwrap().to_string(),
            "dry run: would sync 2 days: 2026-01-01 2026-01-02"
        );
        #[cfg(feature = "serde")]
        {
            let json = serde_json::to_value(&report).unwrap();
            assert_eq!(json["days"][0]["day"], "2026-01-01");
            assert_eq!(json["days"][0]["counts"]["inserted"], 1);
            assert_eq!(json["days"][0]["attempts"], 1);
            assert!(json["days"][0]["elapsed_ms"].is_f64());
            assert_eq!(json["planned"].as_array().unwrap().len(), 3);
        }
    }

    #[tokio::test]
    async fn lookback_resyncs_today_and_the_days_before() {
        let job = Job::new().clock(FixedClock(utc(2026, 4, 10, 15, 0)));
        let store = MemoryStore::new();
        let report = job.sync_recent(&store, &fetch_ok, 3).await.unwrap();
        let days: Vec<_> = report.days.iter().map(|d| d.day).collect();
        assert_eq!(
            days,
            [
                date(2026, 4, 7),
                date(2026, 4, 8),
                date(2026, 4, 9),
                date(2026, 4, 10)
            ]
        );
        let again = job.sync_recent(&store, &fetch_ok, 3).await.unwrap();
        assert_eq!(again.totals().written(), 0);
    }
}
