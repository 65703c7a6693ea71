//! The typed-column cases: what every store that keeps
//! [typed columns](crate::columns) must do with them, driven through a
//! [`TypedStore`] that opens the store's table with a declaration and
//! reads the columns back.
//!
//! Run them with [`column_conformance_tests!`](crate::column_conformance_tests);
//! a store that keeps no typed columns (as [`MemoryStore`]) lists the
//! cases as skipped, saying why.
//!
//! Each case checks the columns against [`Columns::extract`] of the rows
//! the store holds, and the rows, counts and digests against
//! [`MemoryStore`], which has no columns: a declaration changes nothing
//! about the records.

use async_trait::async_trait;
use futures_util::stream;

use super::fixtures::invalid_column;
use super::helpers::{at, day, rec, tomb};
use crate::columns::{Column, ColumnProblem, ColumnValue, Columns};
use crate::{upsert, upsert_stream, Error, MemoryStore, Record, Result, Store, WriteOptions};

/// A store's table, opened with a declaration of typed columns, and read
/// back: what the typed-column cases need of a store.
#[async_trait]
pub trait TypedStore: Send + Sync {
    /// The store.
    type Store: Store;

    /// The store on this harness' own table (created by the first call),
    /// with `columns` declared: adding the columns it lacks, refusing a
    /// declaration that differs from the table's, as the store's builder
    /// does.
    async fn open(&self, columns: &Columns) -> Result<Self::Store>;

    /// As [`open`](TypedStore::open), allowing column changes (the
    /// builders' `allow_column_changes(true)`): typed columns the
    /// declaration lacks are dropped, those it declares with another type
    /// remade and filled from the rows.
    async fn open_changing(&self, columns: &Columns) -> Result<Self::Store>;

    /// Every row of the table, tombstones included, in key order: its key
    /// and its value in each of `columns` (the table's, in that order), as
    /// the store keeps it.
    async fn typed_rows(&self, columns: &Columns) -> Vec<(String, Vec<ColumnValue>)>;
}

/// Every type, nullable and required, nested, a keyword name and a path
/// through field names holding a dot and a quote.
fn every_type() -> Columns {
    declared(&[
        "status:text",
        "total_cents:integer",
        "ratio:double?",
        "amount:numeric?",
        "paid:boolean?",
        "placed_on:date?=placed.on",
        "placed_at:timestamptz?=placed.at",
        "meta:json?",
        r#"odd:text?=["a.b", "c\"d"]"#,
        "select:text?",
    ])
}

fn declared(declarations: &[&str]) -> Columns {
    Columns::new(
        declarations
            .iter()
            .map(|d| Column::parse(d).unwrap_or_else(|e| panic!("declaration {d:?}: {e}"))),
    )
    .expect("a valid declaration")
}

/// An order with every field of [`every_type`].
fn order(key: &str, d: i64, total: i64, secs: i64) -> Record {
    let value = format!(
        r#"{{"status": "placed", "total_cents": {total}, "ratio": 0.25, "amount": 12.50,
            "paid": true, "placed": {{"on": "2026-03-0{}", "at": "2026-03-01T10:00:00.25+02:00"}},
            "meta": {{"tags": ["a", "é"], "n": 1}}, "a.b": {{"c\"d": "deep"}},
            "select": "kw", "ignored": [1, {{"x": null}}]}}"#,
        1 + total.rem_euclid(9)
    );
    rec(key, day(d), &value, at(secs))
}

/// An order with the required fields only.
fn sparse(key: &str, d: i64, total: i64, secs: i64) -> Record {
    let value = format!(r#"{{"total_cents": {total}, "status": "new", "paid": null}}"#);
    rec(key, day(d), &value, at(secs))
}

/// `n` records of day `d` as of instant 10, keyed `{prefix}000`…: in
/// turn a full order, a sparse one and a tombstone.
fn mixed(prefix: &str, d: i64, n: i64) -> Vec<Record> {
    (0..n)
        .map(|i| {
            let key = format!("{prefix}{i:03}");
            match i % 3 {
                0 => order(&key, d, i, 10),
                1 => sparse(&key, d, -i, 10),
                _ => tomb(&key, day(d), at(10)),
            }
        })
        .collect()
}

/// JSON compared by meaning (a store may keep it normalized, as `jsonb`).
fn normalized(values: Vec<ColumnValue>) -> Vec<ColumnValue> {
    values
        .into_iter()
        .map(|v| match v {
            ColumnValue::Json(text) => {
                let parsed: serde_json::Value =
                    serde_json::from_str(&text).expect("a JSON column holds JSON");
                ColumnValue::Json(parsed.to_string())
            }
            other => other,
        })
        .collect()
}

/// The table's columns equal the fields of every row it holds, read by
/// [`Columns::extract`] (tombstones: NULL); returns how many rows.
async fn assert_columns_match<H: TypedStore>(h: &H, store: &H::Store, columns: &Columns) -> usize {
    let rows = store
        .rows_with_tombstones()
        .await
        .expect("reading rows with tombstones");
    let expected: Vec<(String, Vec<ColumnValue>)> = rows
        .iter()
        .map(|r| {
            let values = columns
                .extract(r)
                .unwrap_or_else(|e| panic!("a stored row does not fit: {e}"));
            (r.key().to_owned(), normalized(values))
        })
        .collect();
    let got: Vec<(String, Vec<ColumnValue>)> = h
        .typed_rows(columns)
        .await
        .into_iter()
        .map(|(k, v)| (k, normalized(v)))
        .collect();
    assert_eq!(got.len(), expected.len(), "the table's rows");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g, e, "typed columns of key {:?}", e.0);
    }
    expected.len()
}

/// The error opening with `columns`, which must be refused.
async fn refused<H: TypedStore>(h: &H, columns: &Columns, why: &str) -> Error {
    match h.open(columns).await {
        Ok(_) => panic!("{why}: opened"),
        Err(e) => e,
    }
}

async fn open<H: TypedStore>(h: &H, columns: &Columns) -> H::Store {
    h.open(columns)
        .await
        .unwrap_or_else(|e| panic!("opening the store with its columns: {e}"))
}

/// Each column holds its field of every record as the store's type keeps
/// it — inserted, updated, kept when stale, NULL for a tombstone and for
/// a nullable field that is missing or `null` — whether a day is new
/// (written in bulk) or merged into stored rows.
pub async fn columns_hold_each_records_fields<H: TypedStore>(h: &H) {
    let columns = every_type();
    let store = open(h, &columns).await;
    let first: Vec<Record> = mixed("c/", 1, 200);
    upsert(&store, day(1), first, WriteOptions::default())
        .await
        .expect("the first day");
    assert_eq!(assert_columns_match(h, &store, &columns).await, 200);
    // Merged into stored rows: newer versions change their columns, a
    // tombstone clears them, a stale one changes nothing.
    let second: Vec<Record> = (0..200)
        .map(|i| match i % 4 {
            0 => sparse(&format!("c/{i:03}"), 1, i * 10, 20),
            1 => order(&format!("c/{i:03}"), 1, i * 10, 20),
            2 => tomb(&format!("c/{i:03}"), day(1), at(20)),
            _ => order(&format!("c/{i:03}"), 1, 999, 5),
        })
        .collect();
    let counts = upsert(&store, day(1), second, WriteOptions::default())
        .await
        .expect("the merge");
    assert_eq!(counts.stale, 50, "{counts:?}");
    assert_eq!(assert_columns_match(h, &store, &columns).await, 200);
}

/// A record that does not fit a column — not JSON, a required field
/// missing, a field of another type, a number out of range — refuses its
/// day with [`Error::InvalidColumn`] naming the key, the column, the path
/// and the text, and nothing of that day is written; another day is
/// written as usual.
pub async fn a_record_that_does_not_fit_writes_nothing_of_its_day<H: TypedStore>(h: &H) {
    let columns = every_type();
    let store = open(h, &columns).await;
    let good: Vec<Record> = (0..5)
        .map(|i| order(&format!("bad/{i}"), 2, i, 10))
        .collect();
    upsert(&store, day(2), good, WriteOptions::default())
        .await
        .expect("the good day");
    let before = store.rows_with_tombstones().await.expect("rows");
    let typed_before = h.typed_rows(&columns).await;
    let cases: [(&str, &str, ColumnProblem, &str); 5] = [
        ("not json", "status", ColumnProblem::NotJson, "not json"),
        (
            r#"{"status": "x"}"#,
            "total_cents",
            ColumnProblem::Missing,
            "",
        ),
        (
            r#"{"status": "x", "total_cents": "12"}"#,
            "total_cents",
            ColumnProblem::WrongType(crate::columns::ColumnType::Integer),
            "\"12\"",
        ),
        (
            r#"{"status": "x", "total_cents": 9223372036854775808}"#,
            "total_cents",
            ColumnProblem::OutOfRange,
            "9223372036854775808",
        ),
        (
            r#"{"status": "x", "total_cents": 1, "placed": {"at": "2026-03-01T10:00:00"}}"#,
            "placed_at",
            ColumnProblem::NotAnInstant,
            "\"2026-03-01T10:00:00\"",
        ),
    ];
    for (value, column, problem, text) in cases {
        // Newer versions of stored keys, new keys, and the bad record last.
        let mut batch: Vec<Record> = (0..5)
            .map(|i| order(&format!("bad/{i}"), 2, 100 + i, 20))
            .collect();
        batch.push(sparse("bad/new", 2, 1, 20));
        batch.push(rec("bad/zz", day(2), value, at(20)));
        let err = upsert(&store, day(2), batch, WriteOptions::default())
            .await
            .expect_err(value);
        let err = invalid_column(err);
        assert_eq!(
            (
                err.key.as_str(),
                err.column.as_str(),
                err.problem,
                err.text.as_str()
            ),
            ("bad/zz", column, problem, text),
            "{value}"
        );
        assert_eq!(
            store.rows_with_tombstones().await.expect("rows"),
            before,
            "{value}"
        );
        assert_eq!(h.typed_rows(&columns).await, typed_before, "{value}");
    }
    // Another day goes on.
    upsert(
        &store,
        day(3),
        vec![order("bad/other", 3, 1, 10)],
        WriteOptions::default(),
    )
    .await
    .expect("another day");
    assert_columns_match(h, &store, &columns).await;
}

/// With columns declared, every apply counts, stores and digests exactly
/// as [`MemoryStore`] (which has none) — new rows, a re-run, stale and
/// newer versions, tombstones, a listing — and a re-run writes nothing.
pub async fn the_records_counts_and_digests_are_unchanged_by_columns<H: TypedStore>(h: &H) {
    let columns = every_type();
    let store = open(h, &columns).await;
    let reference = MemoryStore::new();
    let d = day(4);
    let batches: Vec<(Vec<Record>, WriteOptions)> = vec![
        (
            (0..20)
                .map(|i| order(&format!("same/{i:02}"), 4, i, 10))
                .collect(),
            WriteOptions::default(),
        ),
        (
            (0..20)
                .map(|i| order(&format!("same/{i:02}"), 4, i, 10))
                .collect(),
            WriteOptions::default(),
        ),
        (
            (0..20)
                .map(|i| match i % 3 {
                    0 => order(&format!("same/{i:02}"), 4, i, 5),
                    1 => sparse(&format!("same/{i:02}"), 4, i, 30),
                    _ => tomb(&format!("same/{i:02}"), d, at(30)),
                })
                .collect(),
            WriteOptions::default(),
        ),
        (
            (0..10)
                .map(|i| order(&format!("same/{i:02}"), 4, i, 40))
                .collect(),
            super::fixtures::listing(at(50)),
        ),
    ];
    for (i, (batch, options)) in batches.into_iter().enumerate() {
        let got = upsert(&store, d, batch.clone(), options)
            .await
            .expect("apply");
        let want = upsert(&reference, d, batch, options)
            .await
            .expect("reference");
        assert_eq!(got, want, "batch {i}: counts");
        if i == 1 {
            assert_eq!(got.unchanged, 20, "the re-run writes nothing: {got:?}");
        }
        let (ours, theirs) = (synced(&store, d).await, synced(&reference, d).await);
        assert_eq!(
            ours.map(|s| s.digest),
            theirs.map(|s| s.digest),
            "batch {i}: digest"
        );
        let (ours, theirs) = (
            store.rows_with_tombstones().await.expect("rows"),
            reference.rows_with_tombstones().await.expect("rows"),
        );
        assert_eq!(ours, theirs, "batch {i}: rows");
    }
    assert_columns_match(h, &store, &columns).await;
}

async fn synced(store: &dyn Store, d: chrono::NaiveDate) -> Option<crate::SyncedDay> {
    store
        .ledger(d..=d)
        .await
        .expect("reading the ledger")
        .pop()
        .and_then(|e| e.synced)
}

/// A column declared later is added to the table with rows and filled
/// from them; one a stored row does not fit refuses the upgrade naming
/// the key, and leaves the table as it was.
pub async fn a_column_declared_later_is_filled_from_the_rows<H: TypedStore>(h: &H) {
    let first = declared(&["status:text"]);
    let store = open(h, &first).await;
    let rows: Vec<Record> = mixed("up/", 5, 30);
    upsert(&store, day(5), rows.clone(), WriteOptions::default())
        .await
        .expect("the rows");
    drop(store);
    // A column `up/001` (sparse: no `placed`) does not fit.
    let unfit = declared(&["status:text", "placed_at:timestamptz=placed.at"]);
    let err = invalid_column(refused(h, &unfit, "an unfit column").await);
    assert_eq!(
        (err.key.as_str(), err.column.as_str()),
        ("up/001", "placed_at")
    );
    assert_eq!(err.problem, ColumnProblem::Missing);
    // The table is as it was: the first declaration opens it.
    let store = open(h, &first).await;
    assert_columns_match(h, &store, &first).await;
    drop(store);
    // Every type, added and filled.
    let all = declared(&[
        "status:text",
        "total_cents:integer",
        "ratio:double?",
        "amount:numeric?",
        "paid:boolean?",
        "placed_on:date?=placed.on",
        "placed_at:timestamptz?=placed.at",
        "meta:json?",
    ]);
    let store = open(h, &all).await;
    assert_eq!(assert_columns_match(h, &store, &all).await, 30);
    let again = upsert(&store, day(5), rows, WriteOptions::default())
        .await
        .expect("the re-run");
    assert_eq!(again.unchanged, 30, "{again:?}");
}

/// A declaration that lacks a column of the table, or gives one another
/// type, is refused on open, naming the column.
pub async fn a_declaration_that_differs_is_refused_naming_the_column<H: TypedStore>(h: &H) {
    drop(open(h, &declared(&["status:text", "total_cents:integer"])).await);
    for (other, column) in [
        (declared(&["status:text"]), "total_cents"),
        (
            declared(&["status:text", "total_cents:double"]),
            "total_cents",
        ),
        (
            declared(&["status:boolean", "total_cents:integer"]),
            "status",
        ),
    ] {
        let err = refused(h, &other, "a differing declaration").await;
        assert!(err.to_string().contains(column), "{column}: {err}");
    }
    drop(open(h, &declared(&["status:text", "total_cents:integer"])).await);
}

/// A day streamed in pages keeps the columns as one batch does, and a
/// record that does not fit in its last page writes nothing of the day.
pub async fn a_streamed_day_keeps_the_columns<H: TypedStore>(h: &H) {
    let columns = every_type();
    let store = open(h, &columns).await;
    let records: Vec<Record> = mixed("st/", 6, 40);
    let chunks = |records: Vec<Record>| {
        stream::iter(
            records
                .chunks(3)
                .map(|c| Ok::<_, std::convert::Infallible>(c.to_vec()))
                .collect::<Vec<_>>(),
        )
    };
    let counts = upsert_stream(
        &store,
        day(6),
        chunks(records.clone()),
        WriteOptions::default().stream_memory(0),
    )
    .await
    .expect("the stream");
    assert_eq!(counts.inserted + counts.deleted, 40, "{counts:?}");
    assert_eq!(assert_columns_match(h, &store, &columns).await, 40);
    let before = h.typed_rows(&columns).await;
    let mut newer: Vec<Record> = (0..40)
        .map(|i| order(&format!("st/{i:03}"), 6, 1000 + i, 20))
        .collect();
    newer.push(rec(
        "st/zz",
        day(6),
        r#"{"status": 1, "total_cents": 1}"#,
        at(20),
    ));
    let err = upsert_stream(
        &store,
        day(6),
        chunks(newer),
        WriteOptions::default().stream_memory(0),
    )
    .await
    .expect_err("a record that does not fit");
    let err = invalid_column(err);
    assert_eq!((err.key.as_str(), err.column.as_str()), ("st/zz", "status"));
    assert_eq!(h.typed_rows(&columns).await, before);
}

/// Allowed column changes: a typed column the declaration lacks is
/// dropped, one declared with another type is remade and filled from the
/// rows; a row that does not fit the new type refuses the open naming its
/// key and leaves the table as it was; without the permission the same
/// declaration is refused.
pub async fn columns_change_only_when_allowed<H: TypedStore>(h: &H) {
    // `paid` indexed: its index goes with it.
    let with_index = |columns: Columns| {
        Columns::new(columns.iter().map(|c| {
            let indexed = c.name() == "paid";
            c.clone().indexed(indexed)
        }))
        .expect("a valid declaration")
    };
    let before = with_index(declared(&[
        "status:text",
        "total_cents:integer",
        "paid:boolean?",
        "note:text?",
    ]));
    let store = open(h, &before).await;
    let rows: Vec<Record> = mixed("ch/", 7, 12);
    upsert(&store, day(7), rows.clone(), WriteOptions::default())
        .await
        .expect("the rows");
    drop(store);
    // `paid` dropped, `total_cents` remade as a double, `note` kept.
    let after = declared(&["status:text", "total_cents:double", "note:text?"]);
    let err = refused(h, &after, "a change without the permission").await;
    assert!(err.to_string().contains("total_cents"), "{err}");
    // A remade column a row does not fit: refused, naming the row.
    let unfit = with_index(declared(&[
        "status:integer",
        "total_cents:integer",
        "paid:boolean?",
        "note:text?",
    ]));
    let err = match h.open_changing(&unfit).await {
        Ok(_) => panic!("a remade column a row does not fit: opened"),
        Err(e) => invalid_column(e),
    };
    assert_eq!(
        (err.key.as_str(), err.column.as_str()),
        ("ch/000", "status")
    );
    let store = open(h, &before).await;
    assert_columns_match(h, &store, &before).await;
    drop(store);
    let store = h
        .open_changing(&after)
        .await
        .unwrap_or_else(|e| panic!("an allowed change: {e}"));
    assert_eq!(assert_columns_match(h, &store, &after).await, 12);
    let again = upsert(&store, day(7), rows, WriteOptions::default())
        .await
        .expect("the re-run");
    assert_eq!(again.unchanged, 12, "{again:?}");
    drop(store);
    // Now the table's declaration: it opens without the permission.
    drop(open(h, &after).await);
}
