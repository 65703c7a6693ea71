//! Schema version 3, the day ledger, as SQLite stores it: the ledger row
//! commits with the day's rows or not at all, a re-run writes its ledger
//! row and no record, failures are kept beside the last success, a
//! version-2 file is upgraded in place (the shared days table once, for
//! every records table), and the ledger columns are checked on open.

use backfill_core::conformance::fixtures::{at, jan, listing, rec, tomb};
use backfill_core::{
    backfill, upsert, DayFailure, DayState, Error, Mode, Record, RunId, Store, WriteOptions,
};
use backfill_sqlite::SqliteStore;
use chrono::{Duration, NaiveDate, Utc};
use std::path::{Path, PathBuf};

use super::raw;

async fn file_store(dir: &tempfile::TempDir, table: &str) -> (SqliteStore, PathBuf) {
    let path = dir.path().join("db.sqlite");
    let store = SqliteStore::builder(&path)
        .table(table)
        .open()
        .await
        .unwrap();
    (store, path)
}

/// Counts every row written to `backfill_records` and `backfill_days`, by
/// triggers, in a table `writes`.
fn count_writes(path: &Path) {
    let mut ddl = String::from(
        "CREATE TABLE writes (tbl TEXT PRIMARY KEY, n INTEGER NOT NULL);
         INSERT INTO writes VALUES ('backfill_records', 0), ('backfill_days', 0);",
    );
    for table in ["backfill_records", "backfill_days"] {
        for op in ["INSERT", "UPDATE", "DELETE"] {
            ddl.push_str(&format!(
                "CREATE TRIGGER count_{table}_{op} AFTER {op} ON {table}
                 BEGIN UPDATE writes SET n = n + 1 WHERE tbl = '{table}'; END;"
            ));
        }
    }
    raw(path).execute_batch(&ddl).unwrap();
}

fn writes(path: &Path) -> (i64, i64) {
    let conn = raw(path);
    let n = |t: &str| {
        conn.query_row("SELECT n FROM writes WHERE tbl = ?1", [t], |r| r.get(0))
            .unwrap()
    };
    (n("backfill_records"), n("backfill_days"))
}

#[tokio::test]
async fn a_success_writes_the_days_ledger_row_with_its_counts() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    assert_eq!(store.ledger(jan(1)..=jan(31)).await.unwrap(), []);
    let before = Utc::now();
    let c = upsert(
        &store,
        jan(2),
        vec![
            rec("a", jan(2), "v", at(1)),
            rec("a", jan(2), "w", at(2)),
            rec("b", jan(2), "v", at(1)),
        ],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let ledger = store.ledger(jan(1)..=jan(31)).await.unwrap();
    assert_eq!(ledger.len(), 1);
    let entry = &ledger[0];
    assert_eq!((entry.day, entry.state()), (jan(2), DayState::Synced));
    assert_eq!(
        (entry.failure.as_ref(), entry.listing_watermark),
        (None, None)
    );
    let synced = entry.synced.as_ref().unwrap();
    assert!(synced.at >= before - Duration::seconds(1) && synced.at <= Utc::now());
    assert_eq!(synced.at.timestamp_subsec_nanos() % 1000, 0, "microseconds");
    assert_eq!(
        (synced.run_id.as_ref(), synced.mode, synced.as_of),
        (None, Mode::Merge, None)
    );
    assert_eq!(synced.counts, c);
    assert_eq!((synced.counts.inserted, synced.counts.collapsed), (2, 1));

    // A listing: its watermark and as_of; the range bounds are inclusive
    // and days without a row are absent.
    upsert(
        &store,
        jan(3),
        vec![rec("c", jan(3), "v", at(1))],
        listing(at(50)),
    )
    .await
    .unwrap();
    let ledger = store.ledger(jan(2)..=jan(3)).await.unwrap();
    let days: Vec<_> = ledger.iter().map(|e| e.day).collect();
    assert_eq!(days, [jan(2), jan(3)]);
    let synced = ledger[1].synced.as_ref().unwrap();
    assert_eq!((synced.mode, synced.as_of), (Mode::Replace, Some(at(50))));
    assert_eq!(ledger[1].listing_watermark, Some(at(50)));
    assert_eq!(store.ledger(jan(3)..=jan(3)).await.unwrap().len(), 1);
    assert_eq!(store.ledger(jan(4)..=jan(31)).await.unwrap(), []);
    assert_eq!(store.ledger(jan(3)..=jan(2)).await.unwrap(), []);

    // A later merge of the day keeps its watermark; an older listing does
    // not lower it.
    upsert(
        &store,
        jan(3),
        vec![rec("c", jan(3), "v", at(1))],
        listing(at(40)),
    )
    .await
    .unwrap();
    upsert(
        &store,
        jan(3),
        vec![rec("c", jan(3), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let entry = &store.ledger(jan(3)..=jan(3)).await.unwrap()[0];
    assert_eq!(entry.listing_watermark, Some(at(50)));
    assert_eq!(entry.synced.as_ref().unwrap().mode, Mode::Merge);
}

#[tokio::test]
async fn a_run_writes_its_run_id_and_the_digest_of_what_it_applied() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    async fn fetch(d: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
        let at = d.and_hms_opt(8, 0, 0).unwrap().and_utc();
        Ok(vec![rec(&format!("k:{d}"), d, "v", at)])
    }
    backfill(&store, &fetch, jan(1)..=jan(3)).await.unwrap();
    let ledger = store.ledger(jan(1)..=jan(3)).await.unwrap();
    assert_eq!(ledger.len(), 3);
    let run: Vec<Option<RunId>> = ledger
        .iter()
        .map(|e| e.synced.as_ref().unwrap().run_id.clone())
        .collect();
    assert!(
        run[0].is_some() && run.iter().all(|r| *r == run[0]),
        "{run:?}"
    );
    let digests: Vec<_> = ledger
        .iter()
        .map(|e| e.synced.as_ref().unwrap().digest)
        .collect();
    assert!(digests[0] != digests[1] && digests[1] != digests[2]);
    // The digest the reference store computes for the same fetch.
    let memory = backfill_core::MemoryStore::new();
    backfill(&memory, &fetch, jan(1)..=jan(1)).await.unwrap();
    let expected = memory.ledger(jan(1)..=jan(1)).await.unwrap()[0]
        .synced
        .as_ref()
        .unwrap()
        .digest;
    assert_eq!(digests[0], expected);
}

#[tokio::test]
async fn a_rerun_writes_its_ledger_row_and_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir, "backfill_records").await;
    let records: Vec<Record> = (0..100)
        .map(|i| rec(&format!("k{i:03}"), jan(1), "v", at(i)))
        .collect();
    upsert(&store, jan(1), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    upsert(&store, jan(1), records[..90].to_vec(), listing(at(1000)))
        .await
        .unwrap();
    let first = store.ledger(jan(1)..=jan(1)).await.unwrap();
    count_writes(&path);
    for (batch, options) in [
        (records.clone(), WriteOptions::default()),
        (records[..90].to_vec(), listing(at(1000))),
        (records[..90].to_vec(), listing(at(999))),
    ] {
        let before = writes(&path);
        let c = upsert(&store, jan(1), batch, options).await.unwrap();
        assert_eq!(c.written(), 0);
        let after = writes(&path);
        assert_eq!(after.0, before.0, "no tuple in the records table");
        assert_eq!(after.1, before.1 + 1, "exactly the one ledger row update");
    }
    let last = store.ledger(jan(1)..=jan(1)).await.unwrap();
    let (first, last) = (&first[0], &last[0]);
    assert!(last.synced.as_ref().unwrap().at > first.synced.as_ref().unwrap().at);
    assert_eq!(last.listing_watermark, first.listing_watermark);
    let unlisted = |e: &backfill_core::LedgerEntry| e.synced.as_ref().unwrap().counts.unlisted;
    assert_eq!((unlisted(first), unlisted(last)), (10, 0));
}

#[tokio::test]
async fn a_failing_batch_leaves_neither_its_rows_nor_its_ledger_row() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir, "backfill_records").await;
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
    let rows = store.rows_with_tombstones().await.unwrap();

    // A record refused by SQLite after others of the batch were written.
    raw(&path)
        .execute_batch(
            "CREATE TRIGGER boom BEFORE INSERT ON backfill_records WHEN NEW.key = 'k5'
             BEGIN SELECT RAISE(ABORT, 'boom'); END;",
        )
        .unwrap();
    let batch: Vec<Record> = (0..10)
        .map(|i| rec(&format!("k{i}"), jan(2), "v", at(1)))
        .collect();
    let e = upsert(&store, jan(2), batch.clone(), WriteOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("boom"), "{e}");
    assert_eq!(store.rows_with_tombstones().await.unwrap(), rows);
    assert_eq!(store.ledger(jan(1)..=jan(2)).await.unwrap(), ledger);

    // The ledger row refused, last: the batch's rows go with it.
    raw(&path)
        .execute_batch(
            "DROP TRIGGER boom;
             CREATE TRIGGER boom BEFORE INSERT ON backfill_days
             BEGIN SELECT RAISE(ABORT, 'no ledger'); END;",
        )
        .unwrap();
    let e = upsert(&store, jan(2), batch.clone(), WriteOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no ledger"), "{e}");
    assert_eq!(store.rows_with_tombstones().await.unwrap(), rows);
    assert_eq!(store.ledger(jan(1)..=jan(2)).await.unwrap(), ledger);

    raw(&path).execute_batch("DROP TRIGGER boom").unwrap();
    let c = upsert(&store, jan(2), batch, WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(c.inserted, 10);
    assert_eq!(store.ledger(jan(1)..=jan(2)).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_failure_keeps_the_last_success_and_a_later_success_clears_it() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    // A day that never succeeded.
    let run = RunId::new();
    let failure = DayFailure::new(at(10), Some(run.clone()), 3, "503 Service Unavailable");
    store.record_failure(jan(1), &failure).await.unwrap();
    let entry = &store.ledger(jan(1)..=jan(1)).await.unwrap()[0];
    assert_eq!(entry.state(), DayState::Failed);
    assert_eq!(
        (entry.synced.as_ref(), entry.failure.as_ref()),
        (None, Some(&failure))
    );

    // A success clears it; a failure after keeps the success and the
    // watermark.
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        listing(at(20)),
    )
    .await
    .unwrap();
    let synced = store.ledger(jan(1)..=jan(1)).await.unwrap()[0].clone();
    assert_eq!(
        (synced.state(), synced.failure.as_ref()),
        (DayState::Synced, None)
    );
    let long = "x".repeat(backfill_core::MAX_ERROR_BYTES * 2);
    let later = DayFailure::new(at(30), None, 1, &long);
    store.record_failure(jan(1), &later).await.unwrap();
    let entry = &store.ledger(jan(1)..=jan(1)).await.unwrap()[0];
    assert_eq!(entry.state(), DayState::Failed);
    assert_eq!(entry.synced, synced.synced);
    assert_eq!(entry.listing_watermark, Some(at(20)));
    assert_eq!(entry.failure.as_ref(), Some(&later));
    assert!(later.error.len() <= backfill_core::MAX_ERROR_BYTES);

    // Overwritten by the next failure, cleared by the next success.
    store.record_failure(jan(1), &failure).await.unwrap();
    assert_eq!(
        store.ledger(jan(1)..=jan(1)).await.unwrap()[0]
            .failure
            .as_ref(),
        Some(&failure)
    );
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let entry = &store.ledger(jan(1)..=jan(1)).await.unwrap()[0];
    assert_eq!(
        (entry.state(), entry.failure.as_ref()),
        (DayState::Synced, None)
    );
    assert_eq!(entry.listing_watermark, Some(at(20)));
}

#[tokio::test]
async fn a_read_only_store_reads_the_ledger_and_records_no_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir, "backfill_records").await;
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    store
        .record_failure(jan(2), &DayFailure::new(at(1), None, 2, "timeout"))
        .await
        .unwrap();
    let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
    drop(store);
    let read_only = SqliteStore::builder(&path)
        .read_only(true)
        .open()
        .await
        .unwrap();
    assert_eq!(read_only.ledger(jan(1)..=jan(2)).await.unwrap(), ledger);
    match read_only
        .record_failure(jan(1), &DayFailure::new(at(2), None, 1, "x"))
        .await
    {
        Err(e @ Error::Backend { .. }) => {
            assert!(!e.is_retryable());
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
    assert_eq!(read_only.ledger(jan(1)..=jan(2)).await.unwrap(), ledger);
}

/// A version-2 database: records tables `a` and `b` (with rows), the
/// metadata tables as version 2 made them, a watermark for each.
const V2_DDL: &str = r#"
CREATE TABLE backfill_tables (
    records_table TEXT NOT NULL COLLATE BINARY PRIMARY KEY,
    schema_version INTEGER NOT NULL
) STRICT;
CREATE TABLE backfill_days (
    records_table TEXT NOT NULL COLLATE BINARY,
    day TEXT NOT NULL COLLATE BINARY
        CHECK (length(day) = 10 AND date(day, '+0 days') IS day AND day BETWEEN '0001-01-01' AND '9999-12-31'),
    listing_watermark TEXT COLLATE BINARY
        CHECK (listing_watermark IS NULL OR (length(listing_watermark) = 27 AND substr(listing_watermark, 1, 4) BETWEEN '0001' AND '9999' AND strftime('%Y-%m-%dT%H:%M:%S', substr(listing_watermark, 1, 19), '+0 days') IS substr(listing_watermark, 1, 19) AND substr(listing_watermark, 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]Z')),
    PRIMARY KEY (records_table, day)
) STRICT;
"#;

fn v2_records_ddl(table: &str) -> String {
    format!(
        r#"
CREATE TABLE "{table}" (
    key TEXT NOT NULL COLLATE BINARY PRIMARY KEY
        CHECK (length(CAST(key AS BLOB)) BETWEEN 1 AND 512 AND instr(CAST(key AS BLOB), x'00') = 0),
    event_date TEXT NOT NULL COLLATE BINARY
        CHECK (length(event_date) = 10 AND date(event_date, '+0 days') IS event_date AND event_date BETWEEN '0001-01-01' AND '9999-12-31'),
    value TEXT NOT NULL COLLATE BINARY
        CHECK (instr(CAST(value AS BLOB), x'00') = 0),
    updated_at TEXT NOT NULL COLLATE BINARY
        CHECK (length(updated_at) = 27 AND substr(updated_at, 1, 4) BETWEEN '0001' AND '9999' AND strftime('%Y-%m-%dT%H:%M:%S', substr(updated_at, 1, 19), '+0 days') IS substr(updated_at, 1, 19) AND substr(updated_at, 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    deleted INTEGER NOT NULL DEFAULT 0
        CHECK (deleted IN (0, 1) AND (deleted = 0 OR value = ''))
) STRICT;
CREATE INDEX "{table}:event_date" ON "{table}" (event_date);
INSERT INTO backfill_tables VALUES ('{table}', 2);
INSERT INTO "{table}" VALUES ('live', '2026-01-01', 'v', '2026-01-01T00:00:01.000000Z', 0);
INSERT INTO "{table}" VALUES ('gone', '2026-01-01', '', '2026-01-01T00:00:02.000000Z', 1);
INSERT INTO backfill_days VALUES ('{table}', '2026-01-01', '2026-01-01T00:01:40.000000Z');
"#
    )
}

fn v2_file(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("v2.sqlite");
    let conn = raw(&path);
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch(V2_DDL).unwrap();
    for table in ["a", "b"] {
        conn.execute_batch(&v2_records_ddl(table)).unwrap();
    }
    path
}

fn version(path: &Path, table: &str) -> i64 {
    raw(path)
        .query_row(
            "SELECT schema_version FROM backfill_tables WHERE records_table = ?1",
            [table],
            |r| r.get(0),
        )
        .unwrap()
}

fn days_columns(path: &Path) -> Vec<String> {
    raw(path)
        .prepare("SELECT name FROM pragma_table_xinfo('backfill_days') ORDER BY cid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

const V3_DAYS_COLUMNS: [&str; 19] = [
    "records_table",
    "day",
    "listing_watermark",
    "synced_at",
    "run_id",
    "mode",
    "as_of",
    "digest",
    "inserted",
    "updated",
    "unchanged",
    "stale",
    "deleted",
    "unlisted",
    "collapsed",
    "failed_at",
    "failed_run_id",
    "attempts",
    "error",
];

fn schema_of(path: &Path) -> (i64, String) {
    let conn = raw(path);
    let cookie = conn
        .query_row("PRAGMA schema_version", [], |r| r.get(0))
        .unwrap();
    let ddl = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'backfill_days'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    (cookie, ddl)
}

#[tokio::test]
async fn a_version_2_file_is_upgraded_in_place_once_for_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = v2_file(&dir);
    let expected = vec![tomb("gone", jan(1), at(2)), rec("live", jan(1), "v", at(1))];

    // Read-only: refused, nothing changed.
    let untouched = std::fs::read(&path).unwrap();
    match SqliteStore::builder(&path)
        .table("a")
        .read_only(true)
        .open()
        .await
    {
        Err(e @ Error::Open { .. }) => {
            let message = e.to_string();
            for word in ["\"a\"", "version 2", "upgrade", "writable", "ledger"] {
                assert!(message.contains(word), "{word:?} missing from: {message}");
            }
        }
        other => panic!("expected an Open error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), untouched);

    let a = SqliteStore::builder(&path).table("a").open().await.unwrap();
    assert_eq!(a.total_changes().await.unwrap(), 0);
    assert_eq!((version(&path, "a"), version(&path, "b")), (3, 2));
    assert_eq!(days_columns(&path), V3_DAYS_COLUMNS);
    assert_eq!(a.rows_with_tombstones().await.unwrap(), expected);
    // The day synced before the upgrade: its watermark, no ledger columns,
    // so it reads as missing.
    let entry = &a.ledger(jan(1)..=jan(1)).await.unwrap()[0];
    assert_eq!(entry.state(), DayState::Missing);
    assert_eq!(entry.listing_watermark, Some(at(100)));
    // The watermark still rules.
    let c = upsert(
        &a,
        jan(1),
        vec![rec("late", jan(1), "v", at(50))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(c.deleted, 1);
    let entry = &a.ledger(jan(1)..=jan(1)).await.unwrap()[0];
    assert_eq!(entry.state(), DayState::Synced);
    assert_eq!(entry.listing_watermark, Some(at(100)));

    // `b`'s upgrade finds the columns there: only its version row moves.
    let days_schema = schema_of(&path);
    let b = SqliteStore::builder(&path).table("b").open().await.unwrap();
    assert_eq!(version(&path, "b"), 3);
    assert_eq!(schema_of(&path), days_schema, "no DDL for b");
    assert_eq!(days_columns(&path), V3_DAYS_COLUMNS);
    assert_eq!(b.rows_with_tombstones().await.unwrap(), expected);
    let entry = &b.ledger(jan(1)..=jan(2)).await.unwrap();
    assert_eq!(entry.len(), 1);
    assert_eq!(
        (entry[0].state(), entry[0].listing_watermark),
        (DayState::Missing, Some(at(100)))
    );
    drop((a, b));

    // Reopening either is a no-op.
    let bytes = std::fs::read(&path).unwrap();
    for table in ["a", "b"] {
        let store = SqliteStore::builder(&path)
            .table(table)
            .open()
            .await
            .unwrap();
        assert_eq!(store.total_changes().await.unwrap(), 0);
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[tokio::test]
async fn a_new_table_beside_version_2_tables_gives_the_days_table_its_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = v2_file(&dir);
    let c = SqliteStore::builder(&path).table("c").open().await.unwrap();
    assert_eq!(
        (
            version(&path, "a"),
            version(&path, "b"),
            version(&path, "c")
        ),
        (2, 2, 3)
    );
    assert_eq!(days_columns(&path), V3_DAYS_COLUMNS);
    upsert(
        &c,
        jan(1),
        vec![rec("k", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        c.ledger(jan(1)..=jan(1)).await.unwrap()[0].state(),
        DayState::Synced
    );
    // And `a` then upgrades without DDL.
    let days_schema = schema_of(&path);
    drop(SqliteStore::builder(&path).table("a").open().await.unwrap());
    assert_eq!(version(&path, "a"), 3);
    assert_eq!(schema_of(&path), days_schema);
}

#[tokio::test]
async fn concurrent_opens_of_a_version_2_file_upgrade_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = v2_file(&dir);
    let opens: Vec<_> = ["a", "b", "a", "b"]
        .into_iter()
        .map(|table| {
            let path = path.clone();
            tokio::spawn(async move { SqliteStore::builder(&path).table(table).open().await })
        })
        .collect();
    for handle in opens {
        handle.await.unwrap().unwrap();
    }
    assert_eq!((version(&path, "a"), version(&path, "b")), (3, 3));
    assert_eq!(days_columns(&path), V3_DAYS_COLUMNS);
}

/// Opens a version-3 file whose days table was rebuilt from the store's
/// own text with `from` replaced by `to`, and expects an `Open` error
/// naming every one of `words`.
async fn assert_days_refused(from: &str, to: &str, words: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir, "t").await;
    drop(store);
    let (_, ddl) = schema_of(&path);
    let ddl = ddl.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(ddl.contains(from), "{from:?} not in {ddl}");
    let ddl = ddl.replacen(from, to, 1);
    raw(&path)
        .execute_batch(&format!("DROP TABLE backfill_days; {ddl};"))
        .unwrap();
    match SqliteStore::builder(&path).table("t").open().await {
        Err(e @ Error::Open { .. }) => {
            let message = e.to_string();
            for word in words {
                assert!(message.contains(word), "{word:?} missing from: {message}");
            }
        }
        other => panic!("{to}: expected an Open error, got {other:?}"),
    }
}

#[tokio::test]
async fn ledger_columns_of_another_shape_are_refused() {
    for (from, to, words) in [
        (
            "digest TEXT COLLATE BINARY CHECK (",
            "digest TEXT COLLATE BINARY CHECK (1 OR ",
            &["\"digest\"", "CHECK"][..],
        ),
        (
            "inserted INTEGER CHECK",
            "inserted TEXT CHECK",
            &["\"inserted\"", "TEXT"][..],
        ),
        (
            "attempts INTEGER CHECK (attempts IS NULL OR attempts >= 1)",
            "attempts INTEGER",
            &["\"attempts\"", "no CHECK"][..],
        ),
        (
            "mode TEXT COLLATE BINARY",
            "mode TEXT NOT NULL COLLATE BINARY",
            &["\"mode\"", "NOT NULL"][..],
        ),
        (
            "run_id TEXT COLLATE BINARY,",
            "run_id TEXT COLLATE NOCASE,",
            &["\"run_id\"", "NOCASE"][..],
        ),
        (
            "error TEXT COLLATE BINARY,",
            "",
            &[r#"column "error": is missing"#][..],
        ),
    ] {
        assert_days_refused(from, to, words).await;
    }
}

/// A day's timing lives in `backfill_timings`, beside its ledger row, and
/// counts only while it belongs to that row: once a writer that does not
/// keep timings (an earlier release) has applied the day again, changing
/// its `synced_at`, the day reads as having none rather than another
/// apply's. The table is made by the first apply; a file without it reads
/// as before.
#[tokio::test]
async fn a_timing_counts_only_for_the_ledger_row_it_belongs_to() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir, "orders").await;
    let exists = |path: &Path| -> bool {
        raw(path)
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'backfill_timings'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .unwrap()
            == 1
    };
    assert!(!exists(&path), "made by the first apply, not on open");
    assert_eq!(store.ledger(jan(1)..=jan(2)).await.unwrap().len(), 0);
    for d in [jan(1), jan(2)] {
        upsert(
            &store,
            d,
            vec![rec(&format!("k{d}"), d, "v", at(1))],
            WriteOptions::default(),
        )
        .await
        .unwrap();
    }
    assert!(exists(&path));
    let timing = |entries: &[backfill_core::LedgerEntry], i: usize| {
        entries[i].synced.as_ref().unwrap().timing
    };
    let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
    assert!(timing(&ledger, 0).is_some() && timing(&ledger, 1).is_some());

    // Another writer applies 2 January without a timing.
    raw(&path)
        .execute(
            "UPDATE backfill_days SET synced_at = '2026-06-01T00:00:00.000000Z' \
             WHERE records_table = 'orders' AND day = '2026-01-02'",
            [],
        )
        .unwrap();
    let ledger = store.ledger(jan(1)..=jan(2)).await.unwrap();
    assert!(timing(&ledger, 0).is_some(), "1 January's is still its own");
    assert_eq!(
        timing(&ledger, 1),
        None,
        "2 January's belongs to no apply now"
    );
}
