//! Typed columns as Postgres keeps them: each a column of the records
//! table in Postgres' type for it, read from the record's value by the
//! write path and sent with the row, by `COPY` and by the merge alike;
//! tombstones NULL; a record that does not fit refused with nothing of its
//! day written; a re-run writes nothing; the digests are those without
//! columns; a column declared later is added and filled from the rows; a
//! table declared otherwise is refused on open, naming the column.

use backfill_core::columns::{Column, ColumnProblem};
use backfill_core::conformance::fixtures::{at, invalid_column, jan, listing, rec, tomb};
use backfill_core::{upsert, Record, Store, WriteOptions};
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::{DateTime, NaiveDate, Utc};

fn declared() -> Vec<Column> {
    [
        "status:text",
        "total_cents:integer",
        "ratio:double?",
        "amount:numeric?",
        "paid:boolean",
        "placed_on:date?=placed.on",
        "placed_at:timestamptz?=placed.at",
        "customer:json?",
        // Named like columns of the merge statement's own, and a keyword.
        "action:text?",
        "seen:text?",
        "select:text?",
    ]
    .into_iter()
    .map(|d| Column::parse(d).unwrap())
    .collect()
}

fn order(key: &str, day: u32, total: i64, secs: i64) -> Record {
    let value = format!(
        r#"{{"status": "placed", "total_cents": {total}, "ratio": 0.5, "amount": 12.50,
            "paid": true, "placed": {{"on": "2026-01-0{day}", "at": "2026-01-0{day}T10:00:00.25+02:00"}},
            "customer": {{"id": "c7", "tags": ["a"]}}, "action": "buy", "seen": "yes", "select": "kw"}}"#
    );
    rec(key, jan(day), &value, at(secs))
}

async fn store(url: &str, schema: &str, page_rows: usize) -> PostgresStore {
    PostgresStore::builder()
        .schema(schema)
        .page_rows(page_rows)
        .columns(declared())
        .connect(url)
        .await
        .unwrap()
}

type Row = (
    String,
    Option<String>,
    Option<i64>,
    Option<f64>,
    Option<String>,
    Option<bool>,
    Option<NaiveDate>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

async fn typed_rows(store: &PostgresStore) -> Vec<Row> {
    let client = store.pool().get().await.unwrap();
    let sql = format!(
        r#"SELECT key, status, total_cents, ratio, amount::text, paid, placed_on, placed_at,
                  customer::text, action, seen, "select"
           FROM "{}"."{}" ORDER BY key"#,
        store.schema(),
        store.table()
    );
    client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
                r.get(8),
                r.get(9),
                r.get(10),
                r.get(11),
            )
        })
        .collect()
}

fn placed(key: &str, total: i64, day: u32) -> Row {
    (
        key.into(),
        Some("placed".into()),
        Some(total),
        Some(0.5),
        Some("12.50".into()),
        Some(true),
        Some(jan(day)),
        Some(format!("2026-01-0{day}T08:00:00.25Z").parse().unwrap()),
        Some(r#"{"id": "c7", "tags": ["a"]}"#.into()),
        Some("buy".into()),
        Some("yes".into()),
        Some("kw".into()),
    )
}

fn nulls(key: &str) -> Row {
    (
        key.into(),
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    )
}

/// A day whose one `COPY` is sent in many messages (3 000 orders, about
/// 1 MB): every row arrives whole, its typed columns and its value as
/// sent, and the same day again is found unchanged row for row.
#[tokio::test]
async fn a_copy_of_many_messages_keeps_every_row() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url, &testkit::unique_schema(), 10_000).await;
    let day: Vec<Record> = (0..3_000)
        .map(|i| order(&format!("order-{i:05}"), 1, i, 1))
        .collect();
    let c = upsert(&s, jan(1), day.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 3_000);
    let expected: Vec<Row> = (0..3_000)
        .map(|i| placed(&format!("order-{i:05}"), i, 1))
        .collect();
    assert_eq!(typed_rows(&s).await, expected);
    let client = s.pool().get().await.unwrap();
    let stored: Vec<(String, String)> = client
        .query(
            &format!(
                r#"SELECT key, value FROM "{}".backfill_records ORDER BY key"#,
                s.schema()
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let sent: Vec<(String, String)> = day
        .iter()
        .map(|r| (r.key().to_owned(), r.value().to_owned()))
        .collect();
    assert_eq!(stored, sent);
    let c = upsert(&s, jan(1), day, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.unchanged, c.written()), (3_000, 0));
}

/// The first sync goes in by `COPY`, the second (a changed record, a new
/// one, a tombstone) by the merge, in slices of two: both send the columns.
#[tokio::test]
async fn copy_and_merge_keep_the_values_fields_in_postgres_types() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url, &testkit::unique_schema(), 2).await;
    let first = vec![
        order("a", 1, 100, 1),
        order("b", 1, 200, 1),
        order("c", 1, 300, 1),
    ];
    let c = upsert(&s, jan(1), first, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 3);
    assert_eq!(
        typed_rows(&s).await,
        vec![
            placed("a", 100, 1),
            placed("b", 200, 1),
            placed("c", 300, 1)
        ]
    );
    let again = vec![
        order("a", 1, 100, 1),
        order("b", 1, 250, 2),
        tomb("c", jan(1), at(2)),
        rec(
            "d",
            jan(1),
            r#"{"status": "open", "total_cents": -3, "paid": false}"#,
            at(2),
        ),
    ];
    let c = upsert(&s, jan(1), again, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (c.unchanged, c.updated, c.deleted, c.inserted),
        (1, 1, 1, 1)
    );
    let mut open = nulls("d");
    (open.1, open.2, open.5) = (Some("open".into()), Some(-3), Some(false));
    assert_eq!(
        typed_rows(&s).await,
        vec![placed("a", 100, 1), placed("b", 250, 1), nulls("c"), open]
    );
    // Plain SQL, no view, no casts.
    let client = s.pool().get().await.unwrap();
    let total: i64 = client
        .query_one(
            &format!(
                r#"SELECT sum(total_cents)::bigint FROM "{}".backfill_records WHERE paid AND status = 'placed'"#,
                s.schema()
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, 350);
}

#[tokio::test]
async fn a_record_that_does_not_fit_is_refused_and_nothing_of_its_day_is_written() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url, &testkit::unique_schema(), 1000).await;
    upsert(
        &s,
        jan(1),
        vec![order("a", 1, 1, 1)],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    for (day, batch) in [
        // A new day (the COPY path), and a synced one (the merge).
        (
            2,
            vec![
                order("b", 2, 2, 1),
                rec(
                    "c",
                    jan(2),
                    r#"{"status": "x", "total_cents": "12 EUR", "paid": true}"#,
                    at(1),
                ),
            ],
        ),
        (
            1,
            vec![
                order("a", 1, 5, 9),
                rec(
                    "e",
                    jan(1),
                    r#"{"status": "x", "total_cents": 1.5, "paid": true}"#,
                    at(1),
                ),
            ],
        ),
    ] {
        let e = invalid_column(
            upsert(&s, jan(day), batch, WriteOptions::default())
                .await
                .unwrap_err(),
        );
        assert_eq!(
            (e.column.as_str(), e.problem),
            (
                "total_cents",
                ColumnProblem::WrongType(backfill_core::columns::ColumnType::Integer)
            )
        );
    }
    assert!(s.day_rows(jan(2)).await.unwrap().is_empty());
    assert_eq!(typed_rows(&s).await, vec![placed("a", 1, 1)]);
}

/// A record that does not fit, deep in a new day's `COPY`: the rows before
/// it have reached the server when it is read, so the `COPY` is abandoned
/// midway. Nothing of the day is kept, and the one connection it used
/// writes the corrected day next, every record inserted once.
#[tokio::test]
async fn a_refusal_midway_through_a_copy_leaves_nothing_and_the_connection_serves_the_next_day() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .columns(declared())
        .pool_size(1)
        .connect(&url)
        .await
        .unwrap();
    let good: Vec<Record> = (0..2000)
        .map(|i| order(&format!("m{i:04}"), 5, i, 5))
        .collect();
    let mut bad = good.clone();
    bad[1500] = rec(
        "m1500",
        jan(5),
        r#"{"status": "x", "total_cents": true, "paid": true}"#,
        at(5),
    );
    let e = invalid_column(
        upsert(&s, jan(5), bad, WriteOptions::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.key.as_str(), e.column.as_str()),
        ("m1500", "total_cents")
    );
    assert!(s.rows_with_tombstones().await.unwrap().is_empty());
    let counts = upsert(&s, jan(5), good, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((counts.inserted, counts.written()), (2000, 2000));
    let rows = typed_rows(&s).await;
    assert_eq!(rows.len(), 2000);
    assert_eq!(rows[1500], placed("m1500", 1500, 5));
}

#[tokio::test]
async fn a_rerun_writes_nothing_and_the_digests_are_those_without_columns() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let typed = store(&url, &schema, 1000).await;
    let plain = PostgresStore::builder()
        .schema(&schema)
        .table("plain")
        .connect(&url)
        .await
        .unwrap();
    let records: Vec<Record> = (0..50)
        .map(|i| order(&format!("k{i:02}"), 3, i, 5))
        .collect();
    for s in [&typed as &dyn Store, &plain] {
        upsert(s, jan(3), records.clone(), WriteOptions::default())
            .await
            .unwrap();
    }
    let again = upsert(&typed, jan(3), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((again.unchanged, again.written()), (50, 0));
    let client = typed.pool().get().await.unwrap();
    let digests: Vec<String> = client
        .query(
            &format!(r#"SELECT digest FROM "{schema}".backfill_days WHERE day = $1 ORDER BY records_table"#),
            &[&jan(3)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(digests.len(), 2);
    assert_eq!(digests[0], digests[1]);
    assert_eq!(typed.rows().await.unwrap(), plain.rows().await.unwrap());
}

#[tokio::test]
async fn a_listing_and_the_watermark_leave_null_columns() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url, &testkit::unique_schema(), 2).await;
    let records: Vec<Record> = (0..5).map(|i| order(&format!("k{i}"), 4, i, 5)).collect();
    upsert(&s, jan(4), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    let c = upsert(&s, jan(4), records[2..].to_vec(), listing(at(10)))
        .await
        .unwrap();
    assert_eq!(c.unlisted, 2);
    let late = upsert(
        &s,
        jan(4),
        vec![order("k9", 4, 9, 7)],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(late.deleted, 1);
    let totals: Vec<Option<i64>> = typed_rows(&s).await.iter().map(|r| r.2).collect();
    assert_eq!(totals, [None, None, Some(2), Some(3), Some(4), None]);
}

#[tokio::test]
async fn a_table_declared_otherwise_is_refused_on_open_naming_the_column() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    drop(store(&url, &schema, 1000).await);
    let open_with = |columns: Vec<Column>| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            PostgresStore::builder()
                .schema(schema)
                .columns(columns)
                .connect(&url)
                .await
        }
    };
    let err = open_with(Vec::new()).await.unwrap_err();
    assert!(format!("{err:#}").contains("status"), "{err:#}");
    let mut other = declared();
    other[1] = Column::parse("total_cents:double").unwrap();
    let err = open_with(other).await.unwrap_err();
    assert!(format!("{err:#}").contains("total_cents"), "{err:#}");
    assert!(open_with(declared()).await.is_ok());
}

#[tokio::test]
async fn a_hundred_columns_and_an_indexed_one() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let columns: Vec<Column> = (0..100)
        .map(|i| Column::parse(&format!("c{i}:integer=f{i}")).unwrap())
        .chain([Column::parse("status:text").unwrap().indexed(true)])
        .collect();
    let s = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .columns(columns)
        .connect(&url)
        .await
        .unwrap();
    let fields: Vec<String> = (0..100).map(|i| format!("\"f{i}\": {i}")).collect();
    let value = format!(r#"{{{}, "status": "s"}}"#, fields.join(", "));
    for day in [1, 1] {
        upsert(
            &s,
            jan(day),
            vec![rec("k", jan(day), &value, at(1))],
            WriteOptions::default(),
        )
        .await
        .unwrap();
    }
    let client = s.pool().get().await.unwrap();
    let row = client
        .query_one(
            &format!(
                r#"SELECT c99, (SELECT count(*) FROM pg_indexes WHERE schemaname = '{0}'
                    AND indexname = 'backfill_records:status')
                   FROM "{0}".backfill_records"#,
                s.schema()
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (99, 1));
}

/// A column declared later is added to the table that has rows and filled
/// from them, in the open's transaction; a stored row that does not fit
/// fails the open naming its key, and nothing is added; a store that may
/// not create says what to do.
#[tokio::test]
async fn a_column_declared_later_is_added_and_filled_from_the_rows() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let first = vec![Column::parse("status:text").unwrap()];
    let open = |columns: Vec<Column>, create: bool| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            PostgresStore::builder()
                .schema(schema)
                .page_rows(2)
                .create_if_missing(create)
                .columns(columns)
                .connect(&url)
                .await
        }
    };
    let s = open(first.clone(), true).await.unwrap();
    let records: Vec<Record> = (0..5)
        .map(|i| order(&format!("k{i}"), 1, i, 1))
        .chain([tomb("t", jan(1), at(1))])
        .collect();
    upsert(&s, jan(1), records, WriteOptions::default())
        .await
        .unwrap();
    drop(s);
    let err = open(declared(), false).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("lacks the typed column"),
        "{err:#}"
    );
    let mut bad = first.clone();
    bad.push(Column::parse("status_n:integer=status").unwrap());
    let err = open(bad, true).await.unwrap_err();
    assert!(
        format!("{err:#}").contains(r#"invalid record "k0": column status_n"#),
        "{err:#}"
    );
    drop(open(first, true).await.unwrap());
    let s = open(declared(), true).await.unwrap();
    let rows = typed_rows(&s).await;
    assert_eq!(rows[0], placed("k0", 0, 1));
    assert_eq!(rows[4], placed("k4", 4, 1));
    assert_eq!(rows[5], nulls("t"));
    let again = upsert(
        &s,
        jan(1),
        vec![order("k1", 1, 1, 1)],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(again.unchanged, 1);
}

/// Indexed columns of a table whose name is long: each index gets a name
/// the server keeps (no two cut to the same 63 bytes), an index found
/// missing on open is made again, and a relation already holding an
/// index's name is refused on open, naming it.
#[tokio::test]
async fn indexes_of_a_long_table_name_each_exist() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let schema = testkit::unique_schema();
    let table = format!("orders_{}", "x".repeat(50));
    let columns = || {
        vec![
            Column::parse("customer_identifier:text?")
                .unwrap()
                .indexed(true),
            Column::parse("customer_information:text?")
                .unwrap()
                .indexed(true),
        ]
    };
    let open = || {
        PostgresStore::builder()
            .schema(&schema)
            .table(&table)
            .columns(columns())
            .connect(&url)
    };
    let store = open().await.unwrap();
    let admin = super::admin(&url).await;
    let count = |column: &'static str| {
        let (admin, schema, table) = (&admin, &schema, &table);
        async move {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_index i
                     JOIN pg_class t ON t.oid = i.indrelid
                     JOIN pg_namespace n ON n.oid = t.relnamespace
                     JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
                     WHERE n.nspname = $1 AND t.relname = $2 AND a.attname = $3",
                    &[schema, table, &column],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(count("customer_identifier").await, 1);
    assert_eq!(count("customer_information").await, 1);
    drop(store);

    // An index dropped behind the store's back is made again on open.
    let names: Vec<String> = admin
        .query(
            "SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE '%~%'",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    admin
        .batch_execute(&format!(r#"DROP INDEX "{schema}"."{}""#, names[0]))
        .await
        .unwrap();
    drop(open().await.unwrap());
    assert_eq!(count("customer_identifier").await, 1);
    assert_eq!(count("customer_information").await, 1);

    // A relation of the index's name: the open is refused, naming it.
    let victim = names[0].clone();
    admin
        .batch_execute(&format!(
            r#"DROP INDEX "{schema}"."{victim}"; CREATE TABLE "{schema}"."{victim}" (x int)"#
        ))
        .await
        .unwrap();
    let err = open().await.unwrap_err().to_string();
    assert!(
        err.contains(&victim) && err.contains("already exists"),
        "{err}"
    );
}
