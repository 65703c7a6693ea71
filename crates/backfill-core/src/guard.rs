//! The replace guard: what one listing may delete, and why it refused.

use std::fmt;

/// What one replace may delete: the guard against an upstream outage that
/// answers "200, no rows" wiping a day, or a bug that lists a fraction of
/// it.
///
/// By default an empty listing for a day that has live rows is refused,
/// and so is a listing that would delete more than half of a day's live
/// rows ([`DEFAULT_MAX_DELETE_FRACTION`]); the command line and the Python
/// package have the same default. Both can be changed:
///
/// ```
/// use backfill_core::ReplaceGuard;
///
/// // Refuse any replace that would delete more than 20% of a day.
/// let careful = ReplaceGuard::default().max_delete_fraction(0.2);
/// // A day may really become empty upstream.
/// let trusting = ReplaceGuard::default().allow_empty(true);
/// // Any share of a day may go (the listing is known to be whole).
/// let any_share = ReplaceGuard::default().max_delete_fraction(1.0);
/// # let _ = (careful, trusting, any_share);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplaceGuard {
    allow_empty: bool,
    max_delete_fraction: Option<f64>,
}

/// The share of a day's live rows one replace may delete unless told
/// otherwise: half. A listing missing more than that is more often an
/// upstream fault (a partial page, a filter) than a day that changed.
pub const DEFAULT_MAX_DELETE_FRACTION: f64 = 0.5;

impl Default for ReplaceGuard {
    /// Empty listings refused, at most [`DEFAULT_MAX_DELETE_FRACTION`] of
    /// a day deleted.
    fn default() -> Self {
        Self {
            allow_empty: false,
            max_delete_fraction: Some(DEFAULT_MAX_DELETE_FRACTION),
        }
    }
}

impl ReplaceGuard {
    /// No guard at all: every replace applies.
    pub fn off() -> Self {
        Self {
            allow_empty: true,
            max_delete_fraction: None,
        }
    }

    /// Whether an empty listing may delete a day's live rows (default
    /// false). An allowed empty listing empties the day whatever
    /// [`max_delete_fraction`](Self::max_delete_fraction) says: allowing
    /// it says the day may really become empty.
    pub fn allow_empty(mut self, allow: bool) -> Self {
        self.allow_empty = allow;
        self
    }

    /// The largest fraction (0 to 1) of a day's live rows one replace may
    /// delete (default [`DEFAULT_MAX_DELETE_FRACTION`], `1.0` for no
    /// limit). Values outside 0..=1 are clamped.
    pub fn max_delete_fraction(mut self, fraction: f64) -> Self {
        let fraction = if fraction.is_nan() { 0.0 } else { fraction };
        self.max_delete_fraction = Some(fraction.clamp(0.0, 1.0));
        self
    }

    /// Whether a listing (`empty`: of no record) may turn `would_delete`
    /// of its day's `live` rows into tombstones; the refusal if not.
    pub(crate) fn check(&self, empty: bool, would_delete: u64, live: u64) -> Option<Refusal> {
        if would_delete == 0 {
            return None;
        }
        if empty {
            return (!self.allow_empty).then_some(Refusal::EmptyListing);
        }
        match self.max_delete_fraction {
            Some(max) if would_delete as f64 > max * live as f64 => {
                Some(Refusal::TooLarge { max_fraction: max })
            }
            _ => None,
        }
    }
}

/// Why a [`ReplaceGuard`] refused a replace, in [`Error::ReplaceRefused`](crate::Error::ReplaceRefused).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// The listing was empty and the day has live rows.
    EmptyListing,
    /// The replace would delete more than this fraction of the day's live
    /// rows.
    TooLarge {
        /// The guard's limit.
        max_fraction: f64,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::EmptyListing => f.write_str("the listing is empty"),
            Refusal::TooLarge { max_fraction } => {
                write!(f, "more than {:.1}% of the day", max_fraction * 100.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowed_empty_listing_is_not_held_to_the_fraction() {
        let guard = ReplaceGuard::default().max_delete_fraction(0.5);
        assert_eq!(guard.check(true, 10, 10), Some(Refusal::EmptyListing));
        assert_eq!(guard.allow_empty(true).check(true, 10, 10), None);
        assert_eq!(
            guard.allow_empty(true).check(false, 6, 10),
            Some(Refusal::TooLarge { max_fraction: 0.5 })
        );
        assert_eq!(guard.check(false, 5, 10), None);
        // The default: half of a day, not more.
        assert_eq!(ReplaceGuard::default().check(false, 5, 10), None);
        assert_eq!(
            ReplaceGuard::default().check(false, 6, 10),
            Some(Refusal::TooLarge { max_fraction: 0.5 })
        );
        assert_eq!(
            ReplaceGuard::default()
                .max_delete_fraction(1.0)
                .check(false, 10, 10),
            None
        );
    }
}
