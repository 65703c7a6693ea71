//! Tombstones, listings and the watermark as SQLite stores them: what lands
//! in the tables, that re-applying writes no record (SQLite's own change
//! counter, in which each apply also counts exactly one row: its day's
//! ledger row), that a refused listing writes nothing, and purge.

use backfill_core::conformance::fixtures::{at, jan, listing, rec, tomb};
use backfill_core::{upsert, Error, MemoryStore, Mode, Record, ReplaceGuard, Store, WriteOptions};
use backfill_sqlite::SqliteStore;
use rusqlite::Connection;

async fn file_store(dir: &tempfile::TempDir) -> (SqliteStore, std::path::PathBuf) {
    let path = dir.path().join("db.sqlite");
    (SqliteStore::open(&path).await.unwrap(), path)
}

/// Every row of the records table as SQLite holds it.
fn raw_rows(path: &std::path::Path) -> Vec<(String, String, String, String, i64)> {
    Connection::open(path)
        .unwrap()
        .prepare(
            "SELECT key, event_date, value, updated_at, deleted FROM backfill_records ORDER BY key",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn watermark(path: &std::path::Path, d: u32) -> Option<String> {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT listing_watermark FROM backfill_days
             WHERE records_table = 'backfill_records' AND day = ?1",
            [jan(d).to_string()],
            |r| r.get(0),
        )
        .ok()
}

#[tokio::test]
async fn tombstones_are_rows_with_deleted_set_and_an_empty_value() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir).await;
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1)), rec("b", jan(1), "w", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let gone = tomb("a", jan(1), at(2));
    let c = upsert(&store, jan(1), vec![gone.clone()], WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((c.deleted, c.written()), (1, 1));
    assert_eq!(
        raw_rows(&path),
        [
            (
                "a".into(),
                "2026-01-01".into(),
                "".into(),
                "2026-01-01T00:00:02.000000Z".into(),
                1
            ),
            (
                "b".into(),
                "2026-01-01".into(),
                "w".into(),
                "2026-01-01T00:00:01.000000Z".into(),
                0
            ),
        ]
    );
    // Reads see live rows only; the explicit call sees both.
    assert_eq!(store.get("a").await.unwrap(), None);
    assert_eq!(
        store.rows().await.unwrap(),
        vec![rec("b", jan(1), "w", at(1))]
    );
    assert_eq!(
        store.day_rows(jan(1)).await.unwrap(),
        vec![rec("b", jan(1), "w", at(1))]
    );
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        vec![gone, rec("b", jan(1), "w", at(1))]
    );
}

#[tokio::test]
async fn a_tombstone_re_applied_writes_nothing() {
    let store = SqliteStore::open_in_memory().await.unwrap();
    upsert(
        &store,
        jan(1),
        vec![rec("a", jan(1), "v", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    let gone = vec![tomb("a", jan(1), at(2))];
    upsert(&store, jan(1), gone.clone(), WriteOptions::default())
        .await
        .unwrap();
    let before = store.total_changes().await.unwrap();
    for _ in 0..3 {
        let c = upsert(&store, jan(1), gone.clone(), WriteOptions::default())
            .await
            .unwrap();
        assert_eq!((c.unchanged, c.written()), (1, 0));
        // The deleted version, re-delivered late: stale, no write.
        let c = upsert(
            &store,
            jan(1),
            vec![rec("a", jan(1), "v", at(1))],
            WriteOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!((c.stale, c.written()), (1, 0));
    }
    // Six applies: six ledger rows and their timings written, no record.
    assert_eq!(store.total_changes().await.unwrap(), before + 12);
}

#[tokio::test]
async fn a_listing_re_applied_writes_nothing_and_an_older_one_neither() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir).await;
    let records: Vec<Record> = (0..10)
        .map(|i| rec(&format!("k{i}"), jan(1), "v", at(i)))
        .collect();
    upsert(&store, jan(1), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    let before = store.total_changes().await.unwrap();
    let c = upsert(&store, jan(1), records[..8].to_vec(), listing(at(100)))
        .await
        .unwrap();
    assert_eq!((c.deleted, c.unlisted, c.unchanged), (2, 2, 8));
    // Two tombstones and the day's ledger row, with its watermark, and its
    // timing.
    assert_eq!(store.total_changes().await.unwrap(), before + 4);
    assert_eq!(
        watermark(&path, 1).as_deref(),
        Some("2026-01-01T00:01:40.000000Z")
    );
    let after = store.total_changes().await.unwrap();
    for as_of in [100, 50] {
        let c = upsert(&store, jan(1), records[..8].to_vec(), listing(at(as_of)))
            .await
            .unwrap();
        assert_eq!((c.written(), c.unchanged), (0, 8), "as of {as_of}");
    }
    // An older listing lacking a kept row does not delete it if the row is
    // newer than that listing.
    let c = upsert(&store, jan(1), records[..5].to_vec(), listing(at(6)))
        .await
        .unwrap();
    assert_eq!(c.deleted, 2, "k5 and k6 (at 5 and 6 s), not k7 (at 7 s)");
    // Two tombstones and three ledger rows and timings (the re-applies
    // wrote no record).
    assert_eq!(store.total_changes().await.unwrap(), after + 2 + 3 * 2);
    assert_eq!(
        watermark(&path, 1).as_deref(),
        Some("2026-01-01T00:01:40.000000Z"),
        "the watermark never goes down"
    );
}

#[tokio::test]
async fn a_version_under_the_watermark_is_written_as_its_own_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir).await;
    upsert(&store, jan(1), Vec::new(), listing(at(20)))
        .await
        .unwrap();
    let c = upsert(
        &store,
        jan(1),
        vec![rec("late", jan(1), "v", at(15))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((c.deleted, c.inserted), (1, 0));
    assert_eq!(
        raw_rows(&path),
        [(
            "late".into(),
            "2026-01-01".into(),
            "".into(),
            "2026-01-01T00:00:15.000000Z".into(),
            1
        )]
    );
    let before = store.total_changes().await.unwrap();
    let c = upsert(
        &store,
        jan(1),
        vec![rec("late", jan(1), "v", at(15))],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((c.stale, c.written()), (1, 0));
    // Its ledger row and its timing, no record.
    assert_eq!(store.total_changes().await.unwrap(), before + 2);
}

#[tokio::test]
async fn a_refused_listing_writes_nothing_not_even_its_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir).await;
    let records: Vec<Record> = (0..10)
        .map(|i| rec(&format!("k{i}"), jan(1), "v", at(i)))
        .collect();
    upsert(&store, jan(1), records.clone(), WriteOptions::default())
        .await
        .unwrap();
    let rows = raw_rows(&path);
    let ledger = store.ledger(jan(1)..=jan(1)).await.unwrap();
    // An empty listing under the default guard, and one that would delete
    // 30% of the day under a 20% guard (with a new key in it, merged first
    // and rolled back with the rest).
    let careful = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(100))
        .replace_guard(ReplaceGuard::default().max_delete_fraction(0.2));
    let mut most = records[3..].to_vec();
    most.push(rec("new", jan(1), "v", at(1)));
    for (batch, options) in [
        (
            Vec::new(),
            WriteOptions::default().mode(Mode::Replace).as_of(at(100)),
        ),
        (most, careful),
    ] {
        match upsert(&store, jan(1), batch, options).await {
            Err(e @ Error::ReplaceRefused { .. }) => assert!(!e.is_retryable()),
            other => panic!("expected ReplaceRefused, got {other:?}"),
        }
    }
    // (`total_changes` counts the rolled-back merge of "new" too: compare
    // what is stored.)
    assert_eq!(raw_rows(&path), rows);
    assert_eq!(watermark(&path, 1), None);
    assert_eq!(
        store.ledger(jan(1)..=jan(1)).await.unwrap(),
        ledger,
        "a refused listing writes no ledger row"
    );
}

#[tokio::test]
async fn purge_removes_only_tombstones_older_than_the_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = file_store(&dir).await;
    upsert(
        &store,
        jan(1),
        vec![
            rec("live-old", jan(1), "v", at(1)),
            tomb("gone-old", jan(1), at(5)),
            tomb("gone-edge", jan(1), at(10)),
            tomb("gone-new", jan(1), at(20)),
        ],
        WriteOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(store.purge_tombstones(at(10)).await.unwrap(), 1);
    let keys: Vec<String> = raw_rows(&path).into_iter().map(|r| r.0).collect();
    assert_eq!(keys, ["gone-edge", "gone-new", "live-old"]);
    assert_eq!(store.purge_tombstones(at(10)).await.unwrap(), 0);
    assert_eq!(store.purge_tombstones(at(1000)).await.unwrap(), 2);
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        vec![rec("live-old", jan(1), "v", at(1))]
    );

    // A read-only store purges nothing.
    drop(store);
    let read_only = SqliteStore::builder(&path)
        .read_only(true)
        .open()
        .await
        .unwrap();
    match read_only.purge_tombstones(at(1000)).await {
        Err(e @ Error::Backend { .. }) => assert!(e.to_string().contains("read-only"), "{e}"),
        other => panic!("expected a Backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn ends_in_the_reference_stores_state_batch_by_batch() {
    // A short history mixing merges, tombstones, listings (also older ones
    // and a lenient batch for another day) and a key moving days.
    let lenient = WriteOptions::default().event_dates(backfill_core::EventDates::Lenient);
    let steps: Vec<(u32, Vec<Record>, WriteOptions)> = vec![
        (
            1,
            vec![
                rec("a", jan(1), "1", at(1)),
                rec("b", jan(1), "1", at(1)),
                rec("c", jan(1), "1", at(1)),
            ],
            WriteOptions::default(),
        ),
        (1, vec![rec("a", jan(1), "2", at(5))], listing(at(10))),
        (
            1,
            vec![
                rec("b", jan(1), "0", at(3)),
                rec("d", jan(1), "1", at(8)),
                rec("e", jan(1), "1", at(12)),
            ],
            WriteOptions::default(),
        ),
        (
            2,
            vec![rec("a", jan(2), "3", at(11)), rec("c", jan(1), "2", at(9))],
            lenient,
        ),
        (
            1,
            vec![rec("a", jan(1), "2", at(5)), rec("e", jan(1), "1", at(12))],
            listing(at(7)),
        ),
        (1, vec![tomb("e", jan(1), at(13))], WriteOptions::default()),
        (1, vec![rec("e", jan(1), "2", at(14))], listing(at(15))),
        (2, vec![], listing(at(11))),
    ];
    let sqlite = SqliteStore::open_in_memory().await.unwrap();
    let memory = MemoryStore::new();
    for (i, (d, records, options)) in steps.into_iter().enumerate() {
        let got = upsert(&sqlite, jan(d), records.clone(), options).await;
        let want = upsert(&memory, jan(d), records, options).await;
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "counts of step {i}"),
            (got, want) => assert_eq!(
                got.map_err(|e| e.to_string()),
                want.map_err(|e| e.to_string()),
                "step {i}"
            ),
        }
        assert_eq!(
            sqlite.rows_with_tombstones().await.unwrap(),
            memory.rows_with_tombstones().await.unwrap(),
            "state after step {i}"
        );
    }
}
