//! Per-day checks: a day's fetched record count against its neighbours'
//! in the ledger, so that an upstream that returned half a day (the most
//! common silent data loss: the write takes it and the ledger says
//! "synced") is flagged, or refused, instead of passing as a good day.
//!
//! A day is compared with the **median** fetched count of the synced days
//! within [`Checks::window`] days on **either side** of it (so the order in
//! which days are backfilled does not matter), once at least
//! [`MIN_NEIGHBOURS`] of them are synced. Two checks:
//!
//! - **volume**: fewer records than [`Checks::min_fraction`] of that median;
//! - **empty**: no record at all where that median is above zero.
//!
//! Today and later days, in the job's time zone, are not judged: they are
//! not over (a daily sync at 02:00 fetches today's first two hours).
//!
//! Each check's [`CheckAction`] says what a flagged day becomes: written and
//! reported ([`CheckAction::Warn`], the default), or refused and recorded as
//! a failed day with the reason ([`CheckAction::Fail`]). A day a person
//! [accepted](crate::Store::accept) is never flagged.
//!
//! The defaults (`warn`, a fraction of 0.25, 14 days either side) never
//! flag an ordinary weekend or holiday dip: a Sunday at 60 % of a weekday,
//! or a holiday at 30 %, is above a quarter of a median that four weeks of
//! days set; a day that came back at 10 % is below it.
//!
//! ```
//! use backfill_core::{CheckAction, Checks};
//! use chrono::NaiveDate;
//!
//! let checks = Checks::default().volume(CheckAction::Fail);
//! let day = |d| NaiveDate::from_ymd_opt(2026, 3, d).unwrap();
//! // Fourteen days of about 1 000 records around the 15th.
//! let neighbours: Vec<(NaiveDate, u64)> = (1..=28).filter(|d| *d != 15).map(|d| (day(d), 1_000)).collect();
//! let flag = checks.judge(day(15), 100, &neighbours).expect("a day at 10 % is flagged");
//! assert_eq!(flag.action, CheckAction::Fail);
//! assert_eq!((flag.median, flag.threshold), (1_000, 250));
//! assert!(checks.judge(day(15), 600, &neighbours).is_none());
//! ```

use std::fmt;

use chrono::NaiveDate;

use crate::ledger::LedgerEntry;

/// The fewest synced neighbours a day is judged against: below it, a day
/// is not checked (the first days of a new table, a lone day).
pub const MIN_NEIGHBOURS: usize = 7;
/// The default [`Checks::min_fraction`].
pub const DEFAULT_MIN_FRACTION: f64 = 0.25;
/// The default [`Checks::window`], in days on either side.
pub const DEFAULT_CHECK_WINDOW: u32 = 14;

/// What a day that fails a check becomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum CheckAction {
    /// The check is not made.
    Off,
    /// The day is written, and flagged in its report, its events and
    /// `status` (the default).
    #[default]
    Warn,
    /// The day is not written: it fails with [`Error::CheckFailed`](crate::Error::CheckFailed),
    /// recorded in the ledger as its failure, until it is accepted.
    Fail,
}

impl CheckAction {
    /// Every action, in the order [`CheckAction::as_str`] names them.
    pub const ALL: [CheckAction; 3] = [CheckAction::Off, CheckAction::Warn, CheckAction::Fail];

    /// Its one spelling: `off`, `warn` or `fail`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CheckAction::Off => "off",
            CheckAction::Warn => "warn",
            CheckAction::Fail => "fail",
        }
    }
}

impl fmt::Display for CheckAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for CheckAction {
    type Err = String;

    /// An action from [`CheckAction::as_str`]'s spelling.
    fn from_str(text: &str) -> Result<Self, String> {
        CheckAction::ALL
            .into_iter()
            .find(|a| a.as_str() == text)
            .ok_or_else(|| format!("a check's action is off, warn or fail, not {text:?}"))
    }
}

/// The per-day checks a [`Job`](crate::Job) makes: see the [module](self).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checks {
    volume: CheckAction,
    empty: CheckAction,
    min_fraction: f64,
    window: u32,
}

impl Default for Checks {
    /// Both checks warn; a fraction of 0.25; 14 days on either side.
    fn default() -> Self {
        Self {
            volume: CheckAction::Warn,
            empty: CheckAction::Warn,
            min_fraction: DEFAULT_MIN_FRACTION,
            window: DEFAULT_CHECK_WINDOW,
        }
    }
}

impl Checks {
    /// No check made.
    pub fn off() -> Self {
        Self::default()
            .volume(CheckAction::Off)
            .empty(CheckAction::Off)
    }

    /// What a day with fewer records than `min_fraction` of its
    /// neighbours' median becomes.
    pub fn volume(mut self, action: CheckAction) -> Self {
        self.volume = action;
        self
    }

    /// What a day with no record, where its neighbours' median is above
    /// zero, becomes.
    pub fn empty(mut self, action: CheckAction) -> Self {
        self.empty = action;
        self
    }

    /// The volume check's fraction of the median (default 0.25); it must be
    /// between 0 and 1 (checked by [`Settings::job`](crate::settings::Settings::job)).
    pub fn min_fraction(mut self, fraction: f64) -> Self {
        self.min_fraction = fraction;
        self
    }

    /// The days on either side whose synced counts a day is compared with
    /// (default 14: four whole weeks, so weekdays and weekends weigh as
    /// they do in the data).
    pub fn window(mut self, days: u32) -> Self {
        self.window = days;
        self
    }

    /// The volume check's action.
    pub fn volume_action(&self) -> CheckAction {
        self.volume
    }

    /// The empty check's action.
    pub fn empty_action(&self) -> CheckAction {
        self.empty
    }

    /// The volume check's fraction.
    pub fn fraction(&self) -> f64 {
        self.min_fraction
    }

    /// The days on either side a day is compared with.
    pub fn window_days(&self) -> u32 {
        self.window
    }

    /// Whether any check is made.
    pub fn any(&self) -> bool {
        self.volume != CheckAction::Off || self.empty != CheckAction::Off
    }

    /// The days whose ledger entries judging `days` reads: `days` widened
    /// by the window on either side.
    pub fn neighbourhood(
        &self,
        days: std::ops::RangeInclusive<NaiveDate>,
    ) -> std::ops::RangeInclusive<NaiveDate> {
        let wide = chrono::Days::new(u64::from(self.window));
        let start = days
            .start()
            .checked_sub_days(wide)
            .unwrap_or(NaiveDate::MIN);
        let end = days.end().checked_add_days(wide).unwrap_or(NaiveDate::MAX);
        start..=end
    }

    /// Judges `day`, which fetched `fetched` records, against `synced`:
    /// days with their fetched counts (any order; `day` itself and days
    /// outside the window are left out). `None` when it passes, when no
    /// check is on, or when fewer than [`MIN_NEIGHBOURS`] neighbours are
    /// there to judge by. A day flagged by both checks (an empty one)
    /// carries the stronger action.
    pub fn judge(&self, day: NaiveDate, fetched: u64, synced: &[(NaiveDate, u64)]) -> Option<Flag> {
        if !self.any() {
            return None;
        }
        let window = i64::from(self.window);
        let mut counts: Vec<u64> = synced
            .iter()
            .filter(|(d, _)| *d != day && (*d - day).num_days().abs() <= window)
            .map(|(_, n)| *n)
            .collect();
        if counts.len() < MIN_NEIGHBOURS {
            return None;
        }
        counts.sort_unstable();
        let middle = counts.len() / 2;
        let median = match counts.len() % 2 {
            1 => counts[middle],
            // The lower of the two middle counts: a flag never rests on a
            // count no day has.
            _ => counts[middle - 1],
        };
        // The smallest count that passes: a day at exactly the fraction
        // passes.
        let threshold = (self.min_fraction * median as f64).ceil() as u64;
        let empty = fetched == 0 && median > 0 && self.empty != CheckAction::Off;
        let low = fetched < threshold && self.volume != CheckAction::Off;
        let (check, action) = match (empty, low) {
            (true, true) if self.volume > self.empty => (Check::Volume, self.volume),
            (true, _) => (Check::Empty, self.empty),
            (false, true) => (Check::Volume, self.volume),
            (false, false) => return None,
        };
        Some(Flag {
            day,
            check,
            action,
            fetched,
            median,
            threshold,
            neighbours: counts.len() as u32,
        })
    }
}

/// The synced days of `entries` with their fetched counts, for
/// [`Checks::judge`].
pub fn synced_counts(entries: &[LedgerEntry]) -> Vec<(NaiveDate, u64)> {
    entries
        .iter()
        .filter_map(|e| Some((e.day, e.synced.as_ref()?.counts.fetched())))
        .collect()
}

/// Which check flagged a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Check {
    /// Fewer records than the fraction of the median.
    Volume,
    /// No record where the neighbours had some.
    Empty,
}

impl Check {
    /// Its name: `volume` or `empty`, as settings and reports spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Check::Volume => "volume",
            Check::Empty => "empty",
        }
    }
}

/// A day a check flagged, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Flag {
    /// The day.
    pub day: NaiveDate,
    /// The check that flagged it.
    pub check: Check,
    /// What the day became.
    pub action: CheckAction,
    /// Records the day fetched (duplicates included).
    pub fetched: u64,
    /// The median fetched count of its neighbours.
    pub median: u64,
    /// The smallest count that would have passed.
    pub threshold: u64,
    /// How many synced days the median is of.
    pub neighbours: u32,
}

impl fmt::Display for Flag {
    /// The reason, in a line: what the report, the ledger's failure and
    /// `status` show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records = |n: u64| if n == 1 { "record" } else { "records" };
        match self.check {
            Check::Empty => write!(f, "{} check: no record fetched", self.check.as_str())?,
            Check::Volume => write!(
                f,
                "{} check: {} {} fetched, fewer than {}",
                self.check.as_str(),
                self.fetched,
                records(self.fetched),
                self.threshold
            )?,
        }
        write!(
            f,
            " (the median of the {} synced days around it is {}); accept the day if this is right",
            self.neighbours, self.median
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(n: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 1, 1).unwrap() + chrono::Days::new(u64::from(n))
    }

    /// Weekdays at 1 000, weekends at 600, as `n` days from a Thursday.
    fn weekly(n: u32) -> Vec<(NaiveDate, u64)> {
        (0..n)
            .map(|i| {
                let d = day(i);
                let weekend = matches!(
                    chrono::Datelike::weekday(&d),
                    chrono::Weekday::Sat | chrono::Weekday::Sun
                );
                (d, if weekend { 600 } else { 1_000 })
            })
            .collect()
    }

    #[test]
    fn weekends_pass_and_a_tenth_of_a_day_is_flagged() {
        let days = weekly(60);
        let checks = Checks::default();
        for (d, n) in &days {
            assert_eq!(checks.judge(*d, *n, &days), None, "{d}");
        }
        let flag = checks.judge(day(40), 100, &days).unwrap();
        assert_eq!(
            (flag.check, flag.action, flag.median, flag.threshold),
            (Check::Volume, CheckAction::Warn, 1_000, 250)
        );
        assert_eq!(flag.neighbours, 28);
        // A holiday at 30 % passes.
        assert_eq!(checks.judge(day(40), 300, &days), None);
        // Exactly the threshold passes.
        assert_eq!(checks.judge(day(40), 250, &days), None);
        assert!(checks.judge(day(40), 249, &days).is_some());
    }

    #[test]
    fn an_empty_day_carries_the_stronger_action() {
        let days = weekly(30);
        let flag = Checks::default()
            .empty(CheckAction::Fail)
            .judge(day(15), 0, &days)
            .unwrap();
        assert_eq!((flag.check, flag.action), (Check::Empty, CheckAction::Fail));
        let flag = Checks::default()
            .volume(CheckAction::Fail)
            .judge(day(15), 0, &days)
            .unwrap();
        assert_eq!(
            (flag.check, flag.action),
            (Check::Volume, CheckAction::Fail)
        );
        let only_empty = Checks::default().volume(CheckAction::Off);
        assert_eq!(only_empty.judge(day(15), 1, &days), None);
        assert!(only_empty.judge(day(15), 0, &days).is_some());
        assert_eq!(Checks::off().judge(day(15), 0, &days), None);
        // Neighbours with no records: nothing to fall short of.
        let quiet: Vec<_> = days.iter().map(|(d, _)| (*d, 0)).collect();
        assert_eq!(Checks::default().judge(day(15), 0, &quiet), None);
    }

    #[test]
    fn too_few_neighbours_or_too_far_ones_judge_nothing() {
        let days = weekly(60);
        let few = &days[..MIN_NEIGHBOURS - 1];
        assert_eq!(Checks::default().judge(day(59), 0, few), None);
        // Every neighbour more than the window away.
        let far: Vec<_> = days.iter().filter(|(d, _)| *d < day(10)).copied().collect();
        assert_eq!(Checks::default().judge(day(40), 0, &far), None);
        assert!(Checks::default()
            .window(40)
            .judge(day(40), 0, &far)
            .is_some());
        // The day's own count is never its neighbour.
        let same: Vec<_> = (0..MIN_NEIGHBOURS as u32)
            .map(|_| (day(3), 1_000))
            .collect();
        assert_eq!(Checks::default().judge(day(3), 0, &same), None);
    }

    #[test]
    fn actions_read_back_from_their_spelling() {
        for action in CheckAction::ALL {
            assert_eq!(action.as_str().parse::<CheckAction>(), Ok(action));
        }
        assert!("error".parse::<CheckAction>().is_err());
    }
}
