//! What the Delta tests share: days, records with UUID-like keys, and
//! writing them.

use backfill_core::{upsert, Record, Store, WriteOptions};
use chrono::{Duration, NaiveDate, TimeZone, Utc};

pub(crate) fn day(n: i64) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, 1).unwrap() + Duration::days(n)
}

/// `per_day` records of day `d`, keys spread like UUIDs, the first
/// `changed` of them at a later version.
pub(crate) fn records(d: i64, per_day: u32, changed: u32) -> Vec<Record> {
    let at = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
    let mut records: Vec<Record> = (0..per_day)
        .map(|i| {
            let key = format!(
                "{:08x}-{d}-{i}",
                (u64::from(i) * 2_654_435_761) % 4_294_967_291
            );
            let (value, at) = match i < changed {
                true => (format!("v2:{i}"), at + Duration::hours(1)),
                false => (format!("v1:{i}"), at),
            };
            Record::new(key, day(d), value, at).unwrap()
        })
        .collect();
    records.sort_by(|a, b| a.key().cmp(b.key()));
    records
}

/// `records` upserted into day `d` with the default options.
pub(crate) async fn put<S: Store>(
    store: &S,
    d: i64,
    records: Vec<Record>,
) -> backfill_core::Counts {
    upsert(store, day(d), records, WriteOptions::default())
        .await
        .unwrap()
}
