//! A batch applied again: the store compares the day's stored rows with it
//! as one digest before sending any value, and writes nothing when they
//! are the same. A stored row that differs in anything the merge reads —
//! only its `updated_at` by a microsecond, only its tombstone flag, one
//! byte deep in its value, its day — sends the batch through the merge,
//! which judges each record as ever.

use backfill_core::conformance::fixtures::{at, awkward_day as batch, day, rec};
use backfill_core::{upsert, Counts, Record, Store, WriteOptions};
use backfill_postgres::tokio_postgres::Client;
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;

/// A store of one connection, whose statistics [`key_lookups`] flushes.
pub(crate) async fn store(url: &str) -> PostgresStore {
    PostgresStore::builder()
        .schema(testkit::unique_schema())
        .pool_size(1)
        .connect(url)
        .await
        .unwrap()
}

/// Index scans of the table's primary key so far, as the statistics
/// show them once flushed: the merge reaches keys through it, the digest
/// of a day does not.
pub(crate) async fn key_lookups(admin: &Client, store: &PostgresStore) -> i64 {
    index_scans(admin, store, "LIKE").await
}

/// Scans of the table's other indexes so far (that on `event_date`): the
/// digest of a day reads its rows through it once, and a day compared
/// record by record after that reads them again.
async fn day_reads(admin: &Client, store: &PostgresStore) -> i64 {
    index_scans(admin, store, "NOT LIKE").await
}

/// Scans of the table's indexes whose name is `like` `'%pkey'`.
async fn index_scans(admin: &Client, store: &PostgresStore, like: &str) -> i64 {
    // The store's one session flushes its statistics before it answers
    // the statement after this one.
    let own = store.pool().get().await.unwrap();
    own.batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    own.batch_execute("SELECT 1").await.unwrap();
    drop(own);
    admin
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    admin
        .query_one(
            &format!(
                "SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_user_indexes \
                 WHERE schemaname = $1 AND relname = $2 AND indexrelname {like} '%pkey'"
            ),
            &[&store.schema(), &store.table()],
        )
        .await
        .unwrap()
        .get(0)
}

/// Each row's `xmin`: a row written again has a new one.
pub(crate) async fn versions(admin: &Client, store: &PostgresStore) -> Vec<(String, String)> {
    let sql = format!(
        r#"SELECT key, xmin::text FROM "{}"."{}" ORDER BY key"#,
        store.schema(),
        store.table()
    );
    admin
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn a_batch_applied_again_is_compared_as_one_digest_and_writes_nothing() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = store(&url).await;
    let admin = crate::admin(&url).await;
    upsert(&store, day(0), batch(), WriteOptions::default())
        .await
        .unwrap();
    let before = versions(&admin, &store).await;
    let lookups = key_lookups(&admin, &store).await;
    let reads = day_reads(&admin, &store).await;

    for _ in 0..2 {
        let again = upsert(&store, day(0), batch(), WriteOptions::default())
            .await
            .unwrap();
        let mut want = Counts::default();
        want.unchanged = 25;
        assert_eq!(again, want);
    }
    assert_eq!(versions(&admin, &store).await, before, "a row was written");
    assert_eq!(
        key_lookups(&admin, &store).await,
        lookups,
        "the batch's keys were looked up one by one: the digests differed"
    );
    assert_eq!(
        day_reads(&admin, &store).await,
        reads + 2,
        "the day's rows were read more than once a run: the digests differed"
    );
}

/// What is changed behind the store's back, on the row of `key`, and what
/// the batch applied again must then do with that record.
struct Tamper {
    key: &'static str,
    set: &'static str,
    expect: fn(&Counts) -> bool,
}

#[tokio::test]
async fn a_row_that_differs_in_anything_the_merge_reads_is_never_taken_as_unchanged() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let cases = [
        // Older by one microsecond: the record is newer and is written.
        Tamper {
            key: "f/03",
            set: "updated_at = updated_at - interval '1 microsecond'",
            expect: |c| c.updated == 1 && c.unchanged == 24,
        },
        // A tombstone of the same instant orders after the live record,
        // which is then stale.
        Tamper {
            key: "f/03",
            set: "deleted = true, value = ''",
            expect: |c| c.stale == 1 && c.unchanged == 24,
        },
        // One byte deep in the long value, made smaller: the record's
        // value orders after it and wins.
        Tamper {
            key: "b/long",
            set: "value = overlay(value placing 'w' from 5000 for 1)",
            expect: |c| c.updated == 1 && c.unchanged == 24,
        },
        // Moved to another day, as another batch would: the record wins
        // back by its value (same instant, `v3` after `v2`).
        Tamper {
            key: "f/03",
            set: "event_date = '2026-01-02', value = 'v2'",
            expect: |c| c.updated == 1 && c.unchanged == 24,
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        let store = store(&url).await;
        upsert(&store, day(0), batch(), WriteOptions::default())
            .await
            .unwrap();
        let sql = format!(
            r#"UPDATE "{}"."{}" SET {} WHERE key = '{}'"#,
            store.schema(),
            store.table(),
            case.set,
            case.key
        );
        assert_eq!(admin.execute(&sql, &[]).await.unwrap(), 1);
        let again = upsert(&store, day(0), batch(), WriteOptions::default())
            .await
            .unwrap();
        assert!((case.expect)(&again), "case {i}: {again:?}");
        // Whatever the tamper, the table ends as the merge leaves it: the
        // batch where it won, the tombstone where that won.
        let mut want = batch();
        if case.set.starts_with("deleted") {
            want.retain(|r| r.key() != case.key);
        }
        want.retain(|r| !r.is_deleted());
        assert_eq!(store.rows().await.unwrap(), want, "case {i}");
    }
}

/// The records table leaves a fifth of each page free unless told
/// otherwise, and a re-fetched day's changed records are then updated in
/// place: heap-only tuples, no index written.
#[tokio::test]
async fn a_changed_record_of_the_day_is_updated_in_place() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let admin = crate::admin(&url).await;
    let options = |store: &PostgresStore| {
        format!(
            "SELECT c.reloptions::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = '{}' AND c.relname = '{}'",
            store.schema(),
            store.table()
        )
    };
    let packed = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .fill_factor(100)
        .connect(&url)
        .await
        .unwrap();
    let sql = options(&packed);
    let set: Option<String> = admin.query_one(&sql, &[]).await.unwrap().get(0);
    assert_eq!(set.as_deref(), Some("{fillfactor=100}"));

    let store = store(&url).await;
    let set: Option<String> = admin.query_one(&options(&store), &[]).await.unwrap().get(0);
    assert_eq!(set.as_deref(), Some("{fillfactor=80}"));
    let rows = |changed: bool| -> Vec<Record> {
        (0..200)
            .map(|i| {
                let (value, when) = match changed && i % 5 == 0 {
                    true => (format!("{i:040}-changed"), at(i + 3_600)),
                    false => (format!("{i:040}"), at(i)),
                };
                rec(&format!("k/{i:03}"), day(0), &value, when)
            })
            .collect()
    };
    upsert(&store, day(0), rows(false), WriteOptions::default())
        .await
        .unwrap();
    let counts = upsert(&store, day(0), rows(true), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((counts.updated, counts.unchanged), (40, 160));
    key_lookups(&admin, &store).await; // flushes the statistics
    let hot: i64 = admin
        .query_one(
            "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
            &[&store.schema(), &store.table()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(hot, 40, "every changed record updated in place");
}

/// A batch whose bytes are hashed in many buffers (about 300 KiB) is
/// still found to be its stored rows, digest for digest.
#[tokio::test]
async fn a_batch_of_many_buffers_applied_again_writes_nothing() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let rows: Vec<Record> = (0..300)
        .map(|i| rec(&format!("k/{i:03}"), day(0), &format!("{i:01000}"), at(i)))
        .collect();
    applied_again_as_one_digest(&url, rows).await;
}

/// Applies `rows` (sorted by key, all of day 0) to a fresh store, then
/// again, and asserts the second apply found every record unchanged by
/// one digest of the day: no row written, no key looked up, the day's rows
/// read once.
async fn applied_again_as_one_digest(url: &str, rows: Vec<Record>) {
    let store = store(url).await;
    let admin = crate::admin(url).await;
    upsert(&store, day(0), rows.clone(), WriteOptions::default())
        .await
        .unwrap();
    let before = versions(&admin, &store).await;
    let lookups = key_lookups(&admin, &store).await;
    let reads = day_reads(&admin, &store).await;
    let n = rows.len() as u64;
    let again = upsert(&store, day(0), rows, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(again.unchanged, n, "{again:?}");
    assert_eq!(versions(&admin, &store).await, before, "a row was written");
    assert_eq!(key_lookups(&admin, &store).await, lookups);
    assert_eq!(
        day_reads(&admin, &store).await,
        reads + 1,
        "the day's rows were read more than once: the digests differed"
    );
}

/// The server sorts a day's rows by their digested bytes, which begin with
/// the key and a zero byte: keys that are prefixes of one another, or
/// differ only past a prefix by a byte below or above `/`, sort there as
/// the batch does, so the batch is still found to be its stored rows.
#[tokio::test]
async fn keys_that_are_prefixes_of_one_another_are_digested_in_the_batch_order() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let mut rows: Vec<Record> = ["k", "k\u{1}", "k-", "k/", "k/a", "ka", "k\u{7f}", "kä", "l"]
        .iter()
        .enumerate()
        .map(|(i, k)| rec(k, day(0), &format!("{k}{i}"), at(i as i64)))
        .collect();
    rows.sort_by(|a, b| a.key().cmp(b.key()));
    applied_again_as_one_digest(&url, rows).await;
}

/// A row of the day inside the batch's key range that the batch lacks
/// (another batch moved it there) makes the stored rows more than the
/// batch: its records are compared one by one after the digest, found
/// unchanged, and that row is left as it is.
#[tokio::test]
async fn a_day_holding_a_row_the_batch_lacks_is_merged() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = store(&url).await;
    let admin = crate::admin(&url).await;
    upsert(&store, day(0), batch(), WriteOptions::default())
        .await
        .unwrap();
    let other = rec("f/03x", day(0), "moved here", at(1));
    let lenient = WriteOptions::default().event_dates(backfill_core::EventDates::Lenient);
    upsert(&store, day(1), vec![other.clone()], lenient)
        .await
        .unwrap();
    let reads = day_reads(&admin, &store).await;
    let again = upsert(&store, day(0), batch(), WriteOptions::default())
        .await
        .unwrap();
    let mut want = Counts::default();
    want.unchanged = 25;
    assert_eq!(again, want);
    assert!(
        day_reads(&admin, &store).await > reads + 1,
        "the batch was taken as its stored rows"
    );
    let mut rows = batch();
    rows.push(other);
    rows.retain(|r| !r.is_deleted());
    rows.sort_by(|a, b| a.key().cmp(b.key()));
    assert_eq!(store.rows().await.unwrap(), rows);
}
