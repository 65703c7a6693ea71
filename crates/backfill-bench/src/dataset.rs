//! The bench's records and days (BENCHMARKS.md, "The dataset"), with
//! friendly or random keys, and the fetches that hand them to a job.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use backfill_core::{Fetched, Record};
use chrono::{Datelike, NaiveDate};
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

/// How a day's keys look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// `event:{date}:{i}`: in key order within a day, and each day's keys
    /// after the day before's, so a new day never interleaves with stored
    /// keys.
    Friendly,
    /// A random UUID per record (version 4 layout), from a generator
    /// seeded with the day and `i`: the same keys in every run, scattered
    /// over the whole key space like the keys of most real sources.
    Random,
}

impl Keys {
    /// The argument a child process is given for these keys.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Keys::Friendly => "friendly",
            Keys::Random => "random",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [Keys::Friendly, Keys::Random]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// The key of record `i` of `day`.
    fn key(self, day: NaiveDate, i: u32) -> String {
        match self {
            Keys::Friendly => format!("event:{day}:{i}"),
            Keys::Random => random_key(day, i),
        }
    }
}

/// Record `i` of `day`'s random UUID key: 122 random bits from a
/// generator seeded with the day and `i`, laid out as a version 4 UUID.
fn random_key(day: NaiveDate, i: u32) -> String {
    let day = u64::from(day.num_days_from_ce().unsigned_abs());
    let mut rng = fastrand::Rng::with_seed(((day << 32) | u64::from(i)) ^ 0x5EED_BACF_111D_A7A5);
    let (hi, lo) = (rng.u64(..), rng.u64(..));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0x0fff,
        0x8000 | ((lo >> 48) & 0x3fff),
        lo & 0xffff_ffff_ffff
    )
}

/// Record `i` of `day`, exactly as the comparisons with other tools use it:
/// key `event:{date}:{i}`, value the hex SHA-256 of `{date}:{i}`, updated at
/// midnight UTC plus `i` seconds. `changed` gives the upstream-corrected
/// version: another value, one hour later.
pub(crate) fn record(day: NaiveDate, i: u32, changed: bool) -> Record {
    keyed_record(Keys::Friendly, day, i, changed)
}

/// [`record`] with `keys`' key: the value and instant are the same for
/// either kind of key.
pub(crate) fn keyed_record(keys: Keys, day: NaiveDate, i: u32, changed: bool) -> Record {
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
    Record::new(keys.key(day, i), day, value, at).expect("valid bench record")
}

/// Records `0..per_day` of `day`.
pub(crate) fn day_records(day: NaiveDate, per_day: u32, changed: bool) -> Vec<Record> {
    keyed_day(Keys::Friendly, day, per_day, changed)
}

/// Records `0..per_day` of `day` with `keys`' keys.
pub(crate) fn keyed_day(keys: Keys, day: NaiveDate, per_day: u32, changed: bool) -> Vec<Record> {
    (0..per_day)
        .map(|i| keyed_record(keys, day, i, changed))
        .collect()
}

/// `n` records of `day` with `keys`' keys, generated chunk by chunk as the
/// stream is read: never the whole day in memory.
pub(crate) fn streamed(keys: Keys, day: NaiveDate, n: u32) -> Fetched {
    let chunks = (0..n.div_ceil(CHUNK)).map(move |c| {
        let end = ((c + 1) * CHUNK).min(n);
        Ok::<_, Infallible>(
            (c * CHUNK..end)
                .map(|i| keyed_record(keys, day, i, false))
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
