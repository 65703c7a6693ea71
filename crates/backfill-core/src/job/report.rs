//! What a job did: [`DayReport`], [`FailedDay`], [`RunReport`], and the
//! [`BackfillError`] a run with failed days returns.

use std::fmt;
use std::time::Duration;

use chrono::NaiveDate;

use super::select::NotSelected;
use crate::check::Flag;
use crate::counts::Counts;
use crate::ledger::RunId;

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
    /// Whether this was a dry run: nothing fetched or written, no attempt
    /// made (`attempts` is 0).
    pub dry_run: bool,
    /// The per-day [check](crate::check) that flagged the day, if one did
    /// (with the action `warn`: the day was written).
    pub flag: Option<Flag>,
}

impl DayReport {
    /// A report of `day` synced in one attempt with `counts`, taking no
    /// time; set the public fields for anything else. For tests of your own
    /// observers and report handling:
    ///
    /// ```
    /// use std::time::Duration;
    /// use backfill_core::{Counts, DayReport};
    /// use chrono::NaiveDate;
    ///
    /// let mut counts = Counts::default();
    /// counts.inserted = 10;
    /// let mut report = DayReport::new(NaiveDate::from_ymd_opt(2026, 1, 1).unwrap(), counts);
    /// report.attempts = 2;
    /// report.elapsed = Duration::from_millis(40);
    /// assert_eq!(report.counts.written(), 10);
    /// ```
    pub fn new(day: NaiveDate, counts: Counts) -> Self {
        Self {
            day,
            counts,
            attempts: 1,
            elapsed: Duration::ZERO,
            dry_run: false,
            flag: None,
        }
    }
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
    /// [`BackfillError::failed`](crate::BackfillError::failed)).
    pub error: String,
}

impl FailedDay {
    /// A day that failed after `attempts` with `error` (its text).
    pub fn new(day: NaiveDate, attempts: u32, error: impl fmt::Display) -> Self {
        Self {
            day,
            attempts,
            error: error.to_string(),
        }
    }
}

impl fmt::Display for FailedDay {
    /// One line of the run report's table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "{:<10}  FAILED after {} attempt{plural}: {}",
            self.day, self.attempts, self.error
        )
    }
}

/// What a backfill did, day by day, in day order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RunReport {
    /// The run's id, in its events, spans and ledger rows (`None` only for
    /// a report built by hand).
    pub run_id: Option<RunId>,
    /// The days the run set out to sync, in order: every day of the range,
    /// or those its [`Select`](super::Select) picked.
    pub planned: Vec<NaiveDate>,
    /// The days of the range its [`Select`](super::Select) left out, and
    /// why, in order.
    pub not_selected: Vec<NotSelected>,
    /// One report per synced day, in day order.
    pub days: Vec<DayReport>,
    /// The days that failed, in day order.
    pub failed: Vec<FailedDay>,
    /// Days never started, because of [`Job::fail_fast`](super::Job::fail_fast),
    /// a [`Fatal`](crate::Fatal) fetch error, or because the run was
    /// stopped.
    pub skipped: Vec<NaiveDate>,
    /// Whether the run's [`StopHandle`](super::StopHandle) was stopped
    /// (days in flight then finished; days not started are `skipped`).
    pub stopped: bool,
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
    /// An empty report of a run that planned `planned`; push the outcomes
    /// into its public fields. For tests of your own report handling:
    ///
    /// ```
    /// use backfill_core::{Counts, DayReport, FailedDay, RunReport};
    /// use chrono::NaiveDate;
    ///
    /// let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
    /// let mut report = RunReport::new(vec![jan(1), jan(2)]);
    /// report.days.push(DayReport::new(jan(1), Counts::default()));
    /// report.failed.push(FailedDay::new(jan(2), 3, "upstream returned 503"));
    /// assert!(report.to_string().contains("FAILED after 3 attempts"));
    /// ```
    pub fn new(planned: Vec<NaiveDate>) -> Self {
        Self {
            planned,
            ..Self::default()
        }
    }

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
            if !self.not_selected.is_empty() {
                write!(f, "\n{}", NotSelectedSummary(&self.not_selected))?;
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
            let label = if day.counts.skipped > 0 {
                format!("{} =", day.day)
            } else {
                day.day.to_string()
            };
            line(f, &label, &day.counts, day.attempts, day.elapsed)?;
            if let Some(flag) = &day.flag {
                writeln!(f, "{:<10}  FLAGGED {flag}", "")?;
            }
        }
        for failure in failed {
            writeln!(f, "{failure}")?;
        }
        // One line however many: a run stopped early can leave hundreds.
        // Not stopped by the caller: by a failed day, under fail-fast or
        // for a fatal error.
        let why = if self.stopped {
            "stopped"
        } else {
            "stopped by a failed day"
        };
        match self.skipped.as_slice() {
            [] => {}
            [day] => writeln!(f, "{day:<10}  not started ({why})")?,
            [first, .., last] => writeln!(
                f,
                "{first} … {last}  not started ({why}): {} days",
                self.skipped.len()
            )?,
        }
        let attempts = self.days.iter().map(|d| d.attempts).sum();
        line(f, "total", &self.totals(), attempts, self.elapsed)?;
        if !self.not_selected.is_empty() {
            writeln!(f, "{}", NotSelectedSummary(&self.not_selected))?;
        }
        let unchanged_days = self.days.iter().filter(|d| d.counts.skipped > 0).count();
        if unchanged_days > 0 {
            writeln!(
                f,
                "= {unchanged_days} days skipped: same digest as their last sync, nothing read or written"
            )?;
        }
        let flagged = self.days.iter().filter(|d| d.flag.is_some()).count();
        if flagged > 0 {
            writeln!(
                f,
                "{flagged} day{} synced but flagged by a check: accept a day whose count is right",
                if flagged == 1 { "" } else { "s" }
            )?;
        }
        if let Some(run_id) = &self.run_id {
            writeln!(f, "run {run_id}")?;
        }
        write!(
            f,
            "{} of {} days synced, rows written: {}",
            self.days.len(),
            self.planned.len(),
            self.totals().written()
        )
    }
}

/// One line for the days a run left out: how many, by state.
struct NotSelectedSummary<'a>(&'a [NotSelected]);

impl fmt::Display for NotSelectedSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::ledger::DayState;
        write!(f, "not selected: {} days", self.0.len())?;
        let mut parts = Vec::new();
        for state in [DayState::Synced, DayState::Failed, DayState::Missing] {
            let n = self.0.iter().filter(|d| d.state == state).count();
            if n > 0 {
                parts.push(format!("{n} {state}"));
            }
        }
        write!(f, " ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_not_started_are_one_line() {
        let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
        let mut report = RunReport::new((1..=25).map(jan).collect());
        report.days.push(DayReport::new(jan(1), Counts::default()));
        report.skipped = (2..=25).map(jan).collect();
        report.stopped = true;
        let text = report.to_string();
        assert!(
            text.contains("\n2026-01-02 … 2026-01-25  not started (stopped): 24 days\n"),
            "{text}"
        );
        assert_eq!(text.matches("not started").count(), 1, "{text}");
        report.skipped = vec![jan(25)];
        report.stopped = false;
        assert!(report
            .to_string()
            .contains("\n2026-01-25  not started (stopped by a failed day)\n"));
    }
}
