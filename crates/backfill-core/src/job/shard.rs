//! [`Shard`]: one of N processes' share of a range's days.

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, NaiveDate};

/// One share of every range's days when N processes split a backfill
/// between them (a Kubernetes Indexed Job, mapped orchestrator tasks,
/// several hosts): shard `index` of `count` runs the days whose number
/// (days since 1 January of year 1) leaves `index` when divided by
/// `count`.
///
/// The split depends on the day alone, never on the range or the
/// process, so the N shards of any range cover each of its days exactly
/// once, and a day always belongs to the same shard. Overlap would be
/// harmless anyway: every store converges whatever runs a day.
///
/// ```
/// use backfill_core::Shard;
/// use chrono::NaiveDate;
///
/// let shards: Vec<Shard> = (0..3).map(|i| Shard::new(i, 3).unwrap()).collect();
/// let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
/// let days: Vec<_> = day.iter_days().take(30).collect();
/// for d in &days {
///     assert_eq!(shards.iter().filter(|s| s.contains(*d)).count(), 1);
/// }
/// assert_eq!("1/3".parse::<Shard>().unwrap(), shards[1]);
/// assert!("3/3".parse::<Shard>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// Shard `index` (from 0) of `count`; `None` unless `index < count`.
    pub fn new(index: u32, count: u32) -> Option<Self> {
        (index < count).then_some(Self { index, count })
    }

    /// This shard's index, from 0.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many shards there are.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether `day` is this shard's.
    pub fn contains(&self, day: NaiveDate) -> bool {
        i64::from(day.num_days_from_ce()).rem_euclid(i64::from(self.count)) == i64::from(self.index)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Why a text is not a [`Shard`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseShardError(String);

impl fmt::Display for ParseShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a shard: expected INDEX/COUNT with 0 <= INDEX < COUNT, as in 0/4",
            self.0
        )
    }
}

impl std::error::Error for ParseShardError {}

impl FromStr for Shard {
    type Err = ParseShardError;

    /// `INDEX/COUNT`, as in `0/4` … `3/4`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let error = || ParseShardError(s.to_owned());
        let (index, count) = s.split_once('/').ok_or_else(error)?;
        let index = index.trim().parse().map_err(|_| error())?;
        let count = count.trim().parse().map_err(|_| error())?;
        Shard::new(index, count).ok_or_else(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_any_range() {
        for count in 1..=7 {
            let shards: Vec<_> = (0..count).map(|i| Shard::new(i, count).unwrap()).collect();
            let start = NaiveDate::from_ymd_opt(1999, 12, 20).unwrap();
            for day in start.iter_days().take(400) {
                assert_eq!(shards.iter().filter(|s| s.contains(day)).count(), 1);
            }
        }
        // Days before year 1 have negative numbers and still one shard.
        let shards = [
            Shard::new(0, 3).unwrap(),
            Shard::new(1, 3).unwrap(),
            Shard::new(2, 3).unwrap(),
        ];
        let ancient = NaiveDate::from_ymd_opt(-4, 3, 1).unwrap();
        for day in ancient.iter_days().take(10) {
            assert_eq!(shards.iter().filter(|s| s.contains(day)).count(), 1);
        }
    }

    #[test]
    fn parse_refuses_what_is_not_a_shard() {
        for bad in ["", "1", "/2", "1/", "2/2", "0/0", "-1/2", "a/b", "1/2/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert_eq!(
            " 2 / 5 ".parse::<Shard>().unwrap(),
            Shard::new(2, 5).unwrap()
        );
        assert_eq!(Shard::new(2, 5).unwrap().to_string(), "2/5");
    }
}
