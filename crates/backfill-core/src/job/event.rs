//! [`Event`]s: what a job tells its observer while it runs.

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
