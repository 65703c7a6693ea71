//! [`Event`]s: what a job tells its observer while it runs.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDate;

use super::report::{DayReport, RunReport};
use crate::error::Error;
use crate::ledger::RunId;

/// The function given to [`Job::observer`](super::Job::observer).
pub(super) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// What a job reports while it runs, to the observer given to
/// [`Job::observer`](super::Job::observer).
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A backfill is about to run these days, in this order.
    RunStarted {
        /// The run's id, also in its report and ledger rows.
        run_id: &'a RunId,
        /// The planned days.
        days: &'a [NaiveDate],
        /// The range the run was asked for, of which `days` are those
        /// its selection and shard picked.
        range: &'a RangeInclusive<NaiveDate>,
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
    /// A day failed for good. Its failure is in the store's ledger, unless
    /// the error [`is_fatal`](Error::is_fatal).
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

impl Event<'_> {
    /// A day's event as one log line, the way the command line's log and
    /// Python's `logging` print it — a day synced, retried, or failed
    /// (`None` for the other events); `error` words an error (the command
    /// line names its own flags), of which the line keeps the first line.
    ///
    /// ```text
    /// 2026-01-05 synced: inserted 2 updated 0 deleted 0 unchanged 0 stale 0 skipped 0 (1 attempt)
    /// 2026-01-06 synced: inserted 40 … (1 attempt) FLAGGED volume check: 40 records fetched, fewer than 250 …
    /// 2026-01-06 attempt 1 failed, retrying in 1.6 s: fetching 2026-01-06 failed: …
    /// 2026-01-07 FAILED after 3 attempts: fetching 2026-01-07 failed: …
    /// ```
    pub fn day_line(&self, error: impl Fn(&Error) -> String) -> Option<String> {
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        let first_line = |e: &Error| error(e).lines().next().unwrap_or_default().to_owned();
        Some(match self {
            Event::DayFinished { report } => {
                let c = &report.counts;
                format!(
                    "{} synced: inserted {} updated {} deleted {} unchanged {} stale {} skipped {} ({} attempt{})",
                    report.day,
                    c.inserted,
                    c.updated,
                    c.deleted,
                    c.unchanged,
                    c.stale,
                    c.skipped,
                    report.attempts,
                    plural(report.attempts)
                ) + &report
                    .flag
                    .as_ref()
                    .map_or(String::new(), |flag| format!(" FLAGGED {flag}"))
            }
            Event::DayRetrying {
                day,
                attempt,
                error,
                delay,
            } => format!(
                "{day} attempt {attempt} failed, retrying in {:.1} s: {}",
                delay.as_secs_f64(),
                first_line(error)
            ),
            Event::DayFailed {
                day,
                attempts,
                error,
            } => format!(
                "{day} FAILED after {attempts} attempt{}: {}",
                plural(*attempts),
                first_line(error)
            ),
            _ => return None,
        })
    }
}
