//! How a scenario measures: the run it belongs to, the timed backfill of
//! the whole dataset, the floor, and the store's counters between two
//! readings.

use std::time::Instant;

use backfill_core::{Counts, FixedClock, Job, Mode, Record, Retry, RunReport, Store};
use chrono::NaiveDate;

use crate::dataset::{day_records, fetch_from, first_day, keyed_day, nth_day, Feed, Keys};
use crate::settings::Settings;
use crate::stores::{peak_rss, reset_peak_rss, Env, Kind, Target};
use crate::Measurement;

/// One store's run: its kind, the settings, and where its fresh tables
/// come from.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    pub(crate) kind: Kind,
    pub(crate) s: &'a Settings,
    pub(crate) env: Env,
    quiet: bool,
}

impl<'a> Run<'a> {
    pub(crate) async fn new(kind: Kind, s: &'a Settings, quiet: bool) -> Result<Self, String> {
        Ok(Self {
            kind,
            s,
            env: Env::new(kind).await?,
            quiet,
        })
    }

    /// Progress on stderr, unless the run prints JSON.
    pub(crate) fn log(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{}: {msg}", self.kind);
        }
    }

    /// An empty line of this store for `scenario`, to fill in.
    pub(crate) fn line(&self, scenario: &'static str) -> Measurement {
        Measurement {
            store: self.kind.name(),
            scenario,
            ..Measurement::default()
        }
    }

    /// A throughput verdict, or none in a quick run: quick runs are too
    /// small for throughput ratios to mean anything, so they show the
    /// figures but judge only the exact counts.
    pub(crate) fn judged(&self, pass: Option<bool>) -> Option<bool> {
        if self.s.quick {
            None
        } else {
            pass
        }
    }
}

/// The job every scenario runs unless it says otherwise: the run's
/// concurrency, no retries (a failure is a result).
pub(crate) fn job(s: &Settings) -> Job {
    job_at(s.concurrency)
}

/// The same job with `days` days in flight.
pub(crate) fn job_at(days: usize) -> Job {
    Job::new().concurrency(days).retry(Retry::none())
}

/// Every day of the dataset, `s.days` days of `s.per_day` records.
pub(crate) fn all_rows(s: &Settings) -> Vec<Record> {
    (0..s.days)
        .flat_map(|d| day_records(nth_day(d), s.per_day, false))
        .collect()
}

/// The best of `repeat` floor runs into fresh, empty tables, with
/// `streams` writers (see [`crate::stores::Target::bulk_load_streams`]).
pub(crate) async fn floor_seconds(
    env: &mut Env,
    rows: &[Record],
    streams: usize,
    repeat: u32,
) -> Result<f64, String> {
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let target = env.fresh(streams).await?;
        let started = Instant::now();
        target.bulk_load_streams(rows, streams).await?;
        best = best.min(started.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The whole dataset through `job.backfill`, on any store: the report,
/// the seconds it took and the peak RSS during it.
pub(crate) async fn timed_backfill(
    store: &dyn Store,
    job: Job,
    s: &Settings,
) -> Result<(RunReport, f64, u64), String> {
    timed_backfill_keyed(store, job, s, Keys::Friendly).await
}

/// [`timed_backfill`] of the dataset with `keys`' keys.
pub(crate) async fn timed_backfill_keyed(
    store: &dyn Store,
    job: Job,
    s: &Settings,
    keys: Keys,
) -> Result<(RunReport, f64, u64), String> {
    let feed =
        Feed::new((0..s.days).map(|d| (nth_day(d), keyed_day(keys, nth_day(d), s.per_day, false))));
    reset_peak_rss();
    let started = Instant::now();
    let report = job
        .backfill(
            store,
            &|d| fetch_from(&feed, d),
            first_day()..=nth_day(s.days - 1),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((report, started.elapsed().as_secs_f64(), peak_rss()))
}

/// The best of `s.repeat` backfills of the dataset with `keys`' keys, each
/// at `s.concurrency` into a fresh table.
#[derive(Debug)]
pub(crate) struct Best {
    pub(crate) seconds: f64,
    /// The highest peak RSS of the runs.
    pub(crate) peak: u64,
    /// Record rows the engine counted as written in the best run (the
    /// ledger's rows left out), or the report's count on the memory store.
    pub(crate) written: Option<u64>,
    /// The table of the last run, holding the dataset.
    pub(crate) target: Target,
}

pub(crate) async fn best_backfill(
    run: &mut Run<'_>,
    s: &Settings,
    keys: Keys,
) -> Result<Best, String> {
    let mut best = f64::MAX;
    let mut kept: Option<Target> = None;
    let mut peak = 0;
    let mut written = None;
    for _ in 0..s.repeat {
        let target = run.env.fresh(s.concurrency).await?;
        let (report, seconds, run_peak) =
            timed_backfill_keyed(target.store(), job(s), s, keys).await?;
        peak = peak.max(run_peak);
        if report.totals().inserted != s.rows() {
            return Err(format!("backfill inserted {:?}", report.totals()));
        }
        if seconds < best {
            best = seconds;
            written = target
                .rows_written()
                .await?
                .map(|w| w.saturating_sub(ledger_rows(run.kind, s.days)))
                .or(Some(report.totals().written()));
        }
        kept = Some(target);
    }
    Ok(Best {
        seconds: best,
        peak,
        written,
        target: kept.expect("at least one run"),
    })
}

/// What syncing one day did.
#[derive(Debug)]
pub(crate) struct DayRun {
    pub(crate) counts: Counts,
    pub(crate) seconds: f64,
    pub(crate) peak: u64,
    /// Record rows the engine counted as written (the ledger's row left out).
    pub(crate) written: u64,
    pub(crate) wal: Option<u64>,
}

/// Syncs `records` as `day` in `mode`, as of the next midnight (so two
/// replaces of one listing are true as of the same instant, the second
/// its identical re-apply).
pub(crate) async fn sync_one(
    run: &Run<'_>,
    target: &Target,
    day: NaiveDate,
    records: Vec<Record>,
    mode: Mode,
) -> Result<DayRun, String> {
    let feed = Feed::new([(day, records)]);
    let w0 = target.rows_written().await?;
    let wal0 = target.wal_lsn().await?;
    reset_peak_rss();
    let started = Instant::now();
    let as_of = (day + chrono::Duration::days(1))
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let report = job(run.s)
        .mode(mode)
        .clock(FixedClock(as_of))
        .sync_day(target.store(), &|d| fetch_from(&feed, d), day)
        .await
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_rss();
    let written = delta(w0, target.rows_written().await?)
        .map(|w| w.saturating_sub(ledger_rows(run.kind, 1)))
        .unwrap_or(report.counts.written());
    let wal = delta(wal0, target.wal_lsn().await?);
    Ok(DayRun {
        counts: report.counts,
        seconds,
        peak,
        written,
        wal,
    })
}

/// The ledger rows that `rows_written` counts besides records when `days`
/// days are synced: SQLite's `total_changes()` counts every table of the
/// file, and each synced day writes its ledger row and its timing;
/// Postgres' statistics are the records table's own.
pub(crate) fn ledger_rows(kind: Kind, days: u32) -> u64 {
    if kind == Kind::Sqlite {
        2 * u64::from(days)
    } else {
        0
    }
}

/// A counter's growth between two readings (`None` if the store has none).
pub(crate) fn delta(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before?))
}

/// Notes `what` when `cond` does not hold.
pub(crate) fn check(cond: bool, what: &str, failures: &mut Vec<String>) {
    if !cond {
        failures.push(what.to_owned());
    }
}
