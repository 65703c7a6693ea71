//! The jobs: [`sync_one_day`] and [`backfill`], both built on
//! [`upsert`](crate::upsert) alone.

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, TimeZone, Utc};

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

/// The configuration shared by [`Job::sync_one_day`] and [`Job::backfill`]:
/// clock, time zone and write options. The free functions [`sync_one_day`]
/// and [`backfill`] use `Job::default()`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
/// use backfill_core::{FixedClock, Job, MemoryStore, Record};
/// use chrono::{FixedOffset, NaiveDate, TimeZone, Utc};
///
/// // 20:00 UTC on 1 March is already 2 March in Tokyo.
/// let clock = FixedClock(Utc.with_ymd_and_hms(2026, 3, 1, 20, 0, 0).unwrap());
/// let tokyo = FixedOffset::east_opt(9 * 3600).unwrap();
/// let job = Job::new().clock(clock).time_zone(tokyo);
/// assert_eq!(job.today(), NaiveDate::from_ymd_opt(2026, 3, 2).unwrap());
///
/// let fetch = |day: NaiveDate| async move {
///     let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc();
///     Ok::<_, std::io::Error>(vec![Record::new(format!("event:{day}"), day, "{}", at).unwrap()])
/// };
/// let store = MemoryStore::new();
/// let report = job.sync_one_day(&store, &fetch, None).await?;
/// assert_eq!((report.day, report.counts.inserted), (job.today(), 1));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Job {
    clock: Arc<dyn Clock>,
    calendar: Calendar,
    zone: String,
    write: WriteOptions,
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
            .finish()
    }
}

impl Job {
    /// A job on the system clock, in UTC, merging, with strict event dates.
    pub fn new() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            calendar: Arc::new(|now| now.date_naive()),
            zone: "UTC".to_owned(),
            write: WriteOptions::default(),
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

    /// Today, in the job's time zone, by the job's clock.
    pub fn today(&self) -> NaiveDate {
        (self.calendar)(self.clock.now())
    }

    /// Fetches one day (`None`: today in the job's time zone) and upserts it.
    ///
    /// The result depends only on what `fetch` returns for that day, never
    /// on what was synced before.
    ///
    /// # Errors
    ///
    /// [`Error::Fetch`] if the fetch failed, or any error of
    /// [`upsert`](crate::upsert); nothing is written in either case.
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
        let started = Instant::now();
        let records = fetch
            .fetch(day)
            .await
            .map_err(|source| Error::Fetch { day, source })?;
        let counts = upsert(store, day, records, self.write).await?;
        Ok(DayReport {
            day,
            counts,
            attempts: 1,
            elapsed: started.elapsed(),
        })
    }

    /// Syncs every day of `days` (inclusive), one after another, through
    /// [`Job::sync_one_day`]. Every day is attempted even when an earlier one
    /// fails.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRange`] if the range is inverted (nothing fetched);
    /// [`Error::Backfill`] listing every failed day with its error, after
    /// all days were attempted.
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
        let (start, end) = days.into_inner();
        if start > end {
            return Err(Error::InvalidRange { start, end });
        }
        let mut report = RunReport::default();
        let mut failed = Vec::new();
        for day in start.iter_days().take_while(|day| *day <= end) {
            match self.sync_one_day(store, fetch, Some(day)).await {
                Ok(day_report) => report.days.push(day_report),
                Err(error) => failed.push((day, error)),
            }
        }
        if failed.is_empty() {
            Ok(report)
        } else {
            Err(Error::Backfill(Box::new(BackfillError { failed, report })))
        }
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

/// Syncs every day of an inclusive range with the default [`Job`].
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

/// What syncing one day did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DayReport {
    /// The day synced.
    pub day: NaiveDate,
    /// What the write did.
    pub counts: Counts,
    /// How many attempts it took.
    pub attempts: u32,
    /// Wall time, fetch and write.
    pub elapsed: Duration,
}

/// What a backfill did, day by day, in day order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// One report per successful day, in day order.
    pub days: Vec<DayReport>,
}

impl RunReport {
    /// The counts of all days added up.
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
        writeln!(
            f,
            "{:<10}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}  {:>9}  {:>8}",
            "day", "inserted", "updated", "unchanged", "stale", "deleted", "collapsed", "ms"
        )?;
        let line = |f: &mut fmt::Formatter<'_>, label: &str, c: &Counts, elapsed: Duration| {
            writeln!(
                f,
                "{:<10}  {:>8}  {:>8}  {:>9}  {:>6}  {:>7}  {:>9}  {:>8.1}",
                label,
                c.inserted,
                c.updated,
                c.unchanged,
                c.stale,
                c.deleted,
                c.collapsed,
                elapsed.as_secs_f64() * 1000.0
            )
        };
        for day in &self.days {
            line(f, &day.day.to_string(), &day.counts, day.elapsed)?;
        }
        let total = self.days.iter().map(|d| d.elapsed).sum();
        line(f, "total", &self.totals(), total)?;
        write!(f, "rows written: {}", self.totals().written())
    }
}
