//! Choosing days by the ledger ([`Select`]), and where days stand
//! ([`Status`]).

use std::fmt;

use chrono::{DateTime, NaiveDate, Utc};

use crate::check::Flag;
use crate::ledger::{DayState, LedgerEntry};

/// Which days of a range a job runs, by the store's ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Select {
    /// Every day (the default).
    #[default]
    All,
    /// Days never synced.
    Missing,
    /// Days whose last attempt failed (and were not synced since).
    Failed,
    /// Days never synced, and days whose last attempt failed.
    MissingOrFailed,
    /// Days not synced since an instant: missing, failed, or last synced
    /// before it (for data that arrives late).
    NotSyncedSince(DateTime<Utc>),
}

impl Select {
    /// Whether a day with this ledger entry (`None`: no row) is run.
    pub(super) fn picks(self, entry: Option<&LedgerEntry>) -> bool {
        let state = entry.map_or(DayState::Missing, LedgerEntry::state);
        match self {
            Select::All => true,
            Select::Missing => state == DayState::Missing,
            Select::Failed => state == DayState::Failed,
            Select::MissingOrFailed => state != DayState::Synced,
            Select::NotSyncedSince(at) => {
                state != DayState::Synced
                    || entry
                        .and_then(|e| e.synced.as_ref())
                        .is_some_and(|synced| synced.at < at)
            }
        }
    }
}

/// A day a run left out because of its [`Select`], with why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct NotSelected {
    /// The day.
    pub day: NaiveDate,
    /// Where it stood.
    pub state: DayState,
    /// When it was last synced, if ever.
    pub synced_at: Option<DateTime<Utc>>,
}

impl fmt::Display for NotSelected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<10}  not selected: {}", self.day, self.state)?;
        if let Some(at) = self.synced_at {
            write!(f, " at {}", at.format("%Y-%m-%d %H:%M:%S"))?;
        }
        Ok(())
    }
}

/// Where every day of a range stands: [`Job::status`](super::Job::status).
///
/// `Display` renders a table a person reads at a glance, a run of
/// consecutive missing days on one line.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Status {
    /// Every day of the range, in order.
    pub days: Vec<DayStatus>,
}

/// One day of a [`Status`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct DayStatus {
    /// The day.
    pub day: NaiveDate,
    /// Missing, synced or failed.
    pub state: DayState,
    /// Its ledger row, if it has one.
    pub entry: Option<LedgerEntry>,
    /// For a synced day, the per-day [check](crate::check) that flags its
    /// count against its neighbours' as they stand now (an
    /// [accepted](LedgerEntry::accepted) day has none).
    pub flag: Option<Flag>,
}

impl Status {
    /// How many days are in `state`.
    pub fn count(&self, state: DayState) -> usize {
        self.days.iter().filter(|d| d.state == state).count()
    }

    /// How many days a check flags.
    pub fn flagged(&self) -> usize {
        self.days.iter().filter(|d| d.flag.is_some()).count()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<10}  {:<7}  {:<19}  {:<7}  {:>8}  {:>8}  {:>8}  {:>9}  {:>6}  run / last failure",
            "day",
            "state",
            "synced at (UTC)",
            "mode",
            "inserted",
            "updated",
            "deleted",
            "unchanged",
            "stale",
        )?;
        let mut days = self.days.iter().peekable();
        while let Some(day) = days.next() {
            if day.state == DayState::Missing && day.entry.is_none() {
                let mut last = day.day;
                let mut count = 1;
                while let Some(next) =
                    days.next_if(|d| d.state == DayState::Missing && d.entry.is_none())
                {
                    last = next.day;
                    count += 1;
                }
                if count == 1 {
                    writeln!(f, "{:<10}  missing", day.day)?;
                } else {
                    writeln!(f, "{} … {}  missing ({count} days)", day.day, last)?;
                }
                continue;
            }
            let synced = day.entry.as_ref().and_then(|e| e.synced.as_ref());
            let failure = day.entry.as_ref().and_then(|e| e.failure.as_ref());
            let at = synced.map_or(String::new(), |s| {
                s.at.format("%Y-%m-%d %H:%M:%S").to_string()
            });
            let mode = synced.map_or("", |s| match s.mode {
                crate::Mode::Merge => "merge",
                crate::Mode::Replace => "replace",
            });
            let c = synced.map(|s| s.counts).unwrap_or_default();
            let cell = |n: u64| {
                if synced.is_some() {
                    n.to_string()
                } else {
                    String::new()
                }
            };
            let last = match (failure, synced) {
                (Some(fail), _) => {
                    let first_line = fail.error.lines().next().unwrap_or_default();
                    let plural = if fail.attempts == 1 { "" } else { "s" };
                    format!("after {} attempt{plural}: {first_line}", fail.attempts)
                }
                (None, Some(s)) => s.run_id.as_ref().map_or(String::new(), ToString::to_string),
                (None, None) => String::new(),
            };
            let last = match (&day.flag, day.entry.as_ref().and_then(|e| e.accepted)) {
                (Some(flag), _) => format!("{last}  FLAGGED {flag}"),
                (None, Some(at)) => format!("{last}  accepted {}", at.format("%Y-%m-%d %H:%M:%S")),
                (None, None) => last,
            };
            let state = match day.flag {
                Some(_) => "flagged".to_owned(),
                None => day.state.to_string(),
            };
            writeln!(
                f,
                "{:<10}  {:<7}  {:<19}  {:<7}  {:>8}  {:>8}  {:>8}  {:>9}  {:>6}  {}",
                day.day,
                state,
                at,
                mode,
                cell(c.inserted),
                cell(c.updated),
                cell(c.deleted),
                cell(c.unchanged),
                cell(c.stale),
                last
            )?;
        }
        write!(
            f,
            "{} days: {} synced, {} failed, {} missing",
            self.days.len(),
            self.count(DayState::Synced),
            self.count(DayState::Failed),
            self.count(DayState::Missing)
        )?;
        match self.flagged() {
            0 => Ok(()),
            n => write!(f, "; {n} synced flagged by a check"),
        }
    }
}
