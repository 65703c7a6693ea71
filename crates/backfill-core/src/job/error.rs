//! [`BackfillError`]: the error of a run some of whose days failed.

use std::fmt;

use chrono::NaiveDate;

use super::report::RunReport;
use crate::error::Error;

/// The failed days of a backfill, with the report of the days that
/// succeeded: [`Error::Backfill`].
#[derive(Debug)]
#[non_exhaustive]
pub struct BackfillError {
    /// Each failed day with its error, in day order.
    pub failed: Vec<(NaiveDate, Error)>,
    /// The whole run: the days that succeeded, the failed ones as text, the
    /// ones never started.
    pub report: RunReport,
}

impl BackfillError {
    /// The error of a run whose `report` lists the days that failed with
    /// the errors in `failed`.
    pub fn new(failed: Vec<(NaiveDate, Error)>, report: RunReport) -> Self {
        Self { failed, report }
    }
}

impl fmt::Display for BackfillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backfill failed for {} of {} days",
            self.failed.len(),
            self.report.planned.len()
        )?;
        if !self.report.skipped.is_empty() {
            write!(f, " ({} not started)", self.report.skipped.len())?;
        }
        f.write_str(":")?;
        for (day, error) in &self.failed {
            write!(f, "\n  {day}: {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BackfillError {}
