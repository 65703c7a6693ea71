//! Postgres-specific behaviour: bad names and connections are typed errors,
//! a re-run of identical rows writes no tuple of the records table (and
//! exactly the day's ledger row in `backfill_days`), and the day ledger
//! commits with the rows.

use backfill_core::conformance::fixtures::{at, day, listing, rec, tomb};
use backfill_core::{upsert, Error, MemoryStore, Mode, Record, ReplaceGuard, Store, WriteOptions};
use backfill_postgres::tokio_postgres::{Config, NoTls};
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::{Duration, Utc};

use super::blocked_behind;

fn records(n: usize, version: i64) -> Vec<Record> {
    (0..n)
        .map(|i| {
            rec(
                &format!("pg/{i:06}"),
                day(0),
                &format!("{{\"i\":{i}}}"),
                at(version),
            )
        })
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

/// The schema's metadata tables cannot hold records: their names are
/// refused as table names, before connecting.
#[tokio::test]
async fn reserved_table_names_are_rejected_before_connecting() {
    let url = "postgres://postgres@127.0.0.1:1/postgres";
    for name in ["backfill_tables", "backfill_days"] {
        match PostgresStore::builder().table(name).connect(url).await {
            Err(Error::InvalidName { what, name: n }) => {
                assert_eq!((what, n.as_str()), ("table", name));
            }
            other => panic!("{name}: expected InvalidName, got {other:?}"),
        }
    }
    // As a schema name they mean nothing special.
    match PostgresStore::builder()
        .schema("backfill_days")
        .connect(url)
        .await
    {
        Err(Error::Open { .. }) => {}
        other => panic!("expected Open (nothing listens), got {other:?}"),
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
    match Record::new("pg/nul", day(0), "a\0b", Utc::now()) {
        Err(Error::InvalidRecord { .. }) => {}
        other => panic!("expected InvalidRecord, got {other:?}"),
    }
    assert!(store.rows().await.unwrap().is_empty());
}

/// Reads `n_tup_ins`, `n_tup_upd + n_tup_del` and `n_tup_hot_upd` of the
/// store's table, after flushing this backend's pending statistics.
async fn tuple_stats(store: &PostgresStore) -> (i64, i64, i64) {
    relation_stats(store, store.table()).await
}

/// As [`tuple_stats`], for any table of the store's schema.
async fn relation_stats(store: &PostgresStore, relation: &str) -> (i64, i64, i64) {
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
            &[&store.schema(), &relation],
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
    let c = upsert(&store, day(0), day_rows.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 10_000);
    let before = stats_after(&store, 10_000).await;
    let xmin = first_xmin(&store).await;
    assert_eq!(before, (10_000, 0, 0));

    for _ in 0..2 {
        let c = upsert(&store, day(0), day_rows.clone(), WriteOptions::default())
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
            rec(
                r.key(),
                r.event_date(),
                "older",
                r.updated_at() - Duration::seconds(1),
            )
        })
        .collect();
    let c = upsert(&store, day(0), stale, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.stale, c.written()), (10_000, 0));

    // One canary insert from the same backend: once it shows, anything the
    // re-runs had written would show too.
    let canary = rec("pg/canary", day(0), "{}", Utc::now());
    upsert(&store, day(0), vec![canary], WriteOptions::default())
        .await
        .unwrap();
    let after = stats_after(&store, 10_001).await;
    assert_eq!(
        after,
        (10_001, 0, 0),
        "re-applying identical or stale rows must not insert, update, delete or HOT-update"
    );
    // The day's ledger row, and only it: inserted by the first apply, then
    // one HOT update per apply (two re-runs, the stale one, the canary).
    assert_eq!(
        relation_stats(&store, "backfill_days").await,
        (1, 4, 4),
        "each re-apply writes exactly its day's ledger row"
    );
}

#[tokio::test]
async fn a_day_larger_than_one_chunk_is_atomic_and_exact() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_rows(1_000)
        .connect(&url)
        .await
        .unwrap();
    let first = records(3_500, 0);
    let c = upsert(&store, day(0), first.clone(), WriteOptions::default())
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
    let c = upsert(&store, day(0), mixed.clone(), WriteOptions::default())
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
    upsert(&a, day(0), records(3, 0), WriteOptions::default())
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
                &[&key, &day(0), &their_value, &at(their_secs)],
            )
            .await
            .unwrap();
        let ours = rec(&key, day(0), our_value, at(our_secs));
        let upsert_task = {
            let store = store.clone();
            tokio::spawn(async move {
                upsert(&store, day(0), vec![ours], WriteOptions::default()).await
            })
        };
        // Let our upsert block on the other writer's row lock, then commit.
        blocked_behind(&url, &other, 1).await;
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

/// `(key, xmin, xmax)` of every tuple of a table of the store's schema.
async fn tuples(store: &PostgresStore, relation: &str, key: &str) -> Vec<(String, String, String)> {
    let client = store.pool().get().await.unwrap();
    let sql = format!(
        "SELECT {key}::text, xmin::text, xmax::text FROM \"{}\".\"{relation}\" ORDER BY 1",
        store.schema()
    );
    client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// Re-applying a listing (with the same `as_of`, or an older one), a batch
/// of tombstones, and a live record the watermark turned into a tombstone
/// writes no tuple of the records table or of `backfill_tables` (none is
/// even locked), and exactly one update of the day's ledger row in
/// `backfill_days` per apply, its watermark kept.
#[tokio::test]
async fn replace_and_tombstone_reapply_writes_no_tuple() {
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
    let as_of = at(3600);
    let all = records(1_000, 0);
    upsert(&store, day(0), all.clone(), WriteOptions::default())
        .await
        .unwrap();
    let listing = all[..900].to_vec();
    let replace = WriteOptions::default().mode(Mode::Replace).as_of(as_of);
    let tombstones: Vec<Record> = all[900..950]
        .iter()
        .map(|r| tomb(r.key(), day(0), at(5)))
        .collect();
    let late = vec![rec("pg/late", day(0), "{}", at(30 * 60))];

    let c = upsert(&store, day(0), listing.clone(), replace)
        .await
        .unwrap();
    assert_eq!((c.unchanged, c.deleted, c.unlisted), (900, 100, 100));
    let c = upsert(&store, day(0), tombstones.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.deleted, 50, "newer tombstones over the listing's");
    let c = upsert(&store, day(0), late.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        c.deleted, 1,
        "a version older than the listing arrives deleted"
    );
    assert!(store.get("pg/late").await.unwrap().is_none());

    let records_before = tuples(&store, store.table(), "key").await;
    let days_before = tuples(&store, "backfill_days", "day").await;
    let tables_before = tuples(&store, "backfill_tables", "records_table").await;
    assert_eq!(records_before.len(), 1_001);
    assert_eq!(days_before.len(), 1);
    let stats_before = stats_after(&store, 1_001).await;
    let days_stats = relation_stats(&store, "backfill_days").await;
    // The day's ledger row: inserted by the first apply, then updated in
    // place (HOT: no indexed column changes) by each of the three others.
    assert_eq!(days_stats, (1, 3, 3));
    let ledger_before = store.ledger(day(0)..=day(0)).await.unwrap();

    for _ in 0..2 {
        let c = upsert(&store, day(0), listing.clone(), replace)
            .await
            .unwrap();
        assert_eq!((c.unchanged, c.written(), c.unlisted), (900, 0, 0));
        let older = replace.as_of(as_of - Duration::minutes(10));
        let c = upsert(&store, day(0), listing.clone(), older)
            .await
            .unwrap();
        assert_eq!((c.unchanged, c.written()), (900, 0));
        let c = upsert(&store, day(0), tombstones.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!((c.unchanged, c.written()), (50, 0));
        let c = upsert(&store, day(0), late.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!((c.stale, c.written()), (1, 0));
    }
    assert_eq!(tuples(&store, store.table(), "key").await, records_before);
    // backfill_days: still the one row of the day, its ledger moved forward
    // by the re-runs (a new tuple of the same row), its watermark kept.
    let days_after = tuples(&store, "backfill_days", "day").await;
    assert_eq!(days_after.len(), 1);
    assert_eq!(days_after[0].0, days_before[0].0);
    assert_ne!(days_after[0].1, days_before[0].1, "the ledger row moved on");
    let ledger_after = store.ledger(day(0)..=day(0)).await.unwrap();
    assert_eq!(ledger_after.len(), 1);
    assert_eq!(
        ledger_after[0].listing_watermark,
        Some(as_of),
        "re-runs keep the watermark"
    );
    assert_eq!(
        ledger_after[0].listing_watermark,
        ledger_before[0].listing_watermark
    );
    let synced = ledger_after[0].synced.as_ref().unwrap();
    assert!(synced.at >= ledger_before[0].synced.as_ref().unwrap().at);
    assert_eq!((synced.counts.stale, synced.counts.written()), (1, 0));
    assert_eq!(
        tuples(&store, "backfill_tables", "records_table").await,
        tables_before
    );
    // A canary insert from the same backend: once it shows, anything the
    // re-runs had written would show too.
    let canary = rec("pg/canary", day(0), "{}", Utc::now());
    upsert(&store, day(0), vec![canary], WriteOptions::default())
        .await
        .unwrap();
    let after = stats_after(&store, stats_before.0 + 1).await;
    assert_eq!(
        after,
        (stats_before.0 + 1, stats_before.1, stats_before.2),
        "re-applied listings and tombstones must not insert, update, delete or HOT-update"
    );
    // backfill_days: exactly one ledger row update per apply (8 re-runs
    // and the canary), HOT, and no insert or delete.
    assert_eq!(
        relation_stats(&store, "backfill_days").await,
        (days_stats.0, days_stats.1 + 9, days_stats.2 + 9),
        "each re-apply writes exactly its day's ledger row, nothing else"
    );
}

/// Purging removes exactly the tombstones older than the horizon, leaves
/// every other tuple untouched, and ends as the reference store does.
#[tokio::test]
async fn purge_removes_only_old_tombstones() {
    let Some(store) = testkit::store().await else {
        return;
    };
    let reference = MemoryStore::new();
    let all = records(300, 0);
    let replace = listing(at(3600));
    let newer: Vec<Record> = (0..300)
        .step_by(7)
        .map(|i| tomb(&format!("pg/{i:06}"), day(0), at(2 * 3600)))
        .collect();
    for target in [&store as &dyn Store, &reference] {
        upsert(target, day(0), all.clone(), WriteOptions::default())
            .await
            .unwrap();
        // Every third row unlisted: tombstones as of `at`.
        let listed: Vec<Record> = all.iter().step_by(3).cloned().collect();
        upsert(target, day(0), listed, replace).await.unwrap();
        upsert(target, day(0), newer.clone(), WriteOptions::default())
            .await
            .unwrap();
    }
    let kept_before: Vec<_> = tuples(&store, store.table(), "key")
        .await
        .into_iter()
        .filter(|(key, ..)| {
            let i: usize = key["pg/".len()..].parse().unwrap();
            i.is_multiple_of(3) || i.is_multiple_of(7)
        })
        .collect();
    let horizon = at(3600);
    let purged = store.purge_tombstones(horizon).await.unwrap();
    let expected = reference.purge_tombstones(horizon).await.unwrap();
    assert_eq!(purged, expected);
    assert!(purged > 0);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
    assert_eq!(
        tuples(&store, store.table(), "key").await,
        kept_before,
        "rows kept are untouched"
    );
    assert_eq!(store.purge_tombstones(horizon).await.unwrap(), 0);
}

/// A listing waits for a batch writing live rows of its day to commit, and
/// that batch for the listing: the watermark is read and raised under a
/// lock per day, so a version written while a listing that lacks it is
/// being applied is never left live.
#[tokio::test]
async fn a_listing_waits_for_a_concurrent_batch_of_its_day() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .connect(&url)
        .await
        .unwrap();
    let table = format!("\"{}\".\"{}\"", store.schema(), store.table());
    let (other, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    other.batch_execute("BEGIN").await.unwrap();
    other
        .execute(
            &format!("INSERT INTO {table} (key, event_date, value, updated_at) VALUES ('lock/x', $1, 'theirs', $2)"),
            &[&day(0), &at(0)],
        )
        .await
        .unwrap();
    // Ours: a newer version, blocked behind the other writer's row while it
    // holds its day's shared lock.
    let ours = rec("lock/x", day(0), "ours", at(1));
    let merge = {
        let store = store.clone();
        tokio::spawn(
            async move { upsert(&store, day(0), vec![ours], WriteOptions::default()).await },
        )
    };
    blocked_behind(&url, &other, 1).await;
    assert!(!merge.is_finished(), "the merge waits for the other writer");
    // A listing of the day, true as of later, that lacks the key.
    let listing = {
        let store = store.clone();
        let options = listing(at(3600));
        tokio::spawn(async move { upsert(&store, day(0), Vec::new(), options).await })
    };
    blocked_behind(&url, &other, 2).await;
    assert!(!listing.is_finished(), "the listing waits for the merge");
    let waiting: i64 = other
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(waiting >= 1, "the listing waits on the day's advisory lock");
    other.batch_execute("COMMIT").await.unwrap();
    let c = merge.await.unwrap().unwrap();
    assert_eq!(c.updated, 1);
    let c = listing.await.unwrap().unwrap();
    assert_eq!((c.deleted, c.unlisted), (1, 1));
    assert!(store.get("lock/x").await.unwrap().is_none());
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        [tomb("lock/x", day(0), at(1))]
    );
}

/// A listing sent in several key ranges (a day whose keys alone would not
/// fit one message) tombstones exactly what the reference store does.
#[tokio::test]
async fn a_listing_in_several_key_ranges_matches_the_reference() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .page_bytes(2_000)
        .connect(&url)
        .await
        .unwrap();
    let reference = MemoryStore::new();
    let all = records(1_000, 0);
    // Listed: a scattering, and none at the start or the end of the day,
    // so the unbounded first and last ranges have rows to tombstone.
    let listed: Vec<Record> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| (50..950).contains(i) && (i % 5 == 0 || i % 11 == 0))
        .map(|(_, r)| r.clone())
        .collect();
    // Most of the day goes: past the default guard's half.
    let options = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(3600))
        .replace_guard(ReplaceGuard::default().max_delete_fraction(1.0));
    let mut counts = Vec::new();
    for target in [&store as &dyn Store, &reference] {
        upsert(target, day(0), all.clone(), WriteOptions::default())
            .await
            .unwrap();
        counts.push(
            upsert(target, day(0), listed.clone(), options)
                .await
                .unwrap(),
        );
    }
    assert_eq!(counts[0], counts[1]);
    assert_eq!(counts[0].unlisted, (1_000 - listed.len()) as u64);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        reference.rows_with_tombstones().await.unwrap()
    );
}

/// Another writer commits a tombstone, or a live version over one, while
/// our upsert waits for its lock: the outcome still follows the version
/// order, and inserted / updated / deleted follow what the row was when
/// ours was written.
#[tokio::test]
async fn a_tombstone_committed_by_a_concurrent_writer_is_judged_by_version() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .connect(&url)
        .await
        .unwrap();
    let table = format!("\"{}\".\"{}\"", store.schema(), store.table());
    let version = |value: &str, secs: i64, deleted: bool| {
        if deleted {
            tomb("k", day(0), at(secs))
        } else {
            rec("k", day(0), value, at(secs))
        }
    };
    // (stored first, theirs committed meanwhile, ours,
    //  expected (inserted, updated, deleted, unchanged, stale))
    let cases = [
        // Theirs deletes the key; ours is a newer live version: back alive.
        (
            None,
            version("theirs", 5, true),
            version("ours", 10, false),
            (1, 0, 0, 0, 0),
        ),
        // Theirs deletes a live row; ours is an older tombstone: stale.
        (
            Some(version("old", 1, false)),
            version("", 5, true),
            version("", 3, true),
            (0, 0, 0, 0, 1),
        ),
        // Theirs revives a tombstone; ours deletes it later: deleted.
        (
            Some(version("", 1, true)),
            version("theirs", 5, false),
            version("", 10, true),
            (0, 0, 1, 0, 0),
        ),
        // Theirs revives a tombstone; ours is newer and live: updated.
        (
            Some(version("", 1, true)),
            version("theirs", 5, false),
            version("ours", 10, false),
            (0, 1, 0, 0, 0),
        ),
        // Theirs writes the very tombstone ours is: unchanged.
        (
            Some(version("old", 1, false)),
            version("", 5, true),
            version("", 5, true),
            (0, 0, 0, 1, 0),
        ),
    ];
    for (n, (stored, theirs, ours, expected)) in cases.into_iter().enumerate() {
        let key = format!("race/{n}");
        let with_key = |r: &Record| {
            if r.is_deleted() {
                tomb(&key, day(0), r.updated_at())
            } else {
                rec(&key, day(0), r.value(), r.updated_at())
            }
        };
        if let Some(stored) = &stored {
            upsert(
                &store,
                day(0),
                vec![with_key(stored)],
                WriteOptions::default(),
            )
            .await
            .unwrap();
        }
        let (theirs, ours) = (with_key(&theirs), with_key(&ours));
        let (other, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        other.batch_execute("BEGIN").await.unwrap();
        other
            .execute(
                &format!(
                    "INSERT INTO {table} (key, event_date, value, updated_at, deleted) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO UPDATE SET \
                     value = EXCLUDED.value, updated_at = EXCLUDED.updated_at, deleted = EXCLUDED.deleted"
                ),
                &[&key, &day(0), &theirs.value(), &theirs.updated_at(), &theirs.is_deleted()],
            )
            .await
            .unwrap();
        let upsert_task = {
            let store = store.clone();
            let ours = ours.clone();
            tokio::spawn(async move {
                upsert(&store, day(0), vec![ours], WriteOptions::default()).await
            })
        };
        blocked_behind(&url, &other, 1).await;
        assert!(
            !upsert_task.is_finished(),
            "case {n}: the upsert should wait for the other writer"
        );
        other.batch_execute("COMMIT").await.unwrap();
        let c = upsert_task.await.unwrap().unwrap();
        assert_eq!(
            (c.inserted, c.updated, c.deleted, c.unchanged, c.stale),
            expected,
            "case {n}"
        );
        let winner = if ours.supersedes(&theirs) {
            ours
        } else {
            theirs
        };
        let stored = store
            .rows_with_tombstones()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.key() == key)
            .unwrap();
        assert_eq!(stored, winner, "case {n}");
    }
}

/// One case of [`a_listing_and_a_merge_moving_its_keys_never_deadlock`].
type Interleaving = (Vec<Record>, Vec<Record>, &'static str, (u64, u64));

/// A listing of one day and a merge of another that moves keys out of it,
/// interleaved as a deadlock needs them: the merge (here a transaction
/// held open, taking its rows in key order as the merge statement does)
/// holds a row the listing must tombstone, then writes a later key the
/// listing lists. The listing takes every row of a key range in one
/// ordered statement, so it waits for the first without holding the
/// second: the other writer goes on, and the listing, with no retry,
/// ends as if it had run after it.
#[tokio::test]
async fn a_listing_and_a_merge_moving_its_keys_never_deadlock() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let (moved_to, listed_day) = (day(0), day(1));
    // (the listing's day as stored before, the listing's records, the
    //  other writer's statements after its first, the listing's counts
    //  (stale, unlisted))
    let cases: [Interleaving; 2] = [
        // Both keys are stored under the listed day: `a` is unlisted, `z`
        // listed; the other writer moves both away, newer.
        (
            vec![
                rec("a", listed_day, "old", at(1)),
                rec("z", listed_day, "old", at(1)),
            ],
            vec![rec("z", listed_day, "listed", at(2))],
            "UPDATE {t} SET event_date = $1, value = 'moved', updated_at = $2 WHERE key = 'z'",
            (1, 0),
        ),
        // The listed key is new: the other writer inserts it too, newer.
        (
            vec![rec("a", listed_day, "old", at(1))],
            vec![rec("n", listed_day, "listed", at(2))],
            "INSERT INTO {t} (key, event_date, value, updated_at) VALUES ('n', $1, 'moved', $2)",
            (1, 0),
        ),
    ];
    for (n, (stored, listed, second, expected)) in cases.into_iter().enumerate() {
        let store = PostgresStore::builder()
            .schema(testkit::unique_schema())
            .connect(&url)
            .await
            .unwrap();
        let t = format!("\"{}\".\"{}\"", store.schema(), store.table());
        upsert(&store, listed_day, stored, WriteOptions::default())
            .await
            .unwrap();
        let (other, connection) = url.parse::<Config>().unwrap().connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        other
            .batch_execute("BEGIN; SET LOCAL lock_timeout = '20s'")
            .await
            .unwrap();
        // The other writer's first row: `a` moves to the other day.
        other
            .execute(
                &format!(
                    "UPDATE {t} SET event_date = $1, value = 'moved', updated_at = $2 \
                     WHERE key = 'a'"
                ),
                &[&moved_to, &at(3)],
            )
            .await
            .unwrap();
        let listing_task = {
            let store = store.clone();
            let listed = listed.clone();
            tokio::spawn(async move { upsert(&store, listed_day, listed, listing(at(3600))).await })
        };
        blocked_behind(&url, &other, 1).await;
        // Its second, a later key the listing lists: it must not wait for
        // the listing (which would be a deadlock, one of the two killed).
        let written = other
            .execute(&second.replace("{t}", &t), &[&moved_to, &at(3)])
            .await;
        assert!(written.is_ok(), "case {n}: the other writer: {written:?}");
        other.batch_execute("COMMIT").await.unwrap();
        let c = listing_task.await.unwrap();
        let c = c.unwrap_or_else(|e| panic!("case {n}: the listing failed: {e}"));
        assert_eq!((c.stale, c.unlisted), expected, "case {n}: {c:?}");
        // As if the listing ran after the other writer: every key moved,
        // as the other writer left it.
        let rows = store.rows_with_tombstones().await.unwrap();
        assert!(
            rows.iter()
                .all(|r| r.event_date() == moved_to && r.value() == "moved" && !r.is_deleted()),
            "case {n}: {rows:?}"
        );
        assert_eq!(rows.len(), 2, "case {n}: {rows:?}");
    }
}
