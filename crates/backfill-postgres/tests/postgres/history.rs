//! History as Postgres keeps it: a re-run writes no tuple of either table,
//! concurrent writers cut into different pages never deadlock on it,
//! turning it on for a table with rows, its objects checked on open, and
//! the SQL an analyst runs against the view.

use backfill_core::conformance::fixtures::{at, day, listing, rec, tomb};
use backfill_core::{upsert, upsert_stream, Error, MemoryStore, Record, Store, WriteOptions};
use backfill_postgres::{PostgresStore, DEFAULT_TABLE};
use backfill_testkit as testkit;
use futures_util::stream;

use super::admin;

async fn open(url: &str, schema: &str, history: bool) -> backfill_core::Result<PostgresStore> {
    PostgresStore::builder()
        .schema(schema)
        .history(history)
        .connect(url)
        .await
}

async fn put(store: &dyn Store, records: Vec<Record>, options: WriteOptions) {
    let d = records.first().map_or(day(0), Record::event_date);
    upsert(store, d, records, options).await.unwrap();
}

fn open_error(result: backfill_core::Result<PostgresStore>) -> String {
    match result {
        Err(Error::Open { source, .. }) => source.to_string(),
        other => panic!("expected an open error, got {other:?}"),
    }
}

/// `n_tup_ins` and `n_tup_upd + n_tup_del` of `relation` in the store's
/// schema, once the statistics show at least `inserted` insertions.
async fn stats(store: &PostgresStore, relation: &str, inserted: i64) -> (i64, i64) {
    let client = store.pool().get().await.unwrap();
    for _ in 0..100 {
        client
            .batch_execute("SELECT pg_stat_force_next_flush(); SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        let row = client
            .query_one(
                "SELECT n_tup_ins, n_tup_upd + n_tup_del FROM pg_stat_user_tables \
                 WHERE schemaname = $1 AND relname = $2",
                &[&store.schema(), &relation],
            )
            .await
            .unwrap();
        let (ins, changed): (i64, i64) = (row.get(0), row.get(1));
        if ins >= inserted {
            return (ins, changed);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("statistics of {relation} never showed {inserted} insertions");
}

/// How many rows `relation` of the store's schema holds.
async fn row_count(store: &PostgresStore, relation: &str) -> i64 {
    let client = store.pool().get().await.unwrap();
    client
        .query_one(
            &format!(r#"SELECT count(*) FROM "{}"."{relation}""#, store.schema()),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// History's versions table holds only what the records table does not:
/// the 200 rows the second batch replaced. A re-run of merges, of a stale
/// re-delivery history holds, and of a listing of the same instant writes
/// no tuple of either.
#[tokio::test]
async fn a_rerun_writes_no_history_tuple() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let store = open(&url, &testkit::unique_schema(), true).await.unwrap();
    let d = day(0);
    let batch = |v: &str, t: i64| -> Vec<Record> {
        (0..200)
            .map(|i| rec(&format!("h/{i:04}"), d, &format!("{v}{i}"), at(t)))
            .collect()
    };
    put(&store, batch("a", 10), WriteOptions::default()).await;
    put(&store, batch("b", 20), WriteOptions::default()).await;
    put(&store, batch("b", 20), listing(at(30))).await;
    let versions = format!("{DEFAULT_TABLE}:versions");
    let live = stats(&store, DEFAULT_TABLE, 200).await;
    let kept = stats(&store, &versions, 200).await;
    assert_eq!(
        row_count(&store, &versions).await,
        200,
        "the replaced versions alone"
    );
    put(&store, batch("b", 20), WriteOptions::default()).await;
    put(&store, batch("a", 10), WriteOptions::default()).await;
    put(&store, batch("b", 20), listing(at(30))).await;
    // A marker: one version new to history, so the statistics are known
    // to include the re-runs.
    put(
        &store,
        vec![rec("h/0000", d, "older", at(5))],
        WriteOptions::default(),
    )
    .await;
    let after = stats(&store, &versions, kept.0 + 1).await;
    assert_eq!(after, (kept.0 + 1, kept.1), "history: the marker alone");
    assert_eq!(
        stats(&store, DEFAULT_TABLE, 0).await,
        live,
        "records: nothing"
    );
    assert_eq!(row_count(&store, &versions).await, 201);
    assert_eq!(store.history().await.unwrap().len(), 401);
}

/// Two writers whose streamed days are cut into pages of different sizes
/// apply overlapping versions (each newer on half the keys, so each
/// writes some versions stale to the records table but new to history)
/// at the same time, many times over: every apply succeeds, and history
/// ends as the reference store's. History takes its locks after the
/// records table's, in key order, so no schedule deadlocks.
#[tokio::test]
async fn writers_cut_into_different_pages_never_deadlock_on_history() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let builder = |rows: usize| {
        PostgresStore::builder()
            .schema(schema.clone())
            .history(true)
            .page_rows(rows)
            .connect(&url)
    };
    let (small, large) = (builder(7).await.unwrap(), builder(100).await.unwrap());
    let reference = MemoryStore::with_history();
    let streamed = |store: PostgresStore, records: Vec<Record>| async move {
        let chunks: Vec<Result<Vec<Record>, std::io::Error>> =
            records.chunks(50).map(|c| Ok(c.to_vec())).collect();
        upsert_stream(
            &store,
            day(0),
            stream::iter(chunks),
            WriteOptions::default(),
        )
        .await
    };
    for round in 0..12 {
        let key = |i: usize| format!("dl/{round:02}/{i:04}");
        let version = |i: usize, value: &str, secs: i64| rec(&key(i), day(0), value, at(secs));
        let a: Vec<Record> = (0..300)
            .map(|i| version(i, "a", if i % 2 == 0 { 3 } else { 2 }))
            .collect();
        let b: Vec<Record> = (0..300)
            .map(|i| version(i, "b", if i % 2 == 0 { 2 } else { 3 }))
            .collect();
        let (ra, rb) = tokio::join!(
            streamed(small.clone(), a.clone()),
            streamed(large.clone(), b.clone()),
        );
        ra.unwrap();
        rb.unwrap();
        for batch in [a, b] {
            put(&reference, batch, WriteOptions::default()).await;
        }
    }
    assert_eq!(
        small.history().await.unwrap(),
        reference.history().await.unwrap()
    );
}

/// Turned on for a table with rows, history starts from them (one version
/// per key, tombstones included, with the days' latest listings) and says
/// so; a store opened later without asking keeps writing it.
#[tokio::test]
async fn history_turned_on_starts_from_the_rows_and_stays_on() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let plain = open(&url, &schema, false).await.unwrap();
    assert!(!plain.keeps_history());
    assert!(matches!(plain.history().await, Err(Error::HistoryOff)));
    let d = day(0);
    put(
        &plain,
        vec![rec("a", d, "1", at(10)), rec("b", d, "2", at(10))],
        WriteOptions::default(),
    )
    .await;
    put(&plain, vec![tomb("c", d, at(12))], WriteOptions::default()).await;
    put(&plain, vec![rec("a", d, "1", at(10))], listing(at(50))).await;

    let store = open(&url, &schema, true).await.unwrap();
    assert_eq!(store.history_started_with(), Some(3));
    let rows = store.history().await.unwrap();
    let versions: Vec<Record> = rows.iter().map(|r| r.record.clone()).collect();
    assert_eq!(versions, store.rows_with_tombstones().await.unwrap());
    assert_eq!(
        open(&url, &schema, true)
            .await
            .unwrap()
            .history_started_with(),
        None
    );

    let unasked = open(&url, &schema, false).await.unwrap();
    assert!(unasked.keeps_history(), "once on, history stays on");
    put(
        &unasked,
        vec![rec("a", d, "0", at(5))],
        WriteOptions::default(),
    )
    .await;
    let a: Vec<_> = unasked
        .history()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.record.key() == "a")
        .map(|r| (r.record.value().to_owned(), r.valid_from(), r.valid_to))
        .collect();
    assert_eq!(
        a,
        [
            ("0".to_owned(), at(5), Some(at(10))),
            ("1".to_owned(), at(10), None)
        ]
    );
}

/// History written by the store's first layout (a copy of every version
/// in the versions table, no index by key, the first view) is read as it
/// is: opening remakes the view and adds the index, history is unchanged,
/// and writes go on from it.
#[tokio::test]
async fn history_of_the_first_layout_reads_the_same() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let store = open(&url, &schema, true).await.unwrap();
    let reference = MemoryStore::with_history();
    let d = day(0);
    let deliveries = [
        (
            vec![rec("a", d, "1", at(10)), rec("b", d, "2", at(10))],
            WriteOptions::default(),
        ),
        (
            vec![rec("a", d, "3", at(20)), tomb("b", d, at(15))],
            WriteOptions::default(),
        ),
        (vec![rec("c", d, "4", at(12))], WriteOptions::default()),
        (vec![rec("a", d, "3", at(20))], listing(at(30))),
    ];
    for (records, options) in &deliveries {
        put(&store, records.clone(), *options).await;
        put(&reference, records.clone(), *options).await;
    }
    let before = store.history().await.unwrap();
    assert_eq!(before, reference.history().await.unwrap());
    drop(store);
    // What the first layout kept: every version, the table's too.
    let admin = admin(&url).await;
    admin
        .batch_execute(&format!(
            r#"SET search_path TO "{schema}";
               DROP INDEX "{t}:by_key";
               INSERT INTO "{t}:versions" (key, event_date, value, updated_at, deleted)
                   SELECT key, event_date, value, updated_at, deleted FROM "{t}" t
                   WHERE NOT EXISTS (SELECT 1 FROM "{t}:versions" v
                                     WHERE v.key = t.key AND v.updated_at = t.updated_at);
               COMMENT ON VIEW "{t}_history" IS 'backfill: history of {t}'"#,
            t = DEFAULT_TABLE
        ))
        .await
        .unwrap();
    let store = open(&url, &schema, false).await.unwrap();
    assert!(store.keeps_history());
    assert_eq!(store.history().await.unwrap(), before);
    let comment: Option<String> = admin
        .query_one(
            "SELECT obj_description($1::text::regclass, 'pg_class')",
            &[&format!(r#""{schema}"."{DEFAULT_TABLE}_history""#)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        comment.as_deref(),
        Some(format!("backfill: history of {DEFAULT_TABLE}, version 2").as_str())
    );
    let more = [
        (
            vec![rec("a", d, "5", at(40)), rec("c", d, "0", at(11))],
            WriteOptions::default(),
        ),
        (vec![rec("a", d, "5", at(40))], listing(at(50))),
    ];
    for (records, options) in &more {
        put(&store, records.clone(), *options).await;
        put(&reference, records.clone(), *options).await;
    }
    assert_eq!(
        store.history().await.unwrap(),
        reference.history().await.unwrap()
    );
}

/// History's objects are checked on open: a view of other columns, or a
/// table where the view goes, is refused naming it; a name too long for
/// history's tables is refused before anything is created.
#[tokio::test]
async fn history_objects_of_another_shape_are_refused() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    drop(open(&url, &schema, true).await.unwrap());
    let admin = admin(&url).await;
    admin
        .batch_execute(&format!(
            r#"DROP VIEW "{schema}"."{DEFAULT_TABLE}_history";
               CREATE VIEW "{schema}"."{DEFAULT_TABLE}_history" AS
                   SELECT key, updated_at FROM "{schema}"."{DEFAULT_TABLE}:versions""#
        ))
        .await
        .unwrap();
    let message = open_error(open(&url, &schema, true).await);
    assert!(message.contains("_history"), "{message}");
    assert!(message.contains("is not the history view"), "{message}");
    let message = open_error(open(&url, &schema, false).await);
    assert!(
        message.contains("is not the history view"),
        "unasked too: {message}"
    );

    let other = testkit::unique_schema();
    drop(open(&url, &other, false).await.unwrap());
    admin
        .batch_execute(&format!(
            r#"CREATE TABLE "{other}"."{DEFAULT_TABLE}_history" (x integer)"#
        ))
        .await
        .unwrap();
    drop(open(&url, &other, false).await.unwrap());
    let message = open_error(open(&url, &other, true).await);
    assert!(
        message.contains("another relation has its name"),
        "{message}"
    );
    let created: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname LIKE '%:%s'",
            &[&other],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(created, 0, "nothing of history was created");

    let long = "t".repeat(55);
    let result = PostgresStore::builder()
        .schema(&other)
        .table(&long)
        .history(true)
        .connect(&url)
        .await;
    let message = open_error(result);
    assert!(message.contains("too long"), "{message}");
}

/// The queries the guide's History chapter gives an analyst, run with their own
/// connection against the view: the rows as of an instant, and what
/// changed between two instants.
#[tokio::test]
async fn an_analyst_queries_the_view() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let store = open(&url, &schema, true).await.unwrap();
    let (d1, d2) = (day(0), day(1));
    put(
        &store,
        vec![rec("order:1", d1, r#"{"status":"open"}"#, at(3_600))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![rec("order:2", d2, r#"{"status":"open"}"#, at(90_000))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![rec("order:1", d1, r#"{"status":"paid"}"#, at(100_000))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![tomb("order:2", d2, at(110_000))],
        WriteOptions::default(),
    )
    .await;

    let admin = admin(&url).await;
    admin
        .batch_execute(&format!(
            "SET search_path = \"{schema}\"; SET TIME ZONE 'UTC'"
        ))
        .await
        .unwrap();
    let as_of = |instant: &'static str| {
        let admin = &admin;
        async move {
            admin
                .query(
                    "SELECT key, value FROM backfill_records_history \
                     WHERE valid_from <= $1::text::timestamptz \
                       AND (valid_to IS NULL OR valid_to > $1::text::timestamptz) AND NOT deleted \
                     ORDER BY key",
                    &[&instant],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                .collect::<Vec<_>>()
        }
    };
    let open = r#"{"status":"open"}"#.to_owned();
    assert_eq!(
        as_of("2026-01-02 02:00:00+00").await,
        [
            ("order:1".to_owned(), open.clone()),
            ("order:2".to_owned(), open)
        ]
    );
    assert_eq!(
        as_of("2026-01-02 12:00:00+00").await,
        [("order:1".to_owned(), r#"{"status":"paid"}"#.to_owned())]
    );
    let changes: Vec<(String, String, bool)> = admin
        .query(
            "SELECT key, to_char(valid_from, 'YYYY-MM-DD HH24:MI:SS'), deleted \
             FROM backfill_records_history \
             WHERE valid_from > $1::text::timestamptz AND valid_from <= $2::text::timestamptz \
             ORDER BY valid_from, key",
            &[&"2026-01-02 00:00:00+00", &"2026-01-03 00:00:00+00"],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        changes,
        [
            (
                "order:2".to_owned(),
                "2026-01-02 01:00:00".to_owned(),
                false
            ),
            (
                "order:1".to_owned(),
                "2026-01-02 03:46:40".to_owned(),
                false
            ),
            ("order:2".to_owned(), "2026-01-02 06:33:20".to_owned(), true),
        ]
    );
}

/// Typed columns in history: each version's as delivered, `NULL` in a
/// tombstone row; a column declared later is added to history too and
/// filled from each version's value (`NULL` where an old version's does
/// not fit), the view remade with it; a column dropped from the table
/// goes from history with it.
#[tokio::test]
async fn history_keeps_the_typed_columns() {
    use backfill_core::columns::Column;
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let open = |columns: &[&str], changes: bool| {
        let columns: Vec<Column> = columns.iter().map(|c| Column::parse(c).unwrap()).collect();
        PostgresStore::builder()
            .schema(&schema)
            .history(true)
            .columns(columns)
            .allow_column_changes(changes)
            .connect(&url)
    };
    let d = day(0);
    let store = open(&["total:integer"], false).await.unwrap();
    put(
        &store,
        vec![rec("o", d, r#"{"total":1}"#, at(10))],
        WriteOptions::default(),
    )
    .await;
    put(
        &store,
        vec![rec("o", d, r#"{"total":2,"status":"paid"}"#, at(20))],
        WriteOptions::default(),
    )
    .await;
    put(&store, vec![tomb("o", d, at(30))], WriteOptions::default()).await;
    let admin = admin(&url).await;
    let view = |columns: &'static str| {
        let (admin, schema) = (&admin, &schema);
        async move {
            admin
                .query(
                    &format!(
                        "SELECT {columns} FROM \"{schema}\".{DEFAULT_TABLE}_history ORDER BY valid_from"
                    ),
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (0..r.len()).map(|i| r.get::<_, Option<String>>(i)).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        }
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        view("total::text").await,
        [vec![some("1")], vec![some("2")], vec![None]]
    );

    drop(
        open(&["total:integer", "status:text?"], false)
            .await
            .unwrap(),
    );
    assert_eq!(
        view("total::text, status").await,
        [
            vec![some("1"), None],
            vec![some("2"), some("paid")],
            vec![None, None]
        ]
    );
    let store = open(&["status:text?"], true).await.unwrap();
    put(
        &store,
        vec![rec("o", d, r#"{"status":"back"}"#, at(40))],
        WriteOptions::default(),
    )
    .await;
    assert_eq!(
        view("status").await,
        [
            vec![None],
            vec![some("paid")],
            vec![None],
            vec![some("back")]
        ]
    );
    let has_total: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = $2 AND column_name = 'total')",
            &[&schema, &format!("{DEFAULT_TABLE}:versions")],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!has_total);
}
