//! Differential tests: the same random batches leave byte-identical rows,
//! tombstones included, in `MemoryStore`, `SqliteStore` and
//! `PostgresStore` — merges and tombstones in a different random order for
//! each store, and listings of any content in one shared random order.

use backfill::conformance::fixtures::{at, day, listing, rec, tomb};
use backfill::postgres::PostgresStore;
use backfill::sqlite::SqliteStore;
use backfill::{upsert, EventDates, MemoryStore, Record, Store, WriteOptions};
use backfill_testkit as testkit;
use chrono::{Duration, NaiveDate};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const KEYS: [&str; 6] = ["a", "B", "é", "z", "ключ", "🔑"];
const VALUES: [&str; 6] = ["", "a", "Z", "z", "é", "{\"n\":1}"];
/// A value index past `VALUES`: the version is a tombstone.
const TOMBSTONE: usize = VALUES.len();

/// `(key, day, value, second, batch)` versions, grouped into batches by
/// `batch`; a value of `TOMBSTONE` makes a tombstone.
type Version = (usize, i64, usize, i64, usize);

fn version(&(k, d, v, t, _): &Version) -> Record {
    let (d, when) = (day(d), at(0) + Duration::microseconds(t));
    if v == TOMBSTONE {
        tomb(KEYS[k], d, when)
    } else {
        rec(KEYS[k], d, VALUES[v], when)
    }
}

fn build(versions: &[Version]) -> Vec<(NaiveDate, Vec<Record>)> {
    (0..4)
        .map(|batch| {
            let records = versions
                .iter()
                .filter(|v| v.4 == batch)
                .map(version)
                .collect();
            (day(batch as i64 % 2), records)
        })
        .collect()
}

async fn apply_all(store: &dyn Store, batches: &[(NaiveDate, Vec<Record>)], order: &[usize]) {
    let lenient = WriteOptions::default().event_dates(EventDates::Lenient);
    for &i in order {
        let (day, records) = &batches[i % batches.len()];
        upsert(store, *day, records.clone(), lenient).await.unwrap();
    }
}

#[test]
fn stores_agree_byte_for_byte() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = rt.block_on(testkit::url()) else {
        return;
    };
    let strategy = (
        vec(
            (0..6usize, 0..3i64, 0..=TOMBSTONE, 0..3i64, 0..4usize),
            1..40,
        ),
        vec(0..16usize, 4..12),
        vec(0..16usize, 4..12),
        vec(0..16usize, 4..12),
    );
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    runner
        .run(&strategy, |(versions, order_m, order_s, order_p)| {
            let batches = build(&versions);
            // Every batch at least once, then the random extras.
            let with_all =
                |extra: &[usize]| (0..4).chain(extra.iter().copied()).collect::<Vec<_>>();
            let (memory, sqlite, postgres) = rt.block_on(async {
                let memory = MemoryStore::new();
                let sqlite = SqliteStore::open_in_memory().await.unwrap();
                let postgres = PostgresStore::builder()
                    .schema(testkit::unique_schema())
                    .pool_size(1)
                    .connect(&url)
                    .await
                    .unwrap();
                apply_all(&memory, &batches, &with_all(&order_m)).await;
                apply_all(&sqlite, &batches, &with_all(&order_s)).await;
                apply_all(&postgres, &batches, &with_all(&order_p)).await;
                (
                    memory.rows_with_tombstones().await.unwrap(),
                    sqlite.rows_with_tombstones().await.unwrap(),
                    postgres.rows_with_tombstones().await.unwrap(),
                )
            });
            prop_assert_eq!(&sqlite, &memory, "SQLite differs from MemoryStore");
            prop_assert_eq!(&postgres, &memory, "Postgres differs from MemoryStore");
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// One batch of the listings test: its day, whether it is a listing (with
/// its `as_of` in microseconds), and its versions.
type Step = (i64, Option<i64>, Vec<Version>);

/// Listings of any content — consistent with each other or not — mixed
/// with merges and tombstones, applied in one random order to every store:
/// all end exactly where `MemoryStore` ends, tombstones, watermark rule and
/// counts included.
#[test]
fn listings_agree_byte_for_byte() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = rt.block_on(testkit::url()) else {
        return;
    };
    let step = (
        0..3i64,
        proptest::option::of(0..4i64),
        vec(
            (0..6usize, 0..3i64, 0..=TOMBSTONE, 0..3i64, Just(0usize)),
            0..8,
        ),
    );
    let mut runner = TestRunner::new(Config {
        cases: 32,
        ..Config::default()
    });
    runner
        .run(&vec(step, 1..12), |steps: Vec<Step>| {
            let results = rt.block_on(async {
                let memory = MemoryStore::new();
                let sqlite = SqliteStore::open_in_memory().await.unwrap();
                let postgres = PostgresStore::builder()
                    .schema(testkit::unique_schema())
                    .pool_size(1)
                    .connect(&url)
                    .await
                    .unwrap();
                let stores: [&dyn Store; 3] = [&memory, &sqlite, &postgres];
                let mut results = Vec::new();
                for store in stores {
                    let mut counts = Vec::new();
                    for (d, as_of, versions) in &steps {
                        let options = match as_of {
                            Some(as_of) => listing(at(0) + Duration::microseconds(*as_of)),
                            None => WriteOptions::default(),
                        }
                        .event_dates(EventDates::Lenient);
                        let records = versions.iter().map(version).collect();
                        counts.push(upsert(store, day(*d), records, options).await.unwrap());
                    }
                    results.push((store.rows_with_tombstones().await.unwrap(), counts));
                }
                results
            });
            prop_assert_eq!(&results[1], &results[0], "SQLite differs from MemoryStore");
            prop_assert_eq!(
                &results[2],
                &results[0],
                "Postgres differs from MemoryStore"
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
