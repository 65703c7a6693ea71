//! What every case uses: the calendar and record makers of
//! [`fixtures`](super::fixtures), and reads and writes that panic with a
//! readable message.

use chrono::{Duration, NaiveDate};

pub(super) use super::fixtures::{at, day, listing, rec, tomb};
use crate::record::Record;
use crate::write::{upsert, WriteOptions};
use crate::{Counts, Store};
use crate::{Job, MemoryStore, Retry};

pub(super) async fn apply(store: &dyn Store, d: NaiveDate, records: Vec<Record>) -> Counts {
    apply_with(store, d, records, WriteOptions::default()).await
}

pub(super) async fn apply_with(
    store: &dyn Store,
    d: NaiveDate,
    records: Vec<Record>,
    options: WriteOptions,
) -> Counts {
    upsert(store, d, records, options)
        .await
        .unwrap_or_else(|e| panic!("upsert for {d} failed: {e}"))
}

/// `upsert`, its result as it is (for cases that expect an error).
pub(super) async fn upsert_result(
    store: &dyn Store,
    d: NaiveDate,
    records: Vec<Record>,
    options: WriteOptions,
) -> crate::Result<Counts> {
    upsert(store, d, records, options).await
}

pub(super) async fn rows(store: &dyn Store) -> Vec<Record> {
    store.rows().await.expect("reading rows")
}

/// The rows whose key starts with `prefix`, in key order.
pub(super) async fn rows_under(store: &dyn Store, prefix: &str) -> Vec<Record> {
    rows(store)
        .await
        .into_iter()
        .filter(|r| r.key().starts_with(prefix))
        .collect()
}

pub(super) async fn get(store: &dyn Store, key: &str) -> Option<Record> {
    store.get(key).await.expect("reading one key")
}

pub(super) fn counts(
    inserted: u64,
    updated: u64,
    unchanged: u64,
    stale: u64,
    deleted: u64,
) -> Counts {
    Counts {
        inserted,
        updated,
        unchanged,
        stale,
        deleted,
        unlisted: 0,
        skipped: 0,
        collapsed: 0,
    }
}

/// Every stored version (tombstones included) whose key starts with
/// `prefix`, in key order.
pub(super) async fn versions_under(store: &dyn Store, prefix: &str) -> Vec<Record> {
    store
        .rows_with_tombstones()
        .await
        .expect("reading rows with tombstones")
        .into_iter()
        .filter(|r| r.key().starts_with(prefix))
        .collect()
}

pub(super) async fn oracle(batches: &[(NaiveDate, Vec<Record>, WriteOptions)]) -> Vec<Record> {
    let memory = MemoryStore::new();
    for (d, records, options) in batches {
        apply_with(&memory, *d, records.clone(), *options).await;
    }
    rows(&memory).await
}

pub(super) fn seeded_fetch(
    prefix: &'static str,
    per_day: u32,
    version: i64,
) -> impl Fn(NaiveDate) -> std::future::Ready<Result<Vec<Record>, std::io::Error>> + Send + Sync {
    move |d: NaiveDate| {
        let records = (0..per_day)
            .map(|i| {
                let when = d.and_hms_opt(1, 0, 0).unwrap().and_utc() + Duration::seconds(version);
                rec(
                    &format!("{prefix}{d}:{i}"),
                    d,
                    &format!("{{\"i\":{i},\"v\":{version}}}"),
                    when,
                )
            })
            .collect();
        std::future::ready(Ok(records))
    }
}

/// A job that retries quickly, for tests.
pub(super) fn quick_job() -> Job {
    Job::new().retry(Retry::default().max_attempts(3).backoff(
        std::time::Duration::from_millis(1),
        std::time::Duration::from_millis(5),
    ))
}

/// `per_day` records per day under `prefix`.
pub(super) fn day_records(prefix: &str, d: NaiveDate, per_day: usize) -> Vec<Record> {
    (0..per_day)
        .map(|i| {
            rec(
                &format!("{prefix}{d}/{i:03}"),
                d,
                &format!("{{\"i\":{i}}}"),
                at(i as i64),
            )
        })
        .collect()
}
