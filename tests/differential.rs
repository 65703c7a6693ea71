//! Differential test: the same random batches, applied in a different random
//! order to each store, leave byte-identical rows in `MemoryStore`,
//! `SqliteStore` and `PostgresStore`.

use backfill::postgres::PostgresStore;
use backfill::sqlite::SqliteStore;
use backfill::{upsert, EventDates, MemoryStore, Record, Store, WriteOptions};
use backfill_testkit as testkit;
use chrono::{Duration, NaiveDate, TimeZone, Utc};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const KEYS: [&str; 6] = ["a", "B", "é", "z", "ключ", "🔑"];
const VALUES: [&str; 6] = ["", "a", "Z", "z", "é", "{\"n\":1}"];

/// `(key, day, value, second)` versions, grouped into batches by `batch`.
type Version = (usize, i64, usize, i64, usize);

fn build(versions: &[Version]) -> Vec<(NaiveDate, Vec<Record>)> {
    let base = NaiveDate::from_ymd_opt(2026, 5, 1).unwrap();
    let at = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap();
    (0..4)
        .map(|batch| {
            let records = versions
                .iter()
                .filter(|v| v.4 == batch)
                .map(|&(k, d, v, t, _)| {
                    let day = base + Duration::days(d);
                    Record::new(KEYS[k], day, VALUES[v], at + Duration::microseconds(t)).unwrap()
                })
                .collect();
            (base + Duration::days(batch as i64 % 2), records)
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
        vec((0..6usize, 0..3i64, 0..6usize, 0..3i64, 0..4usize), 1..40),
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
                    memory.rows().await.unwrap(),
                    sqlite.rows().await.unwrap(),
                    postgres.rows().await.unwrap(),
                )
            });
            prop_assert_eq!(&sqlite, &memory, "SQLite differs from MemoryStore");
            prop_assert_eq!(&postgres, &memory, "Postgres differs from MemoryStore");
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
