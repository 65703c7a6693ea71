//! Postgres-specific behaviour: bad names and connections are typed errors,
//! and a re-run of identical rows writes no tuple at all.

use backfill_core::{upsert, Error, Record, Store, WriteOptions};
use backfill_postgres::tokio_postgres::{Config, NoTls};
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::{Duration, NaiveDate, TimeZone, Utc};

fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 2, 1).unwrap()
}

fn records(n: usize, version: i64) -> Vec<Record> {
    let at = Utc.with_ymd_and_hms(2026, 2, 1, 0, 0, 0).unwrap() + Duration::seconds(version);
    (0..n)
        .map(|i| Record::new(format!("pg/{i:06}"), day(), format!("{{\"i\":{i}}}"), at).unwrap())
        .collect()
}

#[tokio::test]
async fn invalid_names_are_rejected_before_connecting() {
    // Nothing listens on port 1: a name check that connected first would
    // report Open, not InvalidName.
    let url = "postgres://postgres@127.0.0.1:1/postgres";
    let hostile = [
        "",
        "1abc",
        "x\"; DROP TABLE users; --",
        "a b",
        "public.records",
        "ta\u{301}ble",
        &"a".repeat(64),
    ];
    for name in hostile {
        for (what, builder) in [
            ("schema", PostgresStore::builder().schema(name)),
            ("table", PostgresStore::builder().table(name)),
        ] {
            match builder.connect(url).await {
                Err(Error::InvalidName { what: w, name: n }) => {
                    assert_eq!((w, n.as_str()), (what, name));
                }
                other => panic!("{what} {name:?}: expected InvalidName, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn unreachable_server_is_an_open_error() {
    let url = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2";
    match PostgresStore::connect(url).await {
        Err(Error::Open {
            backend: "postgres",
            ..
        }) => {}
        other => panic!("expected Open, got {other:?}"),
    }
    match PostgresStore::connect("definitely not a connection string").await {
        Err(Error::Open {
            backend: "postgres",
            ..
        }) => {}
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test]
async fn wrong_password_is_an_open_error_and_never_shown() {
    let secret = "not-the-password-0xC0FFEE";
    let Some(config) = testkit::config_with_password(secret).await else {
        return;
    };
    let result = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .connect_with(config.clone())
        .await;
    match &result {
        Err(
            e @ Error::Open {
                backend: "postgres",
                ..
            },
        ) => {
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(!format!("{e:?}").contains(secret), "{e:?}");
            // The server's own reason reaches the message, not just "db error".
            assert!(
                e.to_string().contains("password authentication failed"),
                "{e}"
            );
        }
        other => panic!("expected Open, got {other:?}"),
    }
    assert!(
        !format!("{config:?}").contains(secret),
        "tokio-postgres redacts passwords"
    );
    // And a store's own Debug output shows no connection details at all.
    let store = testkit::store().await.unwrap();
    let shown = format!("{store:?}");
    assert!(!shown.contains("postgres:postgres"), "{shown}");
}

#[tokio::test]
async fn nul_characters_never_reach_the_server() {
    let Some(store) = testkit::store().await else {
        return;
    };
    match Record::new("pg/nul", day(), "a\0b", Utc::now()) {
        Err(Error::InvalidRecord { .. }) => {}
        other => panic!("expected InvalidRecord, got {other:?}"),
    }
    assert!(store.rows().await.unwrap().is_empty());
}

/// Reads `n_tup_ins + n_tup_upd + n_tup_del` and `n_tup_hot_upd` of the
/// store's table, after flushing this backend's pending statistics.
async fn tuple_stats(store: &PostgresStore) -> (i64, i64, i64) {
    let client = store.pool().get().await.unwrap();
    client
        .execute("SELECT pg_stat_force_next_flush()", &[])
        .await
        .unwrap();
    client
        .execute("SELECT pg_stat_clear_snapshot()", &[])
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT n_tup_ins, n_tup_upd + n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables \
             WHERE schemaname = $1 AND relname = $2",
            &[&store.schema(), &store.table()],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Polls until the statistics show `inserted` insertions, so the counters
/// are known to be current.
async fn stats_after(store: &PostgresStore, inserted: i64) -> (i64, i64, i64) {
    for _ in 0..100 {
        let stats = tuple_stats(store).await;
        if stats.0 >= inserted {
            return stats;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("statistics never showed {inserted} insertions");
}

/// The transaction id that wrote the first row.
async fn first_xmin(store: &PostgresStore) -> String {
    let client = store.pool().get().await.unwrap();
    let sql = format!(
        "SELECT xmin::text FROM \"{}\".\"{}\" ORDER BY key LIMIT 1",
        store.schema(),
        store.table()
    );
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn identical_reapply_writes_no_tuple() {
    let Some(url) = testkit::url().await else {
        return;
    };
    // One connection, so every write and the statistics flush share a backend.
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .pool_size(1)
        .connect(&url)
        .await
        .unwrap();
    let day_rows = records(10_000, 0);
    let c = upsert(&store, day(), day_rows.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 10_000);
    let before = stats_after(&store, 10_000).await;
    let xmin = first_xmin(&store).await;
    assert_eq!(before, (10_000, 0, 0));

    for _ in 0..2 {
        let c = upsert(&store, day(), day_rows.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!((c.unchanged, c.written()), (10_000, 0));
    }
    // Not even a row lock: a locked (or rewritten) row would carry our xid.
    let client = store.pool().get().await.unwrap();
    let touched: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{}\".\"{}\" WHERE xmax::text <> '0' OR xmin::text <> $1",
                store.schema(),
                store.table()
            ),
            &[&xmin],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        touched, 0,
        "re-applied rows must keep their tuple untouched"
    );
    drop(client);
    // A stale re-delivery writes nothing either.
    let stale: Vec<_> = day_rows
        .iter()
        .map(|r| {
            Record::new(
                r.key(),
                r.event_date(),
                "older",
                r.updated_at() - Duration::seconds(1),
            )
            .unwrap()
        })
        .collect();
    let c = upsert(&store, day(), stale, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.stale, c.written()), (10_000, 0));

    // One canary insert from the same backend: once it shows, anything the
    // re-runs had written would show too.
    let canary = Record::new("pg/canary", day(), "{}", Utc::now()).unwrap();
    upsert(&store, day(), vec![canary], WriteOptions::default())
        .await
        .unwrap();
    let after = stats_after(&store, 10_001).await;
    assert_eq!(
        after,
        (10_001, 0, 0),
        "re-applying identical or stale rows must not insert, update, delete or HOT-update"
    );
}

#[tokio::test]
async fn a_day_larger_than_one_chunk_is_atomic_and_exact() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .chunk_rows(1_000)
        .connect(&url)
        .await
        .unwrap();
    let first = records(3_500, 0);
    let c = upsert(&store, day(), first.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 3_500);
    // Half newer, half identical, across four chunks.
    let mixed: Vec<_> = records(3_500, 1)
        .into_iter()
        .zip(first)
        .enumerate()
        .map(|(i, (newer, same))| if i % 2 == 0 { newer } else { same })
        .collect();
    let c = upsert(&store, day(), mixed.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.updated, c.unchanged), (1_750, 1_750));
    assert_eq!(store.rows().await.unwrap(), mixed);
}

#[tokio::test]
async fn tables_and_schemas_are_created_once_and_reused() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let open = || {
        PostgresStore::builder()
            .schema(schema.clone())
            .table("events")
            .connect(&url)
    };
    // Concurrent first opens must not race on CREATE … IF NOT EXISTS.
    let (a, b, c) = tokio::join!(open(), open(), open());
    let (a, b, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
    upsert(&a, day(), records(3, 0), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(b.rows().await.unwrap(), records(3, 0));
    let other = PostgresStore::builder()
        .schema(schema)
        .table("other")
        .connect(&url)
        .await
        .unwrap();
    assert!(other.rows().await.unwrap().is_empty());
}

/// Another writer commits a row while our upsert waits for its lock: our
/// snapshot saw the key absent, the upsert's own WHERE sees the committed
/// row. The outcome must still follow the version order, and the counts
/// must still be exact.
#[tokio::test]
async fn a_row_committed_by_a_concurrent_writer_is_judged_by_version() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .connect(&url)
        .await
        .unwrap();
    let table = format!("\"{}\".\"{}\"", store.schema(), store.table());
    let at = Utc.with_ymd_and_hms(2026, 2, 1, 0, 0, 0).unwrap();
    // (their value, their second, our value, our second, expected counts)
    let cases = [
        ("theirs", 10, "ours", 5, (0, 0, 0, 1)), // theirs is newer: ours is stale
        ("same", 5, "same", 5, (0, 0, 1, 0)),    // identical: unchanged
        ("theirs", 5, "ours", 10, (0, 1, 0, 0)), // ours is newer: updated
    ];
    for (n, (their_value, their_secs, our_value, our_secs, expected)) in
        cases.into_iter().enumerate()
    {
        let key = format!("race/{n}");
        let (other, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        other.batch_execute("BEGIN").await.unwrap();
        other
            .execute(
                &format!("INSERT INTO {table} (key, event_date, value, updated_at) VALUES ($1, $2, $3, $4)"),
                &[&key, &day(), &their_value, &(at + Duration::seconds(their_secs))],
            )
            .await
            .unwrap();
        let ours = Record::new(
            key.clone(),
            day(),
            our_value,
            at + Duration::seconds(our_secs),
        )
        .unwrap();
        let upsert_task = {
            let store = store.clone();
            tokio::spawn(
                async move { upsert(&store, day(), vec![ours], WriteOptions::default()).await },
            )
        };
        // Let our upsert block on the other writer's row lock, then commit.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(
            !upsert_task.is_finished(),
            "the upsert should wait for the other writer"
        );
        other.batch_execute("COMMIT").await.unwrap();
        let c = upsert_task.await.unwrap().unwrap();
        assert_eq!(
            (c.inserted, c.updated, c.unchanged, c.stale),
            expected,
            "case {n}"
        );
        let stored = store.get(&key).await.unwrap().unwrap();
        let winner = if expected.1 == 1 {
            our_value
        } else {
            their_value
        };
        assert_eq!(stored.value(), winner, "case {n}");
    }
}
