//! Typed columns as SQLite keeps them: each a column of the records table
//! in SQLite's type for it, read from the record's value; tombstones NULL;
//! a record that does not fit refused with nothing of its day written; a
//! re-run writes nothing; the digests are the same as without columns; a
//! column declared later is added and filled from the rows; and a table
//! declared otherwise is refused on open, naming the column.

use backfill_core::columns::{Column, ColumnProblem};
use backfill_core::conformance::fixtures::{at, invalid_column, jan, listing, rec, tomb};
use backfill_core::{upsert, Error, Record, Store, WriteOptions};
use backfill_sqlite::SqliteStore;
use rusqlite::types::Value;

use super::raw;

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
        "select:text?=select",
    ]
    .into_iter()
    .map(|d| Column::parse(d).unwrap())
    .collect()
}

fn order(key: &str, day: u32, total: i64, secs: i64) -> Record {
    let value = format!(
        r#"{{"status": "placed", "total_cents": {total}, "ratio": 0.5, "amount": 12.50,
            "paid": true, "placed": {{"on": "2026-01-0{day}", "at": "2026-01-0{day}T10:00:00.25+02:00"}},
            "customer": {{"id": "c7", "tags": ["a"]}}, "select": "kw"}}"#
    );
    rec(key, jan(day), &value, at(secs))
}

async fn store(path: &std::path::Path) -> SqliteStore {
    SqliteStore::builder(path)
        .columns(declared())
        .open()
        .await
        .unwrap()
}

/// Every row's typed columns, with SQLite's type of each value.
fn typed_rows(path: &std::path::Path) -> Vec<Vec<(String, Value)>> {
    let conn = raw(path);
    let names = [
        "status",
        "total_cents",
        "ratio",
        "amount",
        "paid",
        "placed_on",
        "placed_at",
        "customer",
        "select",
    ];
    let select: Vec<String> = names
        .iter()
        .map(|n| format!("typeof(\"{n}\"), \"{n}\""))
        .collect();
    let sql = format!(
        "SELECT {} FROM backfill_records ORDER BY key",
        select.join(", ")
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    stmt.query_map([], |row| {
        (0..names.len())
            .map(|i| {
                Ok((
                    row.get::<_, String>(2 * i)?,
                    row.get::<_, Value>(2 * i + 1)?,
                ))
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn text(s: &str) -> (String, Value) {
    ("text".into(), Value::Text(s.into()))
}

#[tokio::test]
async fn the_columns_hold_the_values_fields_in_sqlites_types_and_tombstones_hold_null() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let s = store(&path).await;
    let records = vec![
        order("a", 1, 1250, 1),
        rec(
            "b",
            jan(1),
            r#"{"status": "open", "total_cents": -3, "paid": false}"#,
            at(1),
        ),
        tomb("c", jan(1), at(1)),
    ];
    let c = upsert(&s, jan(1), records, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.inserted, c.deleted), (2, 1));
    let null = || ("null".to_owned(), Value::Null);
    assert_eq!(
        typed_rows(&path),
        vec![
            vec![
                text("placed"),
                ("integer".into(), Value::Integer(1250)),
                ("real".into(), Value::Real(0.5)),
                text("12.50"),
                ("integer".into(), Value::Integer(1)),
                text("2026-01-01"),
                text("2026-01-01T08:00:00.250000Z"),
                text(r#"{"id": "c7", "tags": ["a"]}"#),
                text("kw"),
            ],
            vec![
                text("open"),
                ("integer".into(), Value::Integer(-3)),
                null(),
                null(),
                ("integer".into(), Value::Integer(0)),
                null(),
                null(),
                null(),
                null(),
            ],
            vec![null(); 9],
        ]
    );
    // Plain SQL, no view, no casts.
    let total: i64 = raw(&path)
        .query_row(
            "SELECT sum(total_cents) FROM backfill_records WHERE paid = 1 AND status = 'placed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(total, 1250);
}

#[tokio::test]
async fn a_record_that_does_not_fit_is_refused_and_nothing_of_its_day_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let s = store(&path).await;
    upsert(
        &s,
        jan(1),
        vec![order("a", 1, 1, 1)],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let bad = vec![
        order("b", 2, 2, 1),
        rec(
            "c",
            jan(2),
            r#"{"status": "placed", "total_cents": "12 EUR", "paid": true}"#,
            at(1),
        ),
    ];
    let e = invalid_column(
        upsert(&s, jan(2), bad, WriteOptions::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (
            e.key.as_str(),
            e.column.as_str(),
            e.path.as_str(),
            e.problem,
            e.text.as_str()
        ),
        (
            "c",
            "total_cents",
            "total_cents",
            ColumnProblem::WrongType(backfill_core::columns::ColumnType::Integer),
            "\"12 EUR\""
        )
    );
    for bad in [
        "not json",
        r#"{"total_cents": 1, "paid": true}"#,
        r#"{"status": "x", "total_cents": 9223372036854775808, "paid": true}"#,
        r#"{"status": "x", "total_cents": 1, "paid": true, "placed": {"at": "2026-01-02T10:00:00"}}"#,
    ] {
        let err = upsert(
            &s,
            jan(2),
            vec![rec("d", jan(2), bad, at(1))],
            WriteOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::InvalidColumn(_)), "{bad}: {err:?}");
    }
    // Day 2 holds nothing; day 1 is as it was.
    assert!(s.day_rows(jan(2)).await.unwrap().is_empty());
    assert_eq!(s.rows().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_rerun_writes_nothing_and_the_digests_are_those_without_columns() {
    let dir = tempfile::tempdir().unwrap();
    let (typed_path, plain_path) = (
        dir.path().join("typed.sqlite"),
        dir.path().join("plain.sqlite"),
    );
    let typed = store(&typed_path).await;
    let plain = SqliteStore::open(&plain_path).await.unwrap();
    let records: Vec<Record> = (0..50)
        .map(|i| order(&format!("k{i:02}"), 3, i, 5))
        .collect();
    for s in [&typed, &plain] {
        upsert(s, jan(3), records.clone(), WriteOptions::default())
            .await
            .unwrap();
    }
    let before = typed.total_changes().await.unwrap();
    let again = upsert(&typed, jan(3), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((again.unchanged, again.written()), (50, 0));
    // The ledger row and its timing are the rows an apply always writes.
    assert_eq!(typed.total_changes().await.unwrap() - before, 2);
    let digest = |path: &std::path::Path| -> String {
        raw(path)
            .query_row(
                "SELECT digest FROM backfill_days WHERE day = '2026-01-03'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(digest(&typed_path), digest(&plain_path));
    assert_eq!(typed.rows().await.unwrap(), plain.rows().await.unwrap());
}

#[tokio::test]
async fn a_listing_and_the_watermark_leave_null_columns_and_pages_match_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let s = SqliteStore::builder(&path)
        .columns(declared())
        .page_rows(2)
        .open()
        .await
        .unwrap();
    let records: Vec<Record> = (0..5).map(|i| order(&format!("k{i}"), 4, i, 5)).collect();
    upsert(&s, jan(4), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    // A listing without k0..k1: their rows become tombstones, columns NULL.
    let c = upsert(&s, jan(4), records[2..].to_vec(), listing(at(10)))
        .await
        .unwrap();
    assert_eq!(c.unlisted, 2);
    // Under the watermark, a live record is written as its own tombstone.
    let late = upsert(
        &s,
        jan(4),
        vec![order("k9", 4, 9, 7)],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(late.deleted, 1);
    let rows = typed_rows(&path);
    let totals: Vec<&Value> = rows.iter().map(|r| &r[1].1).collect();
    assert_eq!(
        totals,
        [
            &Value::Null,
            &Value::Null,
            &Value::Integer(2),
            &Value::Integer(3),
            &Value::Integer(4),
            &Value::Null
        ]
    );
}

#[tokio::test]
async fn the_table_refuses_a_value_of_another_form_and_keeps_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let s = SqliteStore::builder(&path)
        .column(Column::parse("status:text").unwrap().indexed(true))
        .column(Column::parse("paid:boolean?").unwrap())
        .open()
        .await
        .unwrap();
    drop(s);
    let conn = raw(&path);
    let refused = conn.execute(
        "INSERT INTO backfill_records (key, event_date, value, updated_at, deleted, status, paid)
         VALUES ('x', '2026-01-01', '{}', '2026-01-01T00:00:00.000000Z', 0, 's', 2)",
        [],
    );
    assert!(refused.is_err(), "a boolean column stored 2");
    let indexed: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_index_list('backfill_records') WHERE name = 'backfill_records:status')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(indexed);
}

/// A column declared later is added to the table that has rows and filled
/// from them, in one transaction; a stored row that does not fit fails
/// the upgrade naming its key, and nothing is added.
#[tokio::test]
async fn a_column_declared_later_is_added_and_filled_from_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let first = vec![Column::parse("status:text").unwrap()];
    let s = SqliteStore::builder(&path)
        .columns(first.clone())
        .open()
        .await
        .unwrap();
    let records = vec![
        order("a", 1, 100, 1),
        order("b", 1, 200, 1),
        tomb("c", jan(1), at(1)),
    ];
    upsert(&s, jan(1), records, WriteOptions::default())
        .await
        .unwrap();
    drop(s);
    // A read-only store adds nothing.
    let err = SqliteStore::builder(&path)
        .columns(declared())
        .read_only(true)
        .open()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lacks the typed column"), "{err}");
    // A column a stored row does not fit: refused, naming the row.
    let mut bad = first.clone();
    bad.push(Column::parse("status_n:integer=status").unwrap());
    let err = SqliteStore::builder(&path)
        .columns(bad)
        .open()
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"invalid record "a": column status_n"#),
        "{err}"
    );
    // The table is as it was: the first declaration still opens it.
    drop(
        SqliteStore::builder(&path)
            .columns(first)
            .open()
            .await
            .unwrap(),
    );
    // Every declared column now: added, filled, the tombstone's NULL.
    let s = store(&path).await;
    let rows = typed_rows(&path);
    assert_eq!(rows[0][1], ("integer".into(), Value::Integer(100)));
    assert_eq!(rows[1][6], text("2026-01-01T08:00:00.250000Z"));
    assert_eq!(rows[2][1].1, Value::Null);
    // Nothing about the records changed, and a re-run writes nothing.
    let again = upsert(
        &s,
        jan(1),
        vec![order("a", 1, 100, 1)],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(again.unchanged, 1);
}

#[tokio::test]
async fn a_table_declared_otherwise_is_refused_on_open_naming_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    drop(store(&path).await);
    let open_with = |columns: Vec<Column>| {
        let path = path.clone();
        async move { SqliteStore::builder(&path).columns(columns).open().await }
    };
    // Without the declaration: the table's columns are not the store's.
    let err = open_with(Vec::new()).await.unwrap_err();
    assert!(err.to_string().contains("status"), "{err}");
    // A column of another type.
    let mut other = declared();
    other[1] = Column::parse("total_cents:double").unwrap();
    let err = open_with(other).await.unwrap_err();
    assert!(err.to_string().contains("total_cents"), "{err}");
    // The same declaration opens.
    assert!(open_with(declared()).await.is_ok());
}

#[tokio::test]
async fn a_hundred_columns_and_keyword_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let columns: Vec<Column> = (0..100)
        .map(|i| Column::parse(&format!("c{i}:integer=f{i}")).unwrap())
        .chain(["order:text", "from:text", "check:text"].map(|d| Column::parse(d).unwrap()))
        .collect();
    let s = SqliteStore::builder(&path)
        .columns(columns)
        .open()
        .await
        .unwrap();
    let fields: Vec<String> = (0..100).map(|i| format!("\"f{i}\": {i}")).collect();
    let value = format!(
        r#"{{{}, "order": "o", "from": "f", "check": "c"}}"#,
        fields.join(", ")
    );
    upsert(
        &s,
        jan(1),
        vec![rec("k", jan(1), &value, at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let (c99, check): (i64, String) = raw(&path)
        .query_row(r#"SELECT c99, "check" FROM backfill_records"#, [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((c99, check.as_str()), (99, "c"));
}

/// The `CHECK` typed instant columns had when they came, for a column
/// named `at`.
const EARLIER_INSTANT_CHECK: &str = r#""at" IS NULL OR (length("at") = 27 AND substr("at", 1, 4) BETWEEN '0001' AND '9999' AND strftime('%Y-%m-%dT%H:%M:%S', substr("at", 1, 19), '+0 days') IS substr("at", 1, 19) AND substr("at", 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')"#;

/// An instant column's `CHECK` takes exactly the instants its earlier
/// form took, and a table made with that form keeps opening and writing.
#[tokio::test]
async fn an_instant_columns_check_takes_what_its_earlier_form_took() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let declared = || vec![Column::parse("at:timestamptz?").unwrap()];
    let open = || SqliteStore::builder(&path).columns(declared()).open();
    drop(open().await.unwrap());
    let conn = raw(&path);
    let insert = |i: usize, instant: &str| {
        conn.execute(
            "INSERT INTO backfill_records (key, event_date, value, updated_at, deleted, at)
             VALUES (?1, '2026-01-01', '{}', '2026-01-01T00:00:00.000000Z', 0, ?2)",
            rusqlite::params![format!("k{i}"), instant],
        )
        .is_ok()
    };
    let cases = [
        ("2024-02-29T00:00:00.000000Z", true),
        ("2000-02-29T23:59:59.999999Z", true),
        ("0001-01-01T00:00:00.000000Z", true),
        ("9999-12-31T23:59:59.999999Z", true),
        ("2026-06-30T12:30:00.000001Z", true),
        ("2026-02-29T00:00:00.000000Z", false),
        ("1900-02-29T00:00:00.000000Z", false),
        ("2026-04-31T00:00:00.000000Z", false),
        ("2026-13-01T00:00:00.000000Z", false),
        ("2026-00-01T00:00:00.000000Z", false),
        ("2026-01-00T00:00:00.000000Z", false),
        ("2026-01-32T00:00:00.000000Z", false),
        ("2026-01-01T24:00:00.000000Z", false),
        ("2026-01-01T23:60:00.000000Z", false),
        ("2026-01-01T23:59:60.000000Z", false),
        ("0000-01-01T00:00:00.000000Z", false),
        ("2026-01-01 00:00:00.000000Z", false),
        ("2026-01-01T00:00:00.000000", false),
        ("2026-01-01T00:00:00.000000+00", false),
        ("2026-01-01T00:00:00.00000Z", false),
        ("2026-01-01T00:00:00.0000000Z", false),
        ("2026-01-01T00:00:00Z", false),
        ("+026-01-01T00:00:00.000000Z", false),
        ("2026-1-01T00:00:00.0000000Z", false),
        ("２026-01-01T00:00:00.000000Z", false),
        ("", false),
    ];
    for (i, (instant, valid)) in cases.into_iter().enumerate() {
        assert_eq!(insert(i, instant), valid, "{instant:?}");
        let earlier: bool = conn
            .query_row(
                &format!("SELECT {}", EARLIER_INSTANT_CHECK.replace(r#""at""#, "?1")),
                [instant],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(earlier, valid, "the earlier form on {instant:?}");
    }
    // A table made with the earlier form: the same table, its CHECK then.
    let ddl: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'backfill_records'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let start = ddl
        .find(r#"CHECK ("at" IS NULL"#)
        .expect("the column's CHECK");
    // Up to the parenthesis that closes the CHECK's.
    let mut depth = 0;
    let end = start
        + ddl[start..]
            .char_indices()
            .find_map(|(i, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                (c == ')' && depth == 0).then_some(i + 1)
            })
            .expect("the CHECK closes");
    let earlier_ddl = format!(
        "{}CHECK ({EARLIER_INSTANT_CHECK}){}",
        &ddl[..start],
        &ddl[end..]
    );
    assert_ne!(earlier_ddl, ddl);
    conn.execute_batch(&format!("DROP TABLE backfill_records; {earlier_ddl};"))
        .unwrap();
    drop(conn);
    let store = open().await.expect("a table with the earlier CHECK opens");
    let value = r#"{"at": "2026-01-05T10:00:00.25+02:00"}"#;
    let c = upsert(
        &store,
        jan(5),
        vec![rec("a", jan(5), value, at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(c.inserted, 1);
    let stored: String = raw(&path)
        .query_row("SELECT at FROM backfill_records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, "2026-01-05T08:00:00.250000Z");
}
