//! The bench's records and days (BENCHMARKS.md, "The dataset"), and the
//! fetches that hand them to a job.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use backfill_core::{Fetched, Record};
use chrono::NaiveDate;
use futures_util::stream;
use sha2::{Digest, Sha256};

/// Records per chunk of a streamed day, as a paged API or the command's
/// reader would hand them over.
pub(crate) const CHUNK: u32 = 10_000;

/// The dataset's first day.
pub(crate) fn first_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 1, 1).unwrap()
}

pub(crate) fn nth_day(n: u32) -> NaiveDate {
    first_day() + chrono::Duration::days(i64::from(n))
}

/// Record `i` of `day`, exactly as the comparisons with other tools use it:
/// key `event:{date}:{i}`, value the hex SHA-256 of `{date}:{i}`, updated at
/// midnight UTC plus `i` seconds. `changed` gives the upstream-corrected
/// version: another value, one hour later.
pub(crate) fn record(day: NaiveDate, i: u32, changed: bool) -> Record {
    let seed = if changed {
        format!("{day}:{i}:changed")
    } else {
        format!("{day}:{i}")
    };
    let digest = Sha256::digest(seed.as_bytes());
    let value: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let mut at =
        day.and_hms_opt(0, 0, 0).unwrap().and_utc() + chrono::Duration::seconds(i64::from(i));
    if changed {
        at += chrono::Duration::hours(1);
    }
    Record::new(format!("event:{day}:{i}"), day, value, at).expect("valid bench record")
}

/// Records `0..per_day` of `day`.
pub(crate) fn day_records(day: NaiveDate, per_day: u32, changed: bool) -> Vec<Record> {
    (0..per_day).map(|i| record(day, i, changed)).collect()
}

/// `n` records of `day`, generated chunk by chunk as the stream is read:
/// never the whole day in memory.
pub(crate) fn streamed(day: NaiveDate, n: u32) -> Fetched {
    let chunks = (0..n.div_ceil(CHUNK)).map(move |c| {
        let end = ((c + 1) * CHUNK).min(n);
        Ok::<_, Infallible>(
            (c * CHUNK..end)
                .map(|i| record(day, i, false))
                .collect::<Vec<_>>(),
        )
    });
    Fetched::stream(stream::iter(chunks))
}

/// Hands out prepared days, so that fetching costs nothing measurable.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    days: Mutex<HashMap<NaiveDate, Vec<Record>>>,
    /// How long each fetch waits, as a remote source would.
    pub(crate) sleep: Option<Duration>,
}

impl Feed {
    pub(crate) fn new(days: impl IntoIterator<Item = (NaiveDate, Vec<Record>)>) -> Self {
        Self {
            days: Mutex::new(days.into_iter().collect()),
            sleep: None,
        }
    }

    fn take(&self, day: NaiveDate) -> Vec<Record> {
        self.days.lock().unwrap().remove(&day).unwrap_or_default()
    }
}

/// The fetch of a [`Feed`]: each prepared day once, then an empty day.
pub(crate) async fn fetch_from(feed: &Feed, day: NaiveDate) -> Result<Vec<Record>, Infallible> {
    let records = feed.take(day);
    if let Some(sleep) = feed.sleep {
        tokio::time::sleep(sleep).await;
    }
    Ok(records)
}
