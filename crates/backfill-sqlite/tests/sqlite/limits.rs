//! Values too large for SQLite are refused as invalid records, typed and
//! not worth a retry, before anything of their batch is written.

use backfill_core::conformance::fixtures::{day, kv};
use backfill_core::{upsert, Error, Field, Problem, Store, WriteOptions, MAX_KEY_BYTES};
use backfill_sqlite::SqliteStore;

const LIMIT: u32 = 100_000;

#[tokio::test]
async fn the_default_limit_is_sqlites() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    let max = store.max_value_bytes();
    assert!(max < 1_000_000_000 && max > 999_999_000, "{max}");
}

#[tokio::test]
async fn a_value_over_the_length_limit_is_an_invalid_record_and_writes_nothing() {
    let store = SqliteStore::builder_in_memory()
        .length_limit(LIMIT)
        .open()
        .await
        .unwrap();
    let max = store.max_value_bytes();
    assert!(
        max < LIMIT as usize && max > LIMIT as usize - 1_000,
        "{max}"
    );
    let too_long = "v".repeat(LIMIT as usize);
    let batch = vec![kv("a", "small"), kv("b", &too_long)];
    match upsert(&store, day(0), batch, WriteOptions::default()).await {
        Err(
            e @ Error::InvalidRecord {
                field: Field::Value,
                problem: Problem::TooLong { .. },
                ..
            },
        ) => {
            assert!(!e.is_retryable());
            let Error::InvalidRecord { key, problem, .. } = e else {
                unreachable!()
            };
            assert_eq!(key, "b");
            assert_eq!(
                problem,
                Problem::TooLong {
                    len: LIMIT as usize,
                    max
                }
            );
        }
        other => panic!("expected InvalidRecord, got {other:?}"),
    }
    assert!(store.rows().await.unwrap().is_empty(), "nothing written");
    assert_eq!(store.total_changes().await.unwrap(), 0);
}

#[tokio::test]
async fn the_longest_value_taken_fits_beside_the_longest_key() {
    let store = SqliteStore::builder_in_memory()
        .length_limit(LIMIT)
        .open()
        .await
        .unwrap();
    let max = store.max_value_bytes();
    let longest = kv(&"k".repeat(MAX_KEY_BYTES), &"v".repeat(max));
    upsert(
        &store,
        day(0),
        vec![longest.clone()],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(store.rows().await.unwrap(), vec![longest]);
    let over = kv("k", &"v".repeat(max + 1));
    assert!(matches!(
        upsert(&store, day(0), vec![over], WriteOptions::default()).await,
        Err(Error::InvalidRecord {
            field: Field::Value,
            ..
        })
    ));
}
