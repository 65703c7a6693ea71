//! The clock and the calendar: what "now" and "today" are for a job.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};

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

/// Turns an instant into a calendar day in the job's time zone.
#[derive(Clone)]
pub(super) struct Calendar {
    zone: String,
    day_of: Arc<dyn Fn(DateTime<Utc>) -> NaiveDate + Send + Sync>,
}

impl Calendar {
    /// Days as they are in UTC.
    pub(super) fn utc() -> Self {
        Self {
            zone: "UTC".to_owned(),
            day_of: Arc::new(|now| now.date_naive()),
        }
    }

    /// Days as they are in `zone` (daylight-saving rules included when the
    /// zone has them, e.g. `chrono_tz::Tz`).
    pub(super) fn in_zone<Tz>(zone: Tz) -> Self
    where
        Tz: TimeZone + fmt::Debug + Send + Sync + 'static,
    {
        Self {
            zone: format!("{zone:?}"),
            day_of: Arc::new(move |now: DateTime<Utc>| now.with_timezone(&zone).date_naive()),
        }
    }

    /// The day `now` falls on.
    pub(super) fn day_of(&self, now: DateTime<Utc>) -> NaiveDate {
        (self.day_of)(now)
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.zone)
    }
}
