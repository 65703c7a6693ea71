//! Days and values past Postgres' message limit: no protocol message may
//! exceed 1 GiB, so a day is sent in statements bounded by bytes as well as
//! rows, and a value that could never fit is refused before anything is
//! sent.

use std::time::Duration;

use backfill_core::conformance::fixtures::{at, day, rec};
use backfill_core::{upsert, Error, Field, Problem, Record, Store, WriteOptions};
use backfill_postgres::{PostgresStore, MAX_VALUE_BYTES};
use backfill_testkit as testkit;

const MIB: usize = 1 << 20;

/// 1 100 records of 1 MiB: 1.1 GiB in one day. The values compress to
/// almost nothing in the table (TOAST), so the test costs the server
/// little; on the wire each is still 1 MiB.
#[tokio::test]
async fn a_day_larger_than_one_gib_is_written() {
    let Some(store) = testkit::store().await else {
        return;
    };
    let value = "x".repeat(MIB);
    let records: Vec<Record> = (0..1_100)
        .map(|i| rec(&format!("big/{i:04}"), day(0), &value, at(0)))
        .collect();
    drop(value);
    let c = upsert(&store, day(0), records, WriteOptions::default())
        .await
        .expect("a day of 1.1 GiB must be written");
    assert_eq!(c.inserted, 1_100);
    // Counted in the server: reading 1.1 GiB back would prove no more.
    let client = store.pool().get().await.unwrap();
    let row = client
        .query_one(
            &format!(
                "SELECT count(*), sum(octet_length(value))::int8 FROM \"{}\".\"{}\"",
                store.schema(),
                store.table()
            ),
            &[],
        )
        .await
        .unwrap();
    let (rows, bytes): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((rows, bytes), (1_100, 1_100 * MIB as i64));
}

/// Chunks bounded by bytes, far below the default: the day still lands
/// whole and exact, in one transaction, counted right.
#[tokio::test]
async fn a_day_is_split_by_bytes_and_stays_exact() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_bytes(4_000)
        .connect(&url)
        .await
        .unwrap();
    // Values from empty to larger than a chunk (which then travels alone).
    let records: Vec<Record> = (0..300)
        .map(|i| rec(&format!("k/{i:03}"), day(0), &"v".repeat(i * 17), at(0)))
        .collect();
    let c = upsert(&store, day(0), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 300);
    let c = upsert(&store, day(0), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.unchanged, c.written()), (300, 0));
    assert_eq!(store.rows().await.unwrap(), records);
}

/// A value that alone would make a message over 1 GiB is an invalid record,
/// found before a connection is even taken: the pool's only connection is
/// held, so a store that tried to send would wait forever.
#[tokio::test]
async fn a_value_too_large_for_the_server_is_refused_before_sending() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .pool_size(1)
        .connect(&url)
        .await
        .unwrap();
    let len = MAX_VALUE_BYTES + 1;
    let records = vec![
        rec("a/small", day(0), "{}", at(0)),
        rec("b/huge", day(0), &"x".repeat(len), at(0)),
    ];
    let held = store.pool().get().await.unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        upsert(&store, day(0), records, WriteOptions::default()),
    )
    .await
    .expect("the record must be refused without waiting for a connection");
    drop(held);
    match result {
        Err(
            ref e @ Error::InvalidRecord {
                ref key,
                field: Field::Value,
                problem: Problem::TooLong { len: l, max },
            },
        ) => {
            assert_eq!((key.as_str(), l, max), ("b/huge", len, MAX_VALUE_BYTES));
            assert!(!e.is_retryable());
        }
        other => panic!("expected InvalidRecord (value too long), got {other:?}"),
    }
    assert!(store.rows().await.unwrap().is_empty());
}
